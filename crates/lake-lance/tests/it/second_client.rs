//! A second Lance client on a lake's table: the Lance Rust API used directly on the dataset URI
//! (`lake.engine.dataset_uri(..)`), as pylance would, around the engine. Whatever it does, GC
//! must never plan or delete an object that a retained version of any table references: either
//! `lake refs repair` rebuilds the journal with every reference the rows hold, or the lineage is
//! incomplete (a named problem), the dry run proposes nothing and apply refuses.
//!
//! Each test names what the code before the change did (unmarked columns skipped, branches and
//! base paths ignored) and the assertion that catches it.
//!
//! Size: twelve tests, each a second client's change (a merge, an overwrite, a branch, a base path,
//! a shallow clone, a nested or blob column) followed through repair, verify and GC; one file
//! because they share the helpers that drive Lance directly and check that nothing live is planned.

use crate::gc_scenario::dry_run;
use crate::support::{batch, iter, locations, new_lake, python_like_values, reader, TestLake};
use arrow_array::{Array, ArrayRef, ListArray, RecordBatch, RecordBatchIterator, StringArray, StructArray};
use arrow_buffer::{NullBuffer, OffsetBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use chrono::{DateTime, Utc};
use lake_common::{data_location_field, data_location_type, LocationError};
use lake_engine::{Engine, LineageProblem};
use lake_gc::apply::ApplyOptions;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::GcError;
use lake_lance::LanceEngineError;
use lake_store::registry;
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::table::format::BasePath;
use lance::Dataset;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The checks every test ends with.

/// Plans a dry run at `cutoff` and applies it, then checks that no object of `live` (referenced
/// by a retained version of some table) was planned or deleted.
///
/// `complete` is what the lineage must be. On complete lineage the control object `orphan`
/// (uploaded, never referenced) must be planned and deleted: planning and apply really ran, so
/// the live objects survived because they are live, not because nothing was deleted. On
/// incomplete lineage the plan must propose nothing, apply must refuse it, and `orphan` stays.
async fn assert_nothing_live_is_planned(
    lake: &TestLake,
    cutoff: DateTime<Utc>,
    live: &[&ManagedObject],
    orphan: &ManagedObject,
    complete: bool,
) -> GcPlan {
    let plan = dry_run(lake, cutoff, 10).await;
    assert_eq!(plan.lineage_complete, complete, "lineage_complete; problems: {:?}", plan.problems);
    let candidates: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    for object in live {
        assert!(
            !candidates.contains(&object.key),
            "{} is referenced by a retained version but was planned",
            object.key
        );
    }
    if complete {
        assert!(plan.problems.is_empty(), "{:?}", plan.problems);
        assert!(candidates.contains(&orphan.key), "the control orphan must be planned: {candidates:?}");
    } else {
        assert!(!plan.problems.is_empty(), "an incomplete plan names its problems");
        assert!(candidates.is_empty(), "an incomplete plan proposes nothing: {candidates:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let applied = apply(
        &lake.engine,
        &deleter,
        &dir.path().join("gc.ckpt").as_path().into(),
        Some(&plan),
        &ApplyOptions::default(),
    )
    .await;
    if complete {
        let report = applied.unwrap();
        assert!(report.checkpoint.complete);
        assert_eq!(report.checkpoint.deleted as usize, candidates.len());
        assert!(lake.store.head(&orphan.key).await.unwrap().is_none(), "the control orphan was deleted");
    } else {
        let err = applied.unwrap_err();
        assert!(matches!(err, GcError::PlanIncomplete { .. }), "{err}");
        assert!(lake.store.head(&orphan.key).await.unwrap().is_some(), "nothing deleted");
    }
    for object in live {
        assert!(lake.store.head(&object.key).await.unwrap().is_some(), "{} was deleted", object.key);
    }
    plan
}

/// Every lineage problem of `table` as the engine reports it to GC.
async fn lineage_problems(lake: &TestLake, table: &str) -> Vec<LineageProblem> {
    let tables = lake.engine.tables().await.unwrap();
    let location = tables.tables.iter().find(|l| l.name == table).expect("registered table");
    lake.engine.snapshot(location).await.unwrap().lineage().clone().problems
}

/// A cutoff after every upload so far (objects are candidates only when older than it).
async fn cutoff_now() -> DateTime<Utc> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    cutoff
}

/// Repairs the entry of `table` at `v`, and reads back the snapshot it wrote (whole).
async fn repair(lake: &TestLake, table: &str, v: u64) -> Result<lake_common::ObjectReferenceDelta, LanceEngineError> {
    let written = lake.engine.repair_refs(table, v).await?;
    let entry = lake_lance::sidecar::read(&lake.store, table, v).await.unwrap().expect("written").unwrap();
    assert_eq!(entry.kind, lake_common::DeltaKind::Snapshot);
    assert_eq!(
        (written.references, written.objects),
        (entry.added.iter().map(|r| r.count).sum(), entry.added.len() as u64)
    );
    Ok(entry)
}

/// The count of `object` in a repair snapshot (0 when absent).
fn count_in(snapshot: &lake_common::ObjectReferenceDelta, object: &ManagedObject) -> u64 {
    snapshot.added.iter().find(|r| r.identity.uri == object.key).map_or(0, |r| r.count)
}

/// Lance versions of `table` that exist.
async fn versions(lake: &TestLake, table: &str) -> Vec<u64> {
    lake.engine.versions(table).await.unwrap().into_iter().map(|v| v.version).collect()
}

/// A lake with table `t` at version 1 (`e1` references `a`, `e2` references nothing), and an
/// uploaded object `orphan` that nothing references.
async fn lake_with_table() -> (TestLake, ManagedObject, ManagedObject) {
    let lake = new_lake().await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    let a = lake.upload("a.bin", b"referenced by the engine's rows").await;
    let v = lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a)), ("e2", None)])])).await.unwrap();
    assert_eq!(v.version, 1);
    (lake, orphan, a)
}

// ---------------------------------------------------------------------------------------------
// What the second client writes: columns built as pylance would, without the lake's marker.

async fn second_client(lake: &TestLake, table: &str) -> Dataset {
    Dataset::open(&lake.engine.dataset_uri(table)).await.unwrap()
}

/// The look-alike column `file` of a round trip through Python objects (`to_pylist()` then
/// `from_pylist`): `uri: string, sha256: binary, size: int64`, every child nullable, no marker.
fn python_like(objects: &[&ManagedObject]) -> (Field, ArrayRef) {
    let (fields, array) = python_like_values(objects);
    (Field::new("file", DataType::Struct(fields), true), array)
}

/// A batch keyed by `episode` with one more column, for `Dataset::merge`.
fn keyed(episodes: &[&str], column: Field, values: ArrayRef) -> RecordBatch {
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), column]));
    RecordBatch::try_new(schema, vec![Arc::new(StringArray::from_iter_values(episodes.iter().copied())), values])
        .unwrap()
}

/// A local `file://` URL of a managed object (what a second client would store in a blob column).
fn file_url(lake: &TestLake, object: &ManagedObject) -> String {
    format!("file://{}", lake.store.local_dir().unwrap().join(&object.key).display())
}

// ---------------------------------------------------------------------------------------------
// 1. A column of the DataLocation layout without the marker.

/// Before the change, a column without the marker was no reference column: repair's snapshot
/// left `b` out, the dry run was complete, and `b` was planned and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn an_unmarked_location_column_merged_by_a_second_client_keeps_its_objects_live() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced only by the second client's column").await;
    let cutoff = cutoff_now().await;

    let mut ds = second_client(&lake, "t").await;
    let column = Field::new("extra", data_location_type(), true);
    ds.merge(iter(keyed(&["e1", "e2"], column, Arc::new(locations(&[Some(&b), None])))), "episode", "episode")
        .await
        .unwrap();
    let v = ds.version().version;
    assert_eq!(v, 2);
    assert!(
        !ds.schema().field("extra").unwrap().metadata.contains_key("ARROW:extension:name"),
        "the premise: the merged column carries no marker"
    );

    // Not journaled yet: incomplete, nothing planned.
    assert_eq!(
        lineage_problems(&lake, "t").await,
        vec![LineageProblem::MissingSidecar { table: "t".into(), version: v }]
    );
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, false).await;

    let snapshot = repair(&lake, "t", v).await.unwrap();
    assert_eq!(count_in(&snapshot, &b), 1, "repair's snapshot includes the unmarked column: {snapshot:?}");
    assert_eq!(count_in(&snapshot, &a), 1);
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(versions(&lake, "t").await, vec![v], "only the merged version is retained");
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, true).await;
}

/// The same with `List<DataLocation>` (without the marker), added through `Dataset::merge`.
#[tokio::test(flavor = "multi_thread")]
async fn an_unmarked_list_of_locations_merged_by_a_second_client_keeps_its_objects_live() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"first of the list").await;
    let c = lake.upload("c.bin", b"second of the list").await;
    let cutoff = cutoff_now().await;

    let item = Arc::new(Field::new("item", data_location_type(), true));
    let list = ListArray::new(
        item.clone(),
        OffsetBuffer::from_lengths([3, 0]),
        Arc::new(locations(&[Some(&b), None, Some(&c)])),
        Some(NullBuffer::from(vec![true, false])),
    );
    let mut ds = second_client(&lake, "t").await;
    ds.merge(
        iter(keyed(&["e1", "e2"], Field::new("files", DataType::List(item), true), Arc::new(list))),
        "episode",
        "episode",
    )
    .await
    .unwrap();
    let v = ds.version().version;

    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b, &c], &orphan, false).await;
    let snapshot = repair(&lake, "t", v).await.unwrap();
    assert_eq!((count_in(&snapshot, &b), count_in(&snapshot, &c)), (1, 1), "{snapshot:?}");
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(versions(&lake, "t").await, vec![v]);
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b, &c], &orphan, true).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A Python round trip: the look-alike types.

/// Before the change, the look-alike `file` column was no reference column: repair wrote an
/// empty snapshot, and once version 1 was cleaned up `a` and `b` were planned and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn an_overwrite_with_python_like_types_is_refused_by_repair_verify_and_gc() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced only by the look-alike rows").await;
    let cutoff = cutoff_now().await;

    let (file, values) = python_like(&[&a, &b]);
    let rows = keyed(&["e1", "e2"], file, values);
    let params = WriteParams { mode: WriteMode::Overwrite, ..Default::default() };
    let ds = Dataset::write(iter(rows.clone()), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let v = ds.version().version;
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(versions(&lake, "t").await, vec![v], "only the look-alike version is retained");

    // The engine's own append refuses such batches (Lance itself would accept them: same schema).
    let schema = rows.schema();
    let err =
        lake.engine.append("t", Box::new(RecordBatchIterator::new(vec![Ok(rows.clone())], schema))).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Location { source: LocationError::LocationLike { column, .. }, .. } if column == "file"),
        "{err}"
    );
    assert_eq!(versions(&lake, "t").await, vec![v], "nothing committed");

    let err = lake.engine.repair_refs("t", v).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Unreadable { source: LocationError::LocationLike { column, .. }, .. } if column == "file"),
        "{err}"
    );
    assert!(err.to_string().contains("`file`"), "the error names the column: {err}");
    assert!(lake.store.get(&lake_store::layout::sidecar_key("t", v)).await.unwrap().is_none(), "nothing journaled");

    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(!report.is_ok());
    assert!(report.problems.iter().any(|p| p.contains("`file`")), "{:?}", report.problems);

    let problems = lineage_problems(&lake, "t").await;
    assert!(problems.contains(&LineageProblem::MissingSidecar { table: "t".into(), version: v }), "{problems:?}");
    assert!(
        problems.iter().any(|p| matches!(p, LineageProblem::UnreadableColumns { version, reason, .. } if *version == v && reason.contains("`file`"))),
        "{problems:?}"
    );
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, false).await;
}

// ---------------------------------------------------------------------------------------------
// 3. The marker dropped by `replace_field_metadata`.

/// Before the change, once the marker was gone repair's snapshot of the version was empty:
/// after version 1 was cleaned up, `a` was planned and deleted while the rows still reference it.
/// The commit is metadata-only (`UpdateConfig`), so it needs no repair at all: it is an implied
/// empty journal entry, and the layout (not the marker) keeps the column a reference column.
#[tokio::test(flavor = "multi_thread")]
async fn a_marker_dropped_by_replace_field_metadata_keeps_the_objects_live_without_repair() {
    let (lake, orphan, a) = lake_with_table().await;
    let cutoff = cutoff_now().await;

    let mut ds = second_client(&lake, "t").await;
    let id = ds.schema().field("file").unwrap().id;
    ds.replace_field_metadata([(id as u32, HashMap::new())]).await.unwrap();
    let v = ds.version().version;
    assert_eq!(v, 2);
    let tx = ds.read_transaction_by_version(v).await.unwrap().unwrap();
    assert_eq!(tx.operation.name(), "UpdateConfig", "the premise: a metadata-only commit");
    assert!(ds.schema().field("file").unwrap().metadata.is_empty(), "the premise: the marker is gone");

    assert_eq!(lineage_problems(&lake, "t").await, vec![], "a content-preserving version needs no repair");
    assert_nothing_live_is_planned(&lake, cutoff, &[&a], &orphan, true).await;

    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(versions(&lake, "t").await, vec![v]);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    let second_orphan = lake.upload("orphan2.bin", b"never referenced either").await;
    let cutoff = cutoff_now().await;
    assert_nothing_live_is_planned(&lake, cutoff, &[&a], &second_orphan, true).await;
    // Cleanup wrote the implied entry down before Lance removed the transaction that proves it;
    // repair never overwrites an entry.
    let listed = lake.store.list_all("tables/t.lance/_lake/object_refs/").await.unwrap();
    assert!(listed.iter().any(|(k, _)| k.ends_with(&format!("/{v}.json"))), "{listed:?}");
    let err = lake.engine.repair_refs("t", v).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::SidecarConflict { .. }), "{err}");
}

// ---------------------------------------------------------------------------------------------
// 4. Lance branches.

/// Before the change, branches were ignored: main was fully journaled, the plan complete, and
/// `b` (referenced only by a row on the branch) was planned and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_with_its_own_rows_makes_lineage_incomplete() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced only on the branch").await;
    let cutoff = cutoff_now().await;

    let mut ds = second_client(&lake, "t").await;
    let mut branch = ds.create_branch("dev", 1, None).await.unwrap();
    branch.append(iter(batch(&[("e3", Some(&b))])), None).await.unwrap();
    assert_eq!(branch.count_rows(None).await.unwrap(), 3, "the premise: the branch has its own row");
    assert_eq!(versions(&lake, "t").await, vec![1], "main did not move");

    let problems = lineage_problems(&lake, "t").await;
    assert_eq!(problems, vec![LineageProblem::Branch { table: "t".into(), branch: "dev".into() }]);
    let plan = assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, false).await;
    assert!(
        plan.problems.iter().any(|p| p.kind == "branch" && p.message.contains("branch `dev`")),
        "{:?}",
        plan.problems
    );
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.problems.iter().any(|p| p.contains("branch `dev`")), "{:?}", report.problems);
}

/// A branch whose document is gone (a `create_branch` stopped between its two phases) still has
/// its dataset under `tree/`; a `tree/` folder holding only a stray file is a problem too.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_folder_without_its_document_makes_lineage_incomplete() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced only on the zombie branch").await;
    let cutoff = cutoff_now().await;

    let mut ds = second_client(&lake, "t").await;
    let mut branch = ds.create_branch("zombie", 1, None).await.unwrap();
    branch.append(iter(batch(&[("e3", Some(&b))])), None).await.unwrap();
    let dataset = lake.store.local_dir().unwrap().join(lake_store::layout::dataset_key("t"));
    std::fs::remove_file(dataset.join("_refs/branches/zombie.json")).unwrap();
    assert!(ds.list_branches().await.unwrap().is_empty(), "the premise: Lance no longer lists the branch");

    assert_eq!(
        lineage_problems(&lake, "t").await,
        vec![LineageProblem::Branch { table: "t".into(), branch: "zombie".into() }]
    );
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, false).await;

    // Only a stray file in another folder under `tree/`.
    std::fs::remove_dir_all(dataset.join("tree")).unwrap();
    assert_nothing_live_is_planned(&lake, cutoff, &[&a], &orphan, true).await;
    let orphan = lake.upload("orphan2.bin", b"another orphan").await;
    let cutoff = cutoff_now().await;
    let key = format!("{}/tree/ghost/leftover.bin", lake_store::layout::dataset_key("t"));
    lake.store.put(&key, b"left behind".to_vec()).await.unwrap();
    assert_eq!(
        lineage_problems(&lake, "t").await,
        vec![LineageProblem::Branch { table: "t".into(), branch: "ghost".into() }]
    );
    assert_nothing_live_is_planned(&lake, cutoff, &[&a], &orphan, false).await;
}

/// A plan made while the table had no branch; then a second client creates a branch and writes
/// a row there that references one of the plan's candidates. Main's versions, journal and
/// registry did not change, so apply's revalidation (which compares only those) lets the
/// candidate be deleted although a branch row now references it.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_created_between_plan_and_apply_stops_apply() {
    let (lake, orphan, a) = lake_with_table().await;
    let cutoff = cutoff_now().await;
    let plan = dry_run(&lake, cutoff, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(plan.candidates.keys().unwrap(), vec![orphan.key.clone()]);

    let mut ds = second_client(&lake, "t").await;
    let mut branch = ds.create_branch("dev", 1, None).await.unwrap();
    branch.append(iter(batch(&[("e3", Some(&orphan))])), None).await.unwrap();
    assert!(lineage_problems(&lake, "t")
        .await
        .contains(&LineageProblem::Branch { table: "t".into(), branch: "dev".into() }));

    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let applied = apply(
        &lake.engine,
        &deleter,
        &dir.path().join("gc.ckpt").as_path().into(),
        Some(&plan),
        &ApplyOptions::default(),
    )
    .await;
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
    assert!(
        lake.store.head(&orphan.key).await.unwrap().is_some(),
        "a branch row references {}, but apply deleted it (apply returned {applied:?})",
        orphan.key
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Base paths outside the dataset folder.

/// `add_bases`, then an append whose data files land in the added base: rows outside the
/// dataset folder. Before the change, the base was no problem and repair journaled such versions.
#[tokio::test(flavor = "multi_thread")]
async fn an_added_base_path_is_a_problem_and_repair_refuses_its_versions() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced by rows stored in the added base").await;
    let cutoff = cutoff_now().await;
    let outside = tempfile::tempdir().unwrap();
    let base_uri = format!("file://{}", outside.path().join("ext").display());

    let ds = Arc::new(second_client(&lake, "t").await);
    let with_base =
        ds.add_bases(vec![BasePath::new(0, base_uri.clone(), Some("ext".into()), true)], None).await.unwrap();
    let v_bases = with_base.version().version;
    let params = WriteParams {
        mode: WriteMode::Append,
        target_base_names_or_paths: Some(vec!["ext".into()]),
        ..Default::default()
    };
    let appended =
        Dataset::write(iter(batch(&[("e3", Some(&b))])), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let v_rows = appended.version().version;
    assert_eq!((v_bases, v_rows), (2, 3));
    let files_outside = walkdir::WalkDir::new(outside.path())
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .count();
    assert!(files_outside > 0, "the premise: the append wrote its data files into the added base");

    let problems = lineage_problems(&lake, "t").await;
    assert!(
        problems.iter().any(|p| matches!(p, LineageProblem::ExternalBase { table, path } if table == "t" && path.contains(outside.path().to_str().unwrap()))),
        "{problems:?}"
    );
    for v in [v_bases, v_rows] {
        let err = lake.engine.repair_refs("t", v).await.unwrap_err();
        assert!(
            matches!(err, LanceEngineError::InvalidInput(ref m) if m.contains("outside its dataset folder")),
            "{err}"
        );
        assert!(lake.store.get(&lake_store::layout::sidecar_key("t", v)).await.unwrap().is_none(), "nothing journaled");
    }
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &b], &orphan, false).await;
}

/// A second client shallow-clones a dataset kept outside the lake (its rows reference a lake
/// object) into the lake's tables folder, and the table gets registered: every row is read from
/// the source's folder. Before the change, repair journaled the clone from a scan.
#[tokio::test(flavor = "multi_thread")]
async fn a_registered_shallow_clone_is_a_problem_and_repair_refuses_it() {
    let (lake, orphan, a) = lake_with_table().await;
    let y = lake.upload("y.bin", b"referenced only by the clone's rows").await;
    let cutoff = cutoff_now().await;
    let outside = tempfile::tempdir().unwrap();
    let source_uri = outside.path().join("source.lance").display().to_string();

    let mut source = Dataset::write(iter(batch(&[("e", Some(&y))])), &source_uri, None).await.unwrap();
    let clone = source.shallow_clone(&lake.engine.dataset_uri("c"), 1, None).await.unwrap();
    let v = clone.version().version;
    assert!(!clone.manifest().base_paths.is_empty(), "the premise: the clone reads from the source");
    registry::advance(&lake.store, "c", v).await.unwrap();

    let problems = lineage_problems(&lake, "c").await;
    assert!(problems.contains(&LineageProblem::MissingSidecar { table: "c".into(), version: v }), "{problems:?}");
    assert!(
        problems.iter().any(|p| matches!(p, LineageProblem::ExternalBase { table, path } if table == "c" && path.contains("source.lance"))),
        "{problems:?}"
    );
    assert!(lineage_problems(&lake, "t").await.is_empty(), "the lake's own table is fine");
    let err = lake.engine.repair_refs("c", v).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::InvalidInput(ref m) if m.contains("outside its dataset folder")), "{err}");
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &y], &orphan, false).await;
}

// ---------------------------------------------------------------------------------------------
// 6. Nested DataLocations and blob v2 columns.

fn nested_location_column(objects: &[Option<&ManagedObject>], marked: bool) -> (Field, ArrayRef) {
    let inner = if marked { data_location_field("file", true) } else { Field::new("file", data_location_type(), true) };
    let fields = Fields::from(vec![inner]);
    let array = StructArray::new(fields.clone(), vec![Arc::new(locations(objects))], None);
    (Field::new("meta", DataType::Struct(fields), true), Arc::new(array))
}

/// Before the change, a DataLocation inside a struct column was not looked at: the engine
/// appended it without journaling `c`, and repair's snapshot left `c` out.
#[tokio::test(flavor = "multi_thread")]
async fn a_nested_location_is_refused_by_append_and_by_repair() {
    let (lake, orphan, a) = lake_with_table().await;
    let c = lake.upload("c.bin", b"referenced only inside a struct").await;
    let cutoff = cutoff_now().await;

    // The engine's own append: refused, marked or not, on a new table or an existing one.
    for marked in [true, false] {
        let (meta, values) = nested_location_column(&[Some(&c)], marked);
        let rows = keyed(&["e3"], meta, values);
        for table in ["t", "n"] {
            let schema = rows.schema();
            let err = lake
                .engine
                .append(table, Box::new(RecordBatchIterator::new(vec![Ok(rows.clone())], schema)))
                .await
                .unwrap_err();
            assert!(
                matches!(&err, LanceEngineError::Location { source: LocationError::Nested { column, .. }, .. } if column == "meta.file"),
                "{err}"
            );
        }
    }
    assert_eq!(versions(&lake, "t").await, vec![1], "nothing committed");
    assert!(!lake.engine.table_exists("n").await.unwrap(), "no table created");

    // A second client's version with one.
    let (meta, values) = nested_location_column(&[Some(&c), None], false);
    let mut ds = second_client(&lake, "t").await;
    ds.merge(iter(keyed(&["e1", "e2"], meta, values)), "episode", "episode").await.unwrap();
    let v = ds.version().version;
    let err = lake.engine.repair_refs("t", v).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Unreadable { source: LocationError::Nested { column, .. }, .. } if column == "meta.file"),
        "{err}"
    );
    let problems = lineage_problems(&lake, "t").await;
    assert!(
        problems.iter().any(|p| matches!(p, LineageProblem::UnreadableColumns { version, .. } if *version == v)),
        "{problems:?}"
    );
    assert!(!lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &c], &orphan, false).await;
}

/// A Lance blob v2 column (`lance.blob.v2`) can name any object by URI outside a DataLocation.
/// Before the change it was not looked at: appended without journaling, repaired as nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_blob_v2_column_is_refused_by_append_and_by_repair() {
    let (lake, orphan, a) = lake_with_table().await;
    let d = lake.upload("d.bin", b"referenced only by a blob v2 descriptor").await;
    let cutoff = cutoff_now().await;

    let blob_rows = |objects: &[&ManagedObject]| {
        let mut blobs = lance::BlobArrayBuilder::new(objects.len());
        for o in objects {
            blobs.push_uri(file_url(&lake, o)).unwrap();
        }
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(objects.iter().map(|o| o.key.clone())));
        let schema = Arc::new(Schema::new(vec![
            Field::new("episode", DataType::Utf8, false),
            data_location_field("file", true),
            lance::blob_field("video", true),
        ]));
        let files: ArrayRef = Arc::new(locations(&objects.iter().map(|_| Some(&a)).collect::<Vec<_>>()));
        RecordBatch::try_new(schema, vec![episodes, files, blobs.finish().unwrap()]).unwrap()
    };

    // The engine's own append refuses it (nothing committed, no table created).
    let rows = blob_rows(&[&d]);
    let schema = rows.schema();
    let err =
        lake.engine.append("v", Box::new(RecordBatchIterator::new(vec![Ok(rows.clone())], schema))).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Location { source: LocationError::Unsupported { column, .. }, .. } if column == "video"),
        "{err}"
    );
    assert!(!lake.engine.table_exists("v").await.unwrap());

    // A second client overwrites the table with one.
    let params =
        WriteParams { mode: WriteMode::Overwrite, allow_external_blob_outside_bases: true, ..Default::default() };
    let ds = Dataset::write(iter(rows), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let v = ds.version().version;
    let stored = arrow_schema::Schema::from(ds.schema());
    assert!(stored.field_with_name("video").is_ok(), "the premise: Lance stored the blob column");
    let err = lake.engine.repair_refs("t", v).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Unreadable { source: LocationError::Unsupported { column, .. }, .. } if column == "video"),
        "{err}"
    );
    let problems = lineage_problems(&lake, "t").await;
    assert!(
        problems.iter().any(|p| matches!(p, LineageProblem::UnreadableColumns { version, .. } if *version == v)),
        "{problems:?}"
    );
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_nothing_live_is_planned(&lake, cutoff, &[&a, &d], &orphan, false).await;
}

// ---------------------------------------------------------------------------------------------
// Probes beyond the first adversarial run's inputs.

/// A struct with the DataLocation's three children of the exact types and one more child (a
/// client that added `mime` to each location) is neither the layout nor a look-alike (the
/// look-alike rule wants exactly the three names), so it is skipped: repair journals the
/// version without `b`, the lineage is complete and `b` is planned and deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_location_struct_with_an_extra_child_is_not_skipped() {
    let (lake, orphan, a) = lake_with_table().await;
    let b = lake.upload("b.bin", b"referenced by a location with a mime child").await;
    let cutoff = cutoff_now().await;

    let base = locations(&[Some(&b), None]);
    let (mut fields, mut columns, nulls) = base.into_parts();
    let mut with_mime: Vec<Arc<Field>> = fields.iter().cloned().collect();
    with_mime.push(Arc::new(Field::new("mime", DataType::Utf8, true)));
    fields = Fields::from(with_mime);
    columns.push(Arc::new(StringArray::from(vec![Some("video/mp4"), None])));
    let array = StructArray::new(fields.clone(), columns, nulls);
    assert_eq!(array.len(), 2);
    let mut ds = second_client(&lake, "t").await;
    ds.merge(
        iter(keyed(&["e1", "e2"], Field::new("extra", DataType::Struct(fields), true), Arc::new(array))),
        "episode",
        "episode",
    )
    .await
    .unwrap();
    let v = ds.version().version;
    // Either repair refuses the column, or its snapshot includes `b`.
    if let Ok(snapshot) = repair(&lake, "t", v).await {
        lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
        assert_eq!(
            count_in(&snapshot, &b),
            1,
            "repair's snapshot left out the objects of column `extra`: {snapshot:?}"
        );
    }
    let plan = dry_run(&lake, cutoff, 10).await;
    let candidates = plan.candidates.keys().unwrap();
    assert!(!candidates.contains(&b.key), "{} is referenced by column `extra` but was planned", b.key);
    assert!(lake.store.head(&a.key).await.unwrap().is_some() && lake.store.head(&orphan.key).await.unwrap().is_some());
}
