//! Refusals of the engine's writes, on real Lance datasets (the second client is plain
//! Lance on the dataset URI, as pylance would be):
//!
//! - kind 4: a write never reports "nothing was committed" after Lance committed. A table a
//!   second client gave a column the engine cannot read references from (a nested DataLocation,
//!   a look-alike, either inside a list) refuses every write before its commit; a journal entry
//!   that cannot be computed after a commit names the committed version;
//! - kind 10: one bad write no longer blocks GC for the whole lake. A reference inside the lake
//!   root that is not a managed key is refused by every write before its commit; a refused
//!   write leaves nothing behind; what a killed first write leaves, and a bad reference an
//!   earlier build wrote, each have a command as the way out;
//! - parts of kind 9: a duplicate branch name, and predicates or expressions that are not one
//!   SQL expression, are refused before anything is written.
//!
//! Each test names what the code before the change did.
//!
//! Size: fifteen tests over three issue kinds (three bodies run on a local root and on S3), and the
//! `Unreadable` column shapes every write is tried against; one file because they share the table
//! fixture and the refused-before-commit assertions.

use crate::gc_scenario::dry_run;
use crate::support::{
    batch, iter, keyed_locations, locations, new_lake, new_s3_lake, python_like_values, reader, schema, TestLake,
};
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, RecordBatchIterator, StringArray, StructArray};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use chrono::Utc;
use lake_common::{data_location_type, DataLocationBuilder, LocationError, UriError};
use lake_engine::{Engine, LineageProblem};
use lake_lance::index::IndexKind;
use lake_lance::update::Assignment;
use lake_lance::LanceEngineError;
use lake_store::writer::ManagedObject;
use lance::dataset::{InsertBuilder, WriteMode, WriteParams};
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Helpers.

/// A table `t` with two versions of two rows each (`e1` -> `a`, `e2` -> `b`; then `e3` -> `a`,
/// `e4` -> nothing), an orphan nobody references, and the objects.
async fn lake_with_table() -> (TestLake, ManagedObject, ManagedObject, ManagedObject) {
    let lake = new_lake().await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a)), ("e2", Some(&b))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e3", Some(&a)), ("e4", None)])])).await.unwrap();
    (lake, orphan, a, b)
}

/// One item per row, as a list column.
fn one_per_row(item: DataType, values: ArrayRef) -> (DataType, ArrayRef) {
    let field = Arc::new(Field::new("item", item, true));
    let rows = values.len();
    let list = ListArray::new(field.clone(), OffsetBuffer::from_lengths(std::iter::repeat_n(1, rows)), values, None);
    (DataType::List(field), Arc::new(list))
}

/// The columns a second client adds that the engine cannot read references from.
#[derive(Debug, Clone, Copy)]
enum Unreadable {
    /// `meta: Struct{file: DataLocation}` (the input).
    NestedInStruct,
    /// `lookalike: Struct{uri: Utf8, sha256: Binary, size: Int64}` at the top level.
    LookAlike,
    /// `lookalikes: List<Struct{uri: Utf8, sha256: Binary, size: Int64}>`.
    LookAlikeInList,
    /// `metas: List<Struct{inner: DataLocation}>`: the layout inside a struct inside a list.
    NestedInListOfStructs,
}

impl Unreadable {
    const ALL: [Unreadable; 4] = [
        Unreadable::NestedInStruct,
        Unreadable::LookAlike,
        Unreadable::LookAlikeInList,
        Unreadable::NestedInListOfStructs,
    ];

    fn column(self) -> &'static str {
        match self {
            Unreadable::NestedInStruct => "meta",
            Unreadable::LookAlike => "lookalike",
            Unreadable::LookAlikeInList => "lookalikes",
            Unreadable::NestedInListOfStructs => "metas",
        }
    }

    /// The column's field and values for rows `e1`, `e2`, each referencing `c`.
    fn values(self, c: &ManagedObject) -> (Field, ArrayRef) {
        let (dt, values): (DataType, ArrayRef) = match self {
            Unreadable::NestedInStruct | Unreadable::NestedInListOfStructs => {
                let fields = Fields::from(vec![Field::new("inner", data_location_type(), true)]);
                let strukt: ArrayRef =
                    Arc::new(StructArray::new(fields.clone(), vec![Arc::new(locations(&[Some(c), Some(c)]))], None));
                match self {
                    Unreadable::NestedInStruct => (DataType::Struct(fields), strukt),
                    _ => one_per_row(DataType::Struct(fields), strukt),
                }
            }
            Unreadable::LookAlike | Unreadable::LookAlikeInList => {
                let (fields, array) = python_like_values(&[c, c]);
                match self {
                    Unreadable::LookAlike => (DataType::Struct(fields), array),
                    _ => one_per_row(DataType::Struct(fields), array),
                }
            }
        };
        (Field::new(self.column(), dt, true), values)
    }

    /// A second client merges the column into `t` (keyed on `episode`); returns the version.
    async fn merge_into(self, lake: &TestLake, c: &ManagedObject) -> u64 {
        let (field, values) = self.values(c);
        let schema = Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), field]));
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(["e1", "e2"]));
        let rows = RecordBatch::try_new(schema, vec![episodes, values]).unwrap();
        let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
        ds.merge(iter(rows), "episode", "episode").await.unwrap();
        ds.version().version
    }
}

fn set(s: &str) -> Assignment {
    s.parse().unwrap()
}

async fn versions(lake: &TestLake, table: &str) -> Vec<u64> {
    lake.engine.versions(table).await.unwrap().into_iter().map(|v| v.version).collect()
}

/// Every lineage problem of the lake, as GC sees it (tables and their lineages).
async fn lake_problems(lake: &TestLake) -> Vec<LineageProblem> {
    let tables = lake.engine.tables().await.unwrap();
    let mut problems = tables.problems.clone();
    for location in &tables.tables {
        problems.extend(lake.engine.snapshot(location).await.unwrap().lineage().problems.clone());
    }
    problems
}

/// A dry run now (every upload so far older than the cutoff).
async fn plan_now(lake: &TestLake) -> lake_gc::plan::GcPlan {
    tokio::time::sleep(Duration::from_millis(20)).await;
    dry_run(lake, Utc::now(), 10).await
}

/// Files under `prefix` (keys, sorted).
async fn files_under(lake: &TestLake, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = lake.store.list_all(prefix).await.unwrap().into_iter().map(|(k, _)| k).collect();
    keys.sort();
    keys
}

/// A managed key minted two hours ago (the publication guard refuses it under the test lakes'
/// one-hour floor). The object need not exist: the guard judges the key's ULID.
fn old_key(name: &str) -> String {
    let ms = u64::try_from((Utc::now() - chrono::Duration::hours(2)).timestamp_millis()).unwrap();
    format!("objects/{}/{name}", ulid::Ulid::from_parts(ms, 7))
}

/// Rows of `(episode, uri)` with the SHA-256 and size of `like` (the `uri` spelled freely).
fn spelled(rows: &[(&str, &str)], like: &ManagedObject) -> RecordBatch {
    let mut files = DataLocationBuilder::new();
    for (_, uri) in rows {
        files.append(uri, like.sha256, like.size);
    }
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(e, _)| *e)));
    RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap()
}

fn spelled_reader(rows: &[(&str, &str)], like: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    Box::new(RecordBatchIterator::new(vec![Ok(spelled(rows, like))], schema()))
}

// ---------------------------------------------------------------------------------------------
// Kind 4: a table with a column the engine cannot read.

/// Asserts a refusal before the commit: a typed error that says nothing was committed, and no
/// new version.
async fn assert_refused_before_commit(
    lake: &TestLake,
    what: &str,
    before: &[u64],
    result: Result<impl std::fmt::Debug, LanceEngineError>,
) {
    let err = result.expect_err(what);
    assert!(err.committed_version().is_none(), "{what}: {err}");
    assert!(err.to_string().contains("nothing was committed"), "{what}: {err}");
    assert_eq!(versions(lake, "t").await, before, "{what}: nothing committed");
}

/// Before the change, `delete`, `upsert`, `add_columns`, `drop_columns` and `rename_column`
/// committed a version on such a table, then failed with "invalid reference, nothing was
/// committed" (the version had no journal entry); `compact`, `create_index` and an `append`
/// committed too. Now every write refuses before its commit, naming the column and the way
/// out, for each kind of unreadable column.
#[tokio::test(flavor = "multi_thread")]
async fn writes_on_a_table_with_an_unreadable_column_commit_nothing() {
    for kind in Unreadable::ALL {
        let (lake, _orphan, a, b) = lake_with_table().await;
        let c = lake.upload("c.bin", b"referenced only by the unreadable column").await;
        let v = kind.merge_into(&lake, &c).await;
        let before = versions(&lake, "t").await;
        assert_eq!(before.last(), Some(&v));

        let err = lake.engine.delete("t", "episode = 'e1'").await.unwrap_err();
        assert!(
            matches!(&err, LanceEngineError::UnreadableTable { version, source, .. } if *version == v && source.to_string().contains(kind.column())),
            "{kind:?}: {err}"
        );
        assert!(err.to_string().contains(&format!("Drop the column `{}`", kind.column())), "{err}");
        assert_refused_before_commit(&lake, "delete", &before, Err::<(), _>(err)).await;
        let upsert = lake.engine.upsert("t", &["episode".into()], reader(vec![batch(&[("e1", Some(&b))])])).await;
        assert_refused_before_commit(&lake, "upsert", &before, upsert).await;
        let added = lake.engine.add_columns("t", "episode", keyed_locations("thumb", &[("e1", Some(&a))])).await;
        assert_refused_before_commit(&lake, "add_columns", &before, added).await;
        let dropped = lake.engine.drop_columns("t", &["file"]).await;
        assert_refused_before_commit(&lake, "drop_columns of another column", &before, dropped).await;
        let renamed = lake.engine.rename_column("t", "file", "file2").await;
        assert_refused_before_commit(&lake, "rename_column", &before, renamed).await;
        let updated = lake.engine.update("t", &[set("file=NULL")], Some("episode = 'e1'")).await;
        assert_refused_before_commit(&lake, "update", &before, updated).await;
        let compacted = lake.engine.compact("t").await;
        assert_refused_before_commit(&lake, "compact", &before, compacted).await;
        let indexed = lake.engine.create_index("t", "episode", IndexKind::Btree, None, false).await;
        assert_refused_before_commit(&lake, "create_index", &before, indexed).await;
        let appended = lake.engine.append("t", reader(vec![batch(&[("e9", Some(&a))])])).await;
        assert_refused_before_commit(&lake, "append", &before, appended).await;

        // The lineage problem GC reports names the version and the column, and says nothing
        // about a commit (before the change it embedded "invalid reference, nothing was
        // committed").
        let problems = lake_problems(&lake).await;
        let unreadable: Vec<String> = problems
            .iter()
            .filter(|p| matches!(p, LineageProblem::UnreadableColumns { version, .. } if *version == v))
            .map(|p| p.to_string())
            .collect();
        assert_eq!(unreadable.len(), 1, "{kind:?}: {problems:?}");
        assert!(!unreadable[0].contains("nothing was committed"), "{}", unreadable[0]);
        assert!(unreadable[0].contains(kind.column()), "{}", unreadable[0]);
    }
}

/// The ways out of such a table, each journaled exactly: dropping the unreadable column (a
/// snapshot of the new version, since the previous version's references cannot be read), or
/// restoring a version without it. Once the versions holding the column are cleaned up, the
/// lineage is complete, the journal equals the scans, and the object only the dropped column
/// referenced is an orphan GC plans. Before the change the drop committed and failed with
/// "nothing was committed".
#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_unreadable_column_or_restoring_a_version_without_it_is_the_way_out() {
    for (kind, restore) in [(Unreadable::NestedInStruct, false), (Unreadable::LookAlikeInList, true)] {
        let (lake, orphan, a, b) = lake_with_table().await;
        let c = lake.upload("c.bin", b"referenced only by the unreadable column").await;
        kind.merge_into(&lake, &c).await;
        let out = if restore {
            lake.engine.restore("t", 2).await.unwrap()
        } else {
            lake.engine.drop_columns("t", &[kind.column()]).await.unwrap()
        };
        assert_eq!(versions(&lake, "t").await.last(), Some(&out.version));
        assert!(lake.engine.versions("t").await.unwrap().last().unwrap().journaled, "{kind:?}");
        assert_eq!(out.references_added, 3, "{kind:?}: a, b and a again");
        lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
        assert!(lake_problems(&lake).await.is_empty(), "{kind:?}");
        assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok(), "{kind:?}");
        let plan = plan_now(&lake).await;
        let planned: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
        assert!(plan.lineage_complete, "{:?}", plan.problems);
        assert_eq!(planned, BTreeSet::from([orphan.key.clone(), c.key.clone()]), "{kind:?}");
        assert!(!planned.contains(&a.key) && !planned.contains(&b.key));
    }
}

/// Restoring or branching from a version whose schema the engine cannot read, or a drop that
/// leaves another unreadable column, is refused before anything is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_a_branch_or_a_drop_that_keeps_an_unreadable_schema_commits_nothing() {
    let (lake, _orphan, _a, _b) = lake_with_table().await;
    let c = lake.upload("c.bin", b"c").await;
    let v = Unreadable::NestedInStruct.merge_into(&lake, &c).await;
    Unreadable::LookAlike.merge_into(&lake, &c).await;
    let before = versions(&lake, "t").await;
    for (what, result) in [
        ("restore", lake.engine.restore("t", v).await.map(|_| ())),
        (
            "branch",
            lake.engine.create_branch("t", "b", &lake_lance::branch::BranchSource::Version(v)).await.map(|_| ()),
        ),
        ("drop one of two", lake.engine.drop_columns("t", &["meta"]).await.map(|_| ())),
    ] {
        let err = result.expect_err(what);
        assert!(err.committed_version().is_none(), "{what}: {err}");
        assert_eq!(versions(&lake, "t").await, before, "{what}");
    }
    let err = lake.engine.drop_columns("t", &["meta"]).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::UnreadableTable { .. })
            && err.to_string().contains("Drop the column `lookalike`"),
        "the column that stays is named: {err}"
    );
    assert!(lake.engine.branches("t").await.unwrap().is_empty());
    assert!(files_under(&lake, "tables/t.lance/tree/").await.is_empty());
    // Both at once is the way out.
    lake.engine.drop_columns("t", &["meta", "lookalike"]).await.unwrap();
    assert!(lake.engine.versions("t").await.unwrap().last().unwrap().journaled);
}

/// A row another client wrote whose `uri` the engine cannot read (`objects/../escape`): a delete
/// that removes it commits and journals the new version as a snapshot (before the change: the
/// version was committed, then "invalid reference, nothing was committed"); a delete of a
/// neighbour that keeps it reads only the neighbour (`crate::version_diff`), so its entry is an
/// exact delta, and the unjournaled version below it keeps GC refusing; a delete of one of two
/// such rows commits a version neither the diff nor a scan can read, and the error names that
/// committed version.
#[tokio::test(flavor = "multi_thread")]
async fn a_journal_entry_that_cannot_be_computed_names_the_committed_version() {
    let (lake, _orphan, a, _b) = lake_with_table().await;
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let rows = spelled(&[("bad", "objects/../escape"), ("near", &a.key)], &a);
    let ds = Dataset::write(iter(rows), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let foreign = ds.version().version;
    assert!(matches!(lake.engine.repair_refs("t", foreign).await, Err(LanceEngineError::Unreadable { .. })));

    // Removing the bad row (with its neighbour in the same fragment): journaled exactly.
    let out = lake.engine.delete("t", "episode = 'bad' OR episode = 'near'").await.unwrap().unwrap();
    assert_eq!(out.version, foreign + 1);
    let listed = lake.engine.versions("t").await.unwrap();
    assert!(listed.last().unwrap().journaled);
    let scanned = lake.engine.scan_version("t", out.version).await.unwrap();
    assert_eq!(lake.engine.journal_counts_at("t", out.version).await.unwrap(), scanned, "a snapshot of the version");

    // Another client adds it again; a delete of its neighbour keeps it and reads only the
    // neighbour: an exact delta, above the other client's version, which stays unjournaled.
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let rows = spelled(&[("bad", "objects/../escape"), ("bad2", "objects/../escape"), ("near", &a.key)], &a);
    Dataset::write(iter(rows), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let out = lake.engine.delete("t", "episode = 'near'").await.unwrap().unwrap();
    assert_eq!((out.references_added, out.references_removed), (0, 1));
    let listed = lake.engine.versions("t").await.unwrap();
    assert!(listed.last().unwrap().journaled && !listed[listed.len() - 2].journaled, "{listed:?}");
    let problems = lake_problems(&lake).await;
    let foreign = out.version - 1;
    assert!(problems.contains(&LineageProblem::MissingSidecar { table: "t".into(), version: foreign }), "{problems:?}");
    assert!(matches!(lake.engine.scan_version("t", out.version).await, Err(LanceEngineError::Unreadable { .. })));

    // Removing one of the two unreadable rows: the diff cannot read it, nor a scan the other.
    let err = lake.engine.delete("t", "episode = 'bad'").await.unwrap_err();
    let latest = *versions(&lake, "t").await.last().unwrap();
    assert!(matches!(&err, LanceEngineError::Unjournaled { version, .. } if *version == latest), "{err}");
    assert_eq!(err.committed_version(), Some(latest));
    let text = err.to_string();
    assert!(
        text.contains(&format!("version {latest} was committed")) && !text.contains("nothing was committed"),
        "{text}"
    );
    assert!(!lake.engine.versions("t").await.unwrap().last().unwrap().journaled);
    let problems = lake_problems(&lake).await;
    assert!(problems.contains(&LineageProblem::MissingSidecar { table: "t".into(), version: latest }), "{problems:?}");
}

/// Rows `(episode, file)` whose `file` is the DataLocation layout without the marker and with
/// nullable children (a reference column all the same): Lance's update can assign it a
/// `named_struct(...)`, whose children are nullable (it cannot cast one to the marked layout's
/// non-null children).
fn rows_with_nullable_children(object: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    let fields = Fields::from(vec![
        Field::new("uri", DataType::Utf8, true),
        Field::new("sha256", DataType::FixedSizeBinary(32), true),
        Field::new("size", DataType::UInt64, true),
    ]);
    let location = locations(&[Some(object)]);
    let file = StructArray::new(fields.clone(), location.columns().to_vec(), None);
    let schema = Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        Field::new("file", DataType::Struct(fields), true),
    ]));
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(["e1"]));
    let batch = RecordBatch::try_new(schema.clone(), vec![episodes, Arc::new(file)]).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// An update whose expression evaluates differently at its check and at its commit
/// (`random()`): when the committed version references what the check did not see (a key with a
/// trailing space, an object older than the guard allows), the version is journaled exactly and
/// the error names it. Before the change the guard's refusal said "Nothing was committed" after
/// the commit, and a bad key was not looked at at all. Each attempt is a fresh lake; the
/// expression picks one of two values at random, so some attempts are refused before the commit
/// (nothing committed), some commit what the check saw, and (with probability 1/4 each) some
/// commit what it did not.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_that_commits_what_its_check_did_not_see_names_the_version() {
    for (label, value) in [
        ("a trailing space", "concat(file.uri, ' ')".to_string()),
        ("an old object", format!("'{}'", old_key("old.bin"))),
    ] {
        let expression = format!(
            "file = named_struct('uri', CASE WHEN random() < 0.5 THEN file.uri ELSE {value} END, 'sha256', file.sha256, 'size', file.size)"
        );
        let mut unchecked = 0;
        for _ in 0..60 {
            let lake = new_lake().await;
            let a = lake.upload("a.bin", b"a").await;
            lake.engine.append("t", rows_with_nullable_children(&a)).await.unwrap();
            match lake.engine.update("t", &[set(&expression)], None).await {
                Ok(_) => {}
                Err(LanceEngineError::CommittedUnchecked { version, reason, .. }) => {
                    unchecked += 1;
                    assert_eq!(version, 2, "{label}");
                    assert!(lake.engine.versions("t").await.unwrap()[1].journaled, "{label}: journaled");
                    assert!(!reason.to_lowercase().contains("nothing was committed"), "{label}: {reason}");
                    let scanned = lake.engine.scan_version("t", 2).await.unwrap();
                    assert_eq!(lake.engine.journal_counts_at("t", 2).await.unwrap(), scanned, "{label}: exact");
                }
                Err(e) => {
                    assert!(
                        e.committed_version().is_none() && e.to_string().contains("othing was committed"),
                        "{label}: {e}"
                    );
                    assert_eq!(versions(&lake, "t").await, vec![1], "{label}: {e}");
                }
            }
            if unchecked > 0 {
                break;
            }
        }
        assert!(unchecked > 0, "{label}: no attempt committed what its check did not see (probability 0.75^60)");
    }
}

// ---------------------------------------------------------------------------------------------
// Kind 10: references inside the root that are not managed keys.

/// The spellings of an in-root key that is not managed, for `lake` at `root_url`
/// (`file:///...` or `s3://bucket/prefix`): a managed key with a trailing space (the issue's
/// input), a ULID folder, `objects/x`, a table's data file, the lake descriptor, and absolute
/// URLs naming such keys.
fn unmanaged_spellings(root_url: &str, managed: &str) -> Vec<String> {
    let folder = managed.rsplit_once('/').unwrap().0.to_string();
    vec![
        format!("{managed} "),
        folder.clone(),
        "objects/x".into(),
        "tables/t.lance/data/x.lance".into(),
        "_lake/lake.json".into(),
        format!("{root_url}/{folder}"),
        format!("{root_url}/tables/t.lance/data/x.lance"),
        format!("{root_url}/_lake/lake.json"),
        format!("{root_url}/{managed}%20"),
    ]
}

fn assert_not_managed(err: &LanceEngineError, written: &str, what: &str) {
    match err {
        LanceEngineError::Location {
            source: LocationError::BadUri { source: UriError::NotManaged { uri, .. }, .. },
            ..
        } => {
            assert_eq!(uri, written, "{what}: the error names the row's value")
        }
        other => panic!("{what} {written:?}: expected a NotManaged refusal, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("nothing was committed") && text.contains("objects/<ULID>/<name>"), "{text}");
    assert!(text.contains(&format!("{written:?}")), "the value, escaped: {text}");
}

/// Before the change every write accepted these references (the guard ignores keys that are not
/// managed) and from then on every plan of the whole lake was incomplete. Now every writer path
/// refuses them before its commit: append (first or not), overwrite, upsert, add_columns, and
/// update's `--set`. The lake's plans stay complete.
async fn every_write_refuses_unmanaged_in_root_references(lake: &TestLake) {
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    let root_url = lake.store.root().to_string();
    for bad in unmanaged_spellings(&root_url, &a.key) {
        let rows = [("e1", a.key.as_str()), ("e2", bad.as_str())];
        let err = lake.engine.append("t", spelled_reader(&rows, &a)).await.unwrap_err();
        assert_not_managed(&err, &bad, "append");
        let err = lake.engine.append("fresh", spelled_reader(&rows, &a)).await.unwrap_err();
        assert_not_managed(&err, &bad, "first append");
        let err = lake.engine.overwrite("t", spelled_reader(&rows, &a)).await.unwrap_err();
        assert_not_managed(&err, &bad, "overwrite");
        let err = lake.engine.upsert("t", &["episode".into()], spelled_reader(&rows, &a)).await.unwrap_err();
        assert_not_managed(&err, &bad, "upsert");
        let mut thumbs = DataLocationBuilder::new();
        thumbs.append(&bad, a.sha256, a.size);
        let columns = Arc::new(Schema::new(vec![
            Field::new("episode", DataType::Utf8, false),
            lake_common::data_location_field("thumb", true),
        ]));
        let rows = RecordBatch::try_new(
            columns.clone(),
            vec![Arc::new(StringArray::from_iter_values(["e1"])), Arc::new(thumbs.finish())],
        )
        .unwrap();
        let err = lake
            .engine
            .add_columns("t", "episode", Box::new(RecordBatchIterator::new(vec![Ok(rows)], columns)))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &err,
                LanceEngineError::Location {
                    source: LocationError::BadUri { source: UriError::NotManaged { .. }, .. },
                    ..
                }
            ) || err.to_string().contains("not a managed object key"),
            "add_columns {bad:?}: {err}"
        );
        assert!(!err.to_string().contains("version"), "add_columns {bad:?}: {err}");
    }
    // update --set: the input, a managed key with a trailing space, from the row itself
    // (on a reference column whose children are nullable, which Lance's update can assign a
    // `named_struct` to; on the marked layout Lance cannot cast one and refuses by itself).
    lake.engine.append("u", rows_with_nullable_children(&a)).await.unwrap();
    let spaced = "file=named_struct('uri', concat(file.uri, ' '), 'sha256', file.sha256, 'size', file.size)";
    for table in ["u", "t"] {
        let err = lake.engine.update(table, &[set(spaced)], None).await.unwrap_err();
        assert_not_managed(&err, &format!("{} ", a.key), "update --set");
    }
    assert_eq!(versions(lake, "u").await, vec![1], "nothing committed");
    assert_eq!(versions(lake, "t").await, vec![1], "nothing committed");
    assert!(!lake.engine.table_exists("fresh").await.unwrap());
    let plan = plan_now(lake).await;
    assert!(plan.lineage_complete && plan.problems.is_empty(), "{:?}", plan.problems);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_write_refuses_references_inside_the_root_that_are_not_managed_keys() {
    every_write_refuses_unmanaged_in_root_references(&new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_every_write_refuses_references_inside_the_root_that_are_not_managed_keys() {
    every_write_refuses_unmanaged_in_root_references(&new_s3_lake("write-doors").await).await;
}

/// A write refused before its commit leaves nothing. Before the change a first append refused
/// by the publication guard left its Lance data file in an unregistered `tables/n.lance/`, and
/// every plan of the lake was incomplete until someone deleted the folder by hand; a refused
/// append left its data file in `data/`.
async fn a_refused_write_leaves_nothing(lake: &TestLake) {
    let a = lake.upload("a.bin", b"a").await;
    let stale = old_key("stale.bin");
    // A first write refused by the guard, and one refused by the journal (a bad reference in
    // the last batch, which Lance has already consumed).
    let err = lake.engine.append("n", spelled_reader(&[("e", &stale)], &a)).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Guard { .. }), "{err}");
    let batches = vec![Ok(spelled(&[("e1", &a.key)], &a)), Ok(spelled(&[("e2", "objects/x")], &a))];
    let err = lake.engine.append("m", Box::new(RecordBatchIterator::new(batches, schema()))).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Location { .. }), "{err}");
    for table in ["n", "m"] {
        assert_eq!(files_under(lake, &format!("tables/{table}.lance/")).await, Vec::<String>::new(), "{table}");
        if let Some(dir) = lake.store.local_dir() {
            assert!(!dir.join(format!("tables/{table}.lance")).exists(), "{table}: no folder left");
        }
    }
    // A refused append to an existing table: its data files go, the table's stay.
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    let data = files_under(lake, "tables/t.lance/data/").await;
    let err = lake.engine.append("t", spelled_reader(&[("e", &stale)], &a)).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Guard { .. }), "{err}");
    assert_eq!(files_under(lake, "tables/t.lance/data/").await, data);
    assert_eq!(files_under(lake, "tables/t.lance/_lake/object_ref_logs/").await.len(), 1, "only the committed log");
    let plan = plan_now(lake).await;
    assert!(plan.lineage_complete && plan.problems.is_empty(), "{:?}", plan.problems);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_write_leaves_nothing_behind() {
    a_refused_write_leaves_nothing(&new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_a_refused_write_leaves_nothing_behind() {
    a_refused_write_leaves_nothing(&new_s3_lake("write-doors").await).await;
}

/// What a first write killed between its data files and its commit leaves (its data files and
/// reference log, made here with plain Lance's uncommitted write): before the change an
/// `UnregisteredDataset` problem told the operator to remove the folder by hand. Now the
/// problem names the table and `lake cleanup` (the library's `cleanup`) removes the files older
/// than its age, unless a write intent says a write may still land.
async fn a_killed_first_write_has_a_command_as_the_way_out(lake: &TestLake) {
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    let uri = lake.engine.dataset_uri("k");
    let uncommitted =
        InsertBuilder::new(uri.as_str()).execute_uncommitted(vec![batch(&[("e1", Some(&a))])]).await.unwrap();
    assert!(matches!(uncommitted.operation, lance::dataset::transaction::Operation::Overwrite { .. }));
    let log = format!("tables/k.lance/_lake/object_ref_logs/{}.arrows", ulid::Ulid::new());
    lake.store.put(&log, b"a reference log that was never named".to_vec()).await.unwrap();
    assert!(!lake.engine.table_exists("k").await.unwrap());

    let problems = lake_problems(lake).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(matches!(&problems[0], LineageProblem::UncommittedDataset { table, intent: None, .. } if table == "k"));
    assert!(problems[0].to_string().contains("`cleanup` of table `k`"), "{}", problems[0]);

    // A write intent: a write may still land; the intent protects what it may publish, so the
    // folder is no lineage problem of the lake (the problem stays with the table); cleanup
    // keeps the folder.
    let intent = "_lake/intents/k/01J9ZJ4G6W8X1Y2Z3A4B5C6D7E.json";
    lake.store.put(intent, b"{}".to_vec()).await.unwrap();
    let problems = lake_problems(lake).await;
    assert!(problems.is_empty(), "{problems:?}");
    let err = lake.engine.cleanup("k", Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("may still land"), "{err}");
    lake.store.delete(intent).await.unwrap();

    // Files younger than the age asked for stay.
    let young = lake.engine.cleanup("k", Duration::from_secs(3600)).await.unwrap();
    assert_eq!(young.old_versions, 0);
    assert!(!files_under(lake, "tables/k.lance/").await.is_empty());
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cleaned = lake.engine.cleanup("k", Duration::from_millis(10)).await.unwrap();
    assert!(cleaned.bytes_removed > 0);
    assert_eq!(files_under(lake, "tables/k.lance/").await, Vec::<String>::new());
    assert!(lake_problems(lake).await.is_empty());
    let plan = plan_now(lake).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    // A table with versions is not touched by this path.
    let err = lake.engine.discard_uncommitted("t", Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("has versions"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_first_write_is_named_and_cleaned_up_by_a_command() {
    a_killed_first_write_has_a_command_as_the_way_out(&new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_a_killed_first_write_is_named_and_cleaned_up_by_a_command() {
    a_killed_first_write_has_a_command_as_the_way_out(&new_s3_lake("write-doors").await).await;
}

/// A symbolic link in such a folder refuses the cleanup (nothing is removed through it).
#[tokio::test(flavor = "multi_thread")]
async fn an_uncommitted_folder_with_a_link_is_not_cleaned_up_through_it() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let root = lake.store.local_dir().unwrap().to_path_buf();
    std::fs::create_dir_all(root.join("tables/k.lance/data")).unwrap();
    std::os::unix::fs::symlink(root.join("objects"), root.join("tables/k.lance/data/link")).unwrap();
    let err = lake.engine.cleanup("k", Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("not a regular file"), "{err}");
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
}

/// A bad reference an earlier build wrote (here: plain Lance and `lake refs repair`, which
/// journals what a version holds): the plan is incomplete, the problem names the table, the
/// reference and the commands; deleting the row and cleaning up the versions that hold it makes
/// the lake's plans complete again, and the orphans are collected.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_reference_written_by_an_earlier_build_has_a_command_as_the_way_out() {
    let (lake, orphan, a, b) = lake_with_table().await;
    let bad = format!("{} ", a.key);
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let ds =
        Dataset::write(iter(spelled(&[("e5", &bad)], &a)), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    lake.engine.repair_refs("t", ds.version().version).await.unwrap();
    let plan = plan_now(&lake).await;
    assert!(!plan.lineage_complete);
    let problem = plan
        .problems
        .iter()
        .find(|p| p.kind == "unmanaged_reference" && p.message.contains(&format!("{bad:?}")))
        .expect("the problem names the value");
    assert!(
        problem.message.contains("table `t`") && problem.message.contains("delete the rows of table `t`"),
        "{problem}"
    );
    assert!(problem.message.contains("`cleanup` of table `t`"), "{problem}");

    let predicate = format!("file.uri = '{bad}'");
    let out = lake.engine.delete("t", &predicate).await.unwrap().unwrap();
    assert_eq!((out.rows, out.references_removed), (1, 1));
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let plan = plan_now(&lake).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    let planned: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    assert!(planned.contains(&orphan.key) && !planned.contains(&a.key) && !planned.contains(&b.key), "{planned:?}");
}

// ---------------------------------------------------------------------------------------------
// Kind 9 (parts): branch names and SQL.

/// Before the change a second `create_branch` with a name in use reached Lance, which failed
/// with "internal error, please file a bug report" and left a transaction file in the branch's
/// folder. Now it is refused before anything is written: a branch the engine made, or one
/// another client made.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_name_in_use_is_refused_before_anything_is_written() {
    use lake_lance::branch::BranchSource;
    let (lake, _orphan, _a, _b) = lake_with_table().await;
    lake.engine.create_branch("t", "b", &BranchSource::Version(1)).await.unwrap();
    let files = files_under(&lake, "tables/t.lance/").await;
    for from in [BranchSource::Version(2), BranchSource::Version(1)] {
        let err = lake.engine.create_branch("t", "b", &from).await.unwrap_err();
        assert!(matches!(&err, LanceEngineError::InvalidInput(m) if m.contains("already has a branch `b`")), "{err}");
        assert!(!err.to_string().contains("internal error"), "{err}");
    }
    assert_eq!(files_under(&lake, "tables/t.lance/").await, files, "no file written");
    // A branch another client made (not registered): refused too, and nothing is written.
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.create_branch("z", 2, None).await.unwrap();
    let files = files_under(&lake, "tables/t.lance/").await;
    let err = lake.engine.create_branch("t", "z", &BranchSource::Version(1)).await.unwrap_err();
    assert!(err.to_string().contains("already has a branch `z`"), "{err}");
    assert_eq!(files_under(&lake, "tables/t.lance/").await, files);
    assert_eq!(lake.engine.branches("t").await.unwrap(), vec!["b".to_string()]);
}

/// Before the change `delete("episode = 'e1'; DROP TABLE t")` deleted `e1` and ignored the rest,
/// and an update or a scan filter did the same; a list of expressions kept its first. Now every
/// predicate and expression must be exactly one SQL expression, refused before anything runs.
#[tokio::test(flavor = "multi_thread")]
async fn predicates_and_expressions_must_be_one_sql_expression() {
    let (lake, _orphan, a, _b) = lake_with_table().await;
    let before = versions(&lake, "t").await;
    for predicate in
        ["episode = 'e1'; DROP TABLE t", "episode = 'e1';", "episode = 'e1', episode = 'e2'", "episode = 'e1' LIMIT 1"]
    {
        let err = lake.engine.delete("t", predicate).await.unwrap_err();
        assert!(matches!(&err, LanceEngineError::InvalidInput(m) if m.contains("not one SQL expression")), "{err}");
        let err = lake.engine.update("t", &[set("episode='x'")], Some(predicate)).await.unwrap_err();
        assert!(err.to_string().contains("not one SQL expression"), "{err}");
        let ds = lake.engine.open("t").await.unwrap();
        let err = lake_lance::scan::count_references(&ds, "t", lake.store.root(), Some(predicate)).await.unwrap_err();
        assert!(err.to_string().contains("not one SQL expression"), "{err}");
    }
    for expression in ["'x'; DROP TABLE t", "'x', 'y'", "'x' AS y"] {
        let err = lake
            .engine
            .update("t", &[Assignment { column: "episode".into(), expression: expression.into() }], None)
            .await;
        assert!(err.unwrap_err().to_string().contains("not one SQL expression"), "{expression}");
    }
    assert_eq!(versions(&lake, "t").await, before, "nothing ran");
    // One expression (with `==`, a `;` inside a string) still works.
    let out = lake.engine.delete("t", "episode == 'e1' OR episode = 'a;b'").await.unwrap().unwrap();
    assert_eq!(out.rows, 1);
    let _ = a;
}
