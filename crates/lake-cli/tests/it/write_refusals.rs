//! The write commands' refusals through the binary: inputs refused before the first
//! upload, predicates that are not one SQL expression, writes on a table another Lance client
//! gave a column lake cannot read (refused, truthfully, before the commit), and the commands
//! that are the way out of what a killed write or an earlier build left.

use crate::{json, lake, object_files, ok, stderr, stdout, write_files};
use arrow_array::{
    ArrayRef, BinaryArray, FixedSizeBinaryArray, Int64Array, RecordBatch, RecordBatchIterator, StringArray,
    StructArray, UInt64Array,
};
use lance::deps::arrow_schema::{DataType, Field, Fields, Schema};
use lance::Dataset;
use std::path::Path;
use std::sync::Arc;

struct Lake {
    dir: tempfile::TempDir,
    root: String,
}

impl Lake {
    /// A lake and a source folder of two episodes. The floor is a day: these tests plan only dry
    /// runs, so no object needs to age, and the publication guard never meets a slow machine.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake").display().to_string();
        write_files(&dir.path().join("src"), &[("ep1/a.txt", "alpha"), ("ep2/b.txt", "beta")]);
        ok(&["init", &root, "--min-age", "1d"]);
        Lake { dir, root }
    }

    fn src(&self) -> String {
        self.dir.path().join("src").display().to_string()
    }

    fn objects(&self) -> Vec<String> {
        object_files(Path::new(&self.root))
    }

    fn versions(&self, table: &str) -> Vec<u64> {
        let out = json(&ok(&["versions", &self.root, "--table", table, "--json"]));
        out["versions"].as_array().unwrap().iter().map(|v| v["version"].as_u64().unwrap()).collect()
    }

    fn dataset_uri(&self, table: &str) -> String {
        format!("{}/tables/{table}.lance", self.root)
    }
}

/// Runs `lake args`, expecting exit 1 with `needle` on stderr; returns stderr.
fn refused(args: &[&str], needle: &str) -> String {
    let o = lake(args);
    assert_eq!(o.status.code(), Some(1), "lake {args:?}: {}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(needle), "lake {args:?}: expected `{needle}` in: {err}");
    err
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// Before the change these were refused only after every file was uploaded (the uploads
/// stayed, orphans for GC). Now nothing is uploaded.
#[test]
fn ingest_inputs_are_refused_before_the_first_upload() {
    let l = Lake::new();
    let (root, src) = (l.root.as_str(), l.src());
    refused(&["ingest", root, "--table", "bad name!", &src], "table name");
    refused(&["ingest", root, "--table", "t@nobranch", &src], "does not exist");
    refused(&["upsert", root, "--table", "t@nobranch", "--on", "path", &src], "does not exist");
    refused(&["columns", "add-files", root, "--table", "t", "--name", "thumb", &src], "does not exist");
    assert!(l.objects().is_empty(), "nothing uploaded: {:?}", l.objects());

    ok(&["ingest", root, "--table", "t", &src]);
    let uploaded = l.objects();
    assert_eq!(uploaded.len(), 2);
    refused(&["ingest", root, "--table", "t@nobranch", &src], "does not exist");
    refused(&["upsert", root, "--table", "t", "--on", "nosuch", &src], "`nosuch`");
    refused(&["columns", "add-files", root, "--table", "t", "--name", "path", &src], "cannot be named `path`");
    refused(&["columns", "add-files", root, "--table", "t", "--name", "episode", &src], "cannot be named `episode`");
    refused(&["columns", "add-files", root, "--table", "t", "--name", "file", &src], "already has a column `file`");
    refused(&["columns", "add-files", root, "--table", "t", "--name", "a.b", &src], "`a.b`");
    ok(&["columns", "drop", root, "--table", "t", "--column", "path"]);
    refused(&["columns", "add-files", root, "--table", "t", "--name", "thumb", &src], "no column `path`");
    refused(&["ingest", root, "--table", "t", &src], "no column `path`");
    assert_eq!(l.objects(), uploaded, "nothing uploaded");
}

/// Before the change `--where "episode = 'ep1'; DROP TABLE t"` deleted `ep1` and ignored the
/// rest. Now a predicate or `--set` expression must be exactly one SQL expression.
#[test]
fn predicates_and_expressions_must_be_one_sql_expression() {
    let l = Lake::new();
    let root = l.root.as_str();
    ok(&["ingest", root, "--table", "t", &l.src()]);
    refused(&["delete", root, "--table", "t", "--where", "episode = 'ep1'; DROP TABLE t"], "not one SQL expression");
    refused(&["delete", root, "--table", "t", "--where", "episode = 'ep1';"], "not one SQL expression");
    refused(
        &["update", root, "--table", "t", "--set", "episode='x'", "--where", "episode = 'ep1'; DROP TABLE t"],
        "not one SQL expression",
    );
    refused(&["update", root, "--table", "t", "--set", "episode='x'; DROP TABLE t"], "not one SQL expression");
    refused(&["update", root, "--table", "t", "--set", "episode='x', 'y'"], "not one SQL expression");
    assert_eq!(l.versions("t"), vec![1], "nothing ran");
    let out = json(&ok(&["delete", root, "--table", "t", "--where", "episode == 'ep1'", "--json"]));
    assert_eq!(out["rows_deleted"], 1);
}

/// A second client (plain Lance) merges a DataLocation look-alike column `lookalike` into `t`.
fn merge_lookalike(l: &Lake) {
    let fields = Fields::from(vec![
        Field::new("uri", DataType::Utf8, true),
        Field::new("sha256", DataType::Binary, true),
        Field::new("size", DataType::Int64, true),
    ]);
    let values: ArrayRef = Arc::new(StructArray::new(
        fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(["x", "y"])),
            Arc::new(BinaryArray::from_iter_values([[1u8; 32], [2u8; 32]])),
            Arc::new(Int64Array::from_iter_values([1, 2])),
        ],
        None,
    ));
    let schema = Arc::new(Schema::new(vec![
        Field::new("path", DataType::Utf8, false),
        Field::new("lookalike", DataType::Struct(fields), true),
    ]));
    let paths: ArrayRef = Arc::new(StringArray::from_iter_values(["ep1/a.txt", "ep2/b.txt"]));
    let rows = RecordBatch::try_new(schema.clone(), vec![paths, values]).unwrap();
    runtime().block_on(async {
        let mut ds = Dataset::open(&l.dataset_uri("t")).await.unwrap();
        ds.merge(RecordBatchIterator::new(vec![Ok(rows)], schema), "path", "path").await.unwrap();
    });
}

/// The input: before the change `lake delete`, `lake upsert` and `lake columns
/// rename/drop/add-files` committed a version on such a table, then exited 1 with "invalid
/// reference, nothing was committed". Now each refuses before its commit, says so truthfully
/// and names the way out; GC's problem no longer carries the false sentence; dropping the
/// column, then cleaning up, is the way out.
#[test]
fn writes_on_a_table_with_a_look_alike_column_commit_nothing_and_say_so() {
    let l = Lake::new();
    let (root, src) = (l.root.as_str(), l.src());
    ok(&["ingest", root, "--table", "t", &src]);
    merge_lookalike(&l);
    let before = l.versions("t");
    assert_eq!(before, vec![1, 2]);
    let uploaded = l.objects();
    let cases: [&[&str]; 7] = [
        &["delete", root, "--table", "t", "--where", "episode = 'ep1'"],
        &["upsert", root, "--table", "t", "--on", "path", &src],
        &["columns", "rename", root, "--table", "t", "--from", "episode", "--to", "ep"],
        &["columns", "drop", root, "--table", "t", "--column", "episode"],
        &["columns", "add-files", root, "--table", "t", "--name", "thumb", &src],
        &["update", root, "--table", "t", "--set", "episode='x'"],
        &["compact", root, "--table", "t"],
    ];
    for args in cases {
        let err = refused(args, "nothing was committed");
        assert!(err.contains("Drop the column `lookalike`"), "{err}");
        assert_eq!(l.versions("t"), before, "lake {args:?} committed nothing");
    }
    assert_eq!(l.objects(), uploaded, "the refused ingests uploaded nothing");

    let o = lake(&["gc", root, "--min-age", "1d", "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let plan = json(&stdout(&o));
    let problems = plan["problems"].to_string();
    assert!(problems.contains("lookalike") && !problems.contains("nothing was committed"), "{problems}");

    ok(&["columns", "drop", root, "--table", "t", "--column", "lookalike"]);
    ok(&["cleanup", root, "--table", "t", "--older-than", "0s"]);
    let o = lake(&["gc", root, "--min-age", "1d", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert_eq!(json(&ok(&["refs", "verify", root, "--json"]))["ok"], true);
}

/// What a first ingest killed between its data files and its commit leaves (made here with
/// plain Lance's uncommitted write), and a reference an earlier build wrote that is not a managed
/// key (plain Lance, then `lake refs repair`): each makes `lake gc` exit 3 naming the table and
/// the command; the commands clear them. Before the change the first was "remove the folder"
/// by hand and the second had no advice.
#[test]
fn a_killed_ingest_and_a_bad_reference_have_commands_as_the_way_out() {
    let l = Lake::new();
    let (root, src) = (l.root.as_str(), l.src());
    ok(&["ingest", root, "--table", "t", &src]);
    let key = l.objects()[0].clone();

    let rows = |uri: &str| {
        let schema = Arc::new(Schema::new(vec![
            Field::new("episode", DataType::Utf8, false),
            Field::new("path", DataType::Utf8, false),
            Field::new(
                "file",
                DataType::Struct(Fields::from(vec![
                    Field::new("uri", DataType::Utf8, false),
                    Field::new("sha256", DataType::FixedSizeBinary(32), false),
                    Field::new("size", DataType::UInt64, false),
                ])),
                false,
            )
            .with_metadata(
                [("ARROW:extension:name".to_string(), "lake.data_location".to_string())].into_iter().collect(),
            ),
        ]));
        let file = StructArray::new(
            match schema.field(2).data_type() {
                DataType::Struct(f) => f.clone(),
                _ => unreachable!(),
            },
            vec![
                Arc::new(StringArray::from_iter_values([uri])),
                Arc::new(FixedSizeBinaryArray::try_from_iter([[7u8; 32]].iter()).unwrap()),
                Arc::new(UInt64Array::from_iter_values([5])),
            ],
            None,
        );
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(["ep9"])),
                Arc::new(StringArray::from_iter_values(["ep9/z.txt"])),
                Arc::new(file),
            ],
        )
        .unwrap();
        (schema, batch)
    };

    // 1. A killed first ingest of table `k`.
    runtime().block_on(async {
        let (_, batch) = rows(&key);
        lance::dataset::InsertBuilder::new(l.dataset_uri("k").as_str()).execute_uncommitted(vec![batch]).await.unwrap();
    });
    let o = lake(&["gc", root, "--min-age", "1d"]);
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("table `k`") && text.contains("`cleanup` of table `k`"), "{text}");
    let out = json(&ok(&["cleanup", root, "--table", "k", "--older-than", "0s", "--json"]));
    assert!(out["bytes_removed"].as_u64().unwrap() > 0, "{out}");
    assert!(!Path::new(root).join("tables/k.lance").exists());
    let o = lake(&["gc", root, "--min-age", "1d"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));

    // 2. A reference with a trailing space, written around the engine and repaired.
    let bad = format!("{key} ");
    let version = runtime().block_on(async {
        let (schema, batch) = rows(&bad);
        let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
        let ds = Dataset::write(RecordBatchIterator::new(vec![Ok(batch)], schema), &l.dataset_uri("t"), Some(params))
            .await
            .unwrap();
        ds.version().version
    });
    ok(&["refs", "repair", root, "--table", "t", "--version", &version.to_string()]);
    let o = lake(&["gc", root, "--min-age", "1d"]);
    assert_eq!(o.status.code(), Some(3));
    let text = format!("{}{}", stdout(&o), stderr(&o));
    assert!(text.contains("table `t`") && text.contains("delete the rows of table `t`"), "{text}");
    ok(&["delete", root, "--table", "t", "--where", &format!("file.uri = '{bad}'")]);
    ok(&["cleanup", root, "--table", "t", "--older-than", "0s"]);
    let o = lake(&["gc", root, "--min-age", "1d"]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
}
