//! Helpers: a fresh local lake, uploads, and record batches with DataLocation columns.

use arrow_array::{
    ArrayRef, BinaryArray, Int64Array, RecordBatch, RecordBatchIterator, RecordBatchReader, StringArray, StructArray,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::LakeStore;
use std::sync::Arc;
use std::time::Duration;

pub(crate) struct TestLake {
    pub _dir: Option<tempfile::TempDir>,
    pub store: LakeStore,
    pub engine: LanceEngine,
    pub writer: ManagedObjectWriter,
}

/// A new lake in a temporary folder.
pub(crate) async fn new_lake() -> TestLake {
    let dir = tempfile::tempdir().unwrap();
    let mut lake = new_lake_at(dir.path().join("lake").to_str().unwrap()).await;
    lake._dir = Some(dir);
    lake
}

/// A new lake at `root` with a policy floor of 1 hour (tests plan with explicit cutoffs; the long
/// floor keeps the publication guard out of tests that re-reference objects over seconds).
pub(crate) async fn new_lake_at(root: &str) -> TestLake {
    new_lake_with_policy(root, Duration::from_secs(3600)).await
}

/// A new lake at `root` with policy floor `min_age`.
pub(crate) async fn new_lake_with_policy(root: &str, min_age: Duration) -> TestLake {
    let store = LakeStore::open(root).unwrap();
    LakeDescriptor::create(&store, min_age).await.unwrap();
    TestLake {
        // A budget of a few journal events: every test's plans replay through spilled runs.
        engine: LanceEngine::new(store.clone()).with_memory_budget(2048),
        writer: ManagedObjectWriter::new(store.clone()),
        store,
        _dir: None,
    }
}

/// Longer than every commit deadline of the tests (the held lakes' hour, the default 5 minutes)
/// plus the resolution slack: how far ahead a resolver's clock is set to find every intent due.
pub(crate) const LATER: Duration = Duration::from_secs(2 * 3600);

/// An engine of `lake` whose store clock reads `ahead` of now: the resolver an operator runs
/// once that much time has passed (`lake refs recover` then finds every intent of a write
/// killed before past its deadline, with no test sleeping for it).
pub(crate) fn engine_later(lake: &TestLake, ahead: Duration) -> LanceEngine {
    let later = chrono::Utc::now() + chrono::Duration::from_std(ahead).unwrap();
    LanceEngine::new(lake.store.clone())
        .with_memory_budget(2048)
        .with_store_clock(Arc::new(lake_store::clock::FixedClock(later)))
}

/// A new lake under the LocalStack bucket that `scripts/localstack.sh` created.
pub(crate) async fn new_s3_lake(name: &str) -> TestLake {
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET")
        .expect("LAKE_TEST_S3_BUCKET is not set: run S3 tests through scripts/test.sh (it starts LocalStack)");
    let root = format!("s3://{bucket}/{name}-{}", ulid::Ulid::new().to_string().to_lowercase());
    new_lake_at(&root).await
}

impl TestLake {
    pub(crate) async fn upload(&self, name: &str, content: &[u8]) -> ManagedObject {
        self.writer.upload(name, content).await.unwrap()
    }

    /// Keys of every object under `objects/` and elsewhere outside `_lake/` and `tables/`.
    pub(crate) async fn all_object_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .store
            .list_all("")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| !k.starts_with("_lake/") && !k.starts_with("tables/"))
            .collect();
        keys.sort();
        keys
    }
}

pub(crate) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), data_location_field("file", true)]))
}

/// One batch: rows of (episode, object) with an optional object (None = null reference).
pub(crate) fn batch(rows: &[(&str, Option<&ManagedObject>)]) -> RecordBatch {
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(e, _)| *e)));
    let mut files = DataLocationBuilder::new();
    for (_, o) in rows {
        match o {
            Some(o) => files.append(&o.key, o.sha256, o.size),
            None => files.append_null(),
        }
    }
    RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap()
}

pub(crate) fn reader(batches: Vec<RecordBatch>) -> Box<dyn RecordBatchReader + Send> {
    Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema()))
}

/// Applies `plan` with `options` and a checkpoint in a fresh temporary folder.
pub(crate) async fn apply_fresh(
    lake: &TestLake,
    plan: &lake_gc::plan::GcPlan,
    options: &lake_gc::apply::ApplyOptions,
) -> Result<lake_gc::apply::ApplyReport, lake_gc::GcError> {
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    lake_gc::unchecked::apply_unchecked(
        &lake.engine,
        &deleter,
        &dir.path().join("c").as_path().into(),
        Some(plan),
        options,
    )
    .await
}

/// Copies the folder tree `from` into `to` (a backup, or its restore).
pub(crate) fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let target = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// `(episode, <column>)` rows: a key and a nullable DataLocation column named `column` (for
/// `add_columns`); `None` is a null.
pub(crate) fn keyed_locations(
    column: &str,
    rows: &[(&str, Option<&ManagedObject>)],
) -> Box<dyn RecordBatchReader + Send> {
    let mut files = DataLocationBuilder::new();
    for (_, o) in rows {
        match o {
            Some(o) => files.append(&o.key, o.sha256, o.size),
            None => files.append_null(),
        }
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, false),
        lake_common::data_location_field(column, true),
    ]));
    let episodes = StringArray::from_iter_values(rows.iter().map(|(e, _)| *e));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(episodes), Arc::new(files.finish())]).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// A dry run of `lake` at a cutoff of now minus `min_age`, without the policy and clock checks
/// (`lake_gc::unchecked`), listing 10 keys a page with a 3-byte memory budget (every list
/// spills).
pub(crate) async fn unchecked_plan_now(
    lake: &TestLake,
    min_age: Duration,
) -> Result<(lake_gc::plan::GcPlan, lake_gc::planner::PlanStats), lake_gc::GcError> {
    let options = lake_gc::unchecked::PlanOptions::new(lake.store.root(), min_age, chrono::Utc::now())
        .page_size(10)
        .memory_budget(3);
    lake_gc::unchecked::plan_with_unchecked_cutoff(
        &lake.engine,
        lake_gc::inventory::for_store(&lake.store).as_ref(),
        &options,
    )
    .await
}

/// One batch as a reader (for plain Lance's `Dataset::write` and `merge`).
pub(crate) fn iter(
    batch: RecordBatch,
) -> RecordBatchIterator<std::vec::IntoIter<Result<RecordBatch, arrow_schema::ArrowError>>> {
    let schema = batch.schema();
    RecordBatchIterator::new(vec![Ok(batch)].into_iter(), schema)
}

/// DataLocation values (the exact layout) for `objects`, `None` a null.
pub(crate) fn locations(objects: &[Option<&ManagedObject>]) -> StructArray {
    let mut b = DataLocationBuilder::new();
    for o in objects {
        match o {
            Some(o) => b.append(&o.key, o.sha256, o.size),
            None => b.append_null(),
        }
    }
    b.finish()
}

/// The struct a round trip through Python objects gives (`to_pylist()` then `from_pylist`) for
/// `objects`: `uri: string, sha256: binary, size: int64`, every child nullable, no marker.
pub(crate) fn python_like_values(objects: &[&ManagedObject]) -> (Fields, ArrayRef) {
    let fields = Fields::from(vec![
        Field::new("uri", DataType::Utf8, true),
        Field::new("sha256", DataType::Binary, true),
        Field::new("size", DataType::Int64, true),
    ]);
    let uris: ArrayRef = Arc::new(StringArray::from_iter_values(objects.iter().map(|o| o.key.as_str())));
    let shas: ArrayRef = Arc::new(BinaryArray::from_iter_values(objects.iter().map(|o| o.sha256.to_vec())));
    let sizes: ArrayRef = Arc::new(Int64Array::from_iter_values(objects.iter().map(|o| o.size as i64)));
    let array: ArrayRef = Arc::new(StructArray::new(fields.clone(), vec![uris, shas, sizes], None));
    (fields, array)
}
