//! Attacks on the create-only commit (f90a787; now the create-only gate in `commit/gate.rs`,
//! driven by `commit/mod.rs`): a create lands only as version 1; a create that raced another is
//! refused as `ConcurrentCreate` and the caller retries as an append. Each test checks that no
//! write reported successful lost rows,
//! that the journal agrees with the rows (`verify_refs`, `check_retained_objects`) and that GC
//! plans no object a retained version references.
//!
//! Results: engine-vs-engine creates (local and LocalStack S3), an overwrite of a missing table
//! racing appends, and creates under a tight commit deadline hold. A create racing a stock Lance
//! second client is outside the engine's reach (the client commits through its own Lance): with
//! V2 manifest names the client's create lands as an `Overwrite` version 2 over the engine's
//! version 1 (the engine's rows are gone from the latest version), and with V1 manifest names
//! both land as version 1 (`1.manifest` and `18446744073709551614.manifest`: the conditional
//! put does not collide) and the table cannot be opened. There the tests check that GC fails
//! closed (docs/safety.md, "Outside the model").
use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader, schema, unchecked_plan_now, TestLake};
use arrow_array::{Array, RecordBatch, RecordBatchReader, StringArray};
use arrow_schema::SchemaRef;
use chrono::Utc;
use lake_lance::verify::check_retained_objects;
use lake_lance::{LanceEngine, LanceEngineError};
use lake_store::writer::ManagedObject;
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Episodes of the latest version of the dataset at `uri` (and the version).
async fn episodes_at(uri: &str) -> (u64, BTreeSet<String>) {
    let ds = Dataset::open(uri).await.unwrap();
    let batch = ds.scan().try_into_batch().await.unwrap();
    let col = batch.column_by_name("episode").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
    (ds.version().version, (0..col.len()).map(|i| col.value(i).to_string()).collect())
}

async fn try_episodes_at(uri: &str) -> Result<(u64, BTreeSet<String>), String> {
    let ds = Dataset::open(uri).await.map_err(|e| e.to_string())?;
    let batch = ds.scan().try_into_batch().await.map_err(|e| e.to_string())?;
    let col = batch.column_by_name("episode").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
    Ok((ds.version().version, (0..col.len()).map(|i| col.value(i).to_string()).collect()))
}

async fn episodes_of(lake: &TestLake, table: &str) -> (u64, BTreeSet<String>) {
    let ds = lake.engine.open(table).await.unwrap();
    let batch = ds.scan().try_into_batch().await.unwrap();
    let col = batch.column_by_name("episode").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
    (ds.version().version, (0..col.len()).map(|i| col.value(i).to_string()).collect())
}

/// Appends through `engine`, retrying `ConcurrentCreate` as the caller is told to.
async fn append_retrying(engine: &LanceEngine, table: &str, rows: &[(&str, Option<&ManagedObject>)]) -> (u64, u32) {
    let mut refused = 0;
    loop {
        match engine.append(table, reader(vec![batch(rows)])).await {
            Ok(outcome) => return (outcome.version, refused),
            Err(LanceEngineError::ConcurrentCreate { .. }) => refused += 1,
            Err(e) => panic!("append {table}: {e}"),
        }
        assert!(refused < 50, "{table}: ConcurrentCreate forever");
    }
}

/// The journal agrees with the rows and GC plans nothing a retained version references.
async fn assert_journal_and_gc(lake: &TestLake, live: &[&ManagedObject]) {
    let verify = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(verify.is_ok(), "verify_refs: {verify:?}");
    let retained = check_retained_objects(&lake.engine).await.unwrap();
    assert!(retained.is_ok(), "check_retained_objects: {retained:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let plan = dry_run(lake, Utc::now(), 10).await;
    assert!(plan.lineage_complete, "lineage incomplete: {:?}", plan.problems);
    let candidates: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    for o in live {
        assert!(!candidates.contains(&o.key), "{} is referenced by a retained version but was planned", o.key);
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Concurrent first appends through several engines on the same lake.

/// Four engines (separate `LanceEngine`s, same root) append the first rows of the same table at
/// once, on 12 tables. Every append that returned Ok must be in the table; the journal must
/// agree; no referenced object may be planned.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn attack_create_concurrent_first_appends_through_four_engines() {
    concurrent_first_appends(new_lake().await, 12).await;
}

/// The same on LocalStack S3 (conditional put through S3's If-None-Match).
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn attack_create_s3_concurrent_first_appends_through_four_engines() {
    concurrent_first_appends(crate::support::new_s3_lake("attack-create").await, 6).await;
}

/// Uploads one object per writer, then runs `writers` tasks, each with its own engine, that pass
/// a barrier together and run `write(engine, table, writer, object)`; the objects and the
/// results, in writer order.
async fn race<T, F, Fut>(lake: &TestLake, table: &str, writers: usize, write: F) -> (Vec<ManagedObject>, Vec<T>)
where
    F: Fn(LanceEngine, String, usize, ManagedObject) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(writers));
    let mut objects = Vec::new();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let object = lake.upload(&format!("{table}-w{w}"), format!("{table} writer {w}").as_bytes()).await;
        objects.push(object.clone());
        let engine = LanceEngine::new(lake.store.clone()).with_memory_budget(2048);
        let (barrier, written) = (barrier.clone(), write(engine, table.to_string(), w, object));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            written.await
        }));
    }
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    (objects, results)
}

async fn concurrent_first_appends(lake: TestLake, tables: usize) {
    let lake = Arc::new(lake);
    let mut live = Vec::new();
    let mut refused_total = 0;
    for t in 0..tables {
        let table = format!("t{t}");
        let (objects, results) = race(&lake, &table, 4, |engine, table, w, object| async move {
            let episode = format!("{table}-w{w}");
            append_retrying(&engine, &table, &[(episode.as_str(), Some(&object))]).await
        })
        .await;
        live.extend(objects);
        refused_total += results.iter().map(|(_, refused)| refused).sum::<u32>();
        let (version, episodes) = episodes_of(&lake, &table).await;
        let expected: BTreeSet<String> = (0..4).map(|w| format!("{table}-w{w}")).collect();
        assert_eq!(episodes, expected, "{table} at version {version} lost rows of a successful append");
        assert_eq!(version, 4, "{table}: one create and three appends");
    }
    eprintln!("ConcurrentCreate refusals: {refused_total}");
    let live: Vec<&ManagedObject> = live.iter().collect();
    assert_journal_and_gc(&lake, &live).await;
}

/// An overwrite of a table that does not exist races appends (all creates): whichever wins, the
/// table's rows are those of the successful writes in commit order (an overwrite that landed
/// after an append replaces it: that is what it reports), and the journal agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn attack_create_overwrite_of_a_missing_table_races_appends() {
    let lake = Arc::new(new_lake().await);
    let mut live = Vec::new();
    for t in 0..10 {
        let table = format!("o{t}");
        let (objects, results) = race(&lake, &table, 3, |engine, table, w, object| async move {
            let episode = format!("{table}-w{w}");
            let rows = [(episode.as_str(), Some(&object))];
            loop {
                let r = if w == 0 {
                    engine.overwrite(&table, reader(vec![batch(&rows)])).await
                } else {
                    engine.append(&table, reader(vec![batch(&rows)])).await
                };
                match r {
                    Ok(o) => return Some((w, o.version)),
                    Err(LanceEngineError::ConcurrentCreate { .. }) => continue,
                    // An append Lance finds incompatible with a concurrent overwrite fails
                    // (reported): nothing of it is in the table.
                    Err(e) => {
                        eprintln!("{table} w{w} failed: {e}");
                        return None;
                    }
                }
            }
        })
        .await;
        let mut landed: Vec<(usize, u64)> = results.into_iter().flatten().collect();
        landed.sort_by_key(|(_, v)| *v);
        // Objects of successful writes are referenced by a retained version.
        live.extend(landed.iter().map(|(w, _)| objects[*w].clone()));
        // Expected rows: from the last overwrite on.
        let from = landed.iter().rposition(|(w, _)| *w == 0).unwrap();
        let expected: BTreeSet<String> = landed[from..].iter().map(|(w, _)| format!("{table}-w{w}")).collect();
        let (version, episodes) = episodes_at(&lake.engine.dataset_uri(&table)).await;
        assert_eq!(version, landed.last().unwrap().1);
        assert_eq!(episodes, expected, "{table}: commit order {landed:?}");
    }
    // Objects of rows an overwrite replaced are no longer in the latest version but are in
    // retained older versions: all must stay unplanned.
    let live: Vec<&ManagedObject> = live.iter().collect();
    assert_journal_and_gc(&lake, &live).await;
}

// ---------------------------------------------------------------------------------------------
// 2. A create racing a second Lance client that creates the same dataset.

/// A reader that yields its batch, then waits (blocking) at `barrier` before ending the stream:
/// the engine's data phase ends when the second client is ready to commit.
struct GatedReader {
    batch: Option<RecordBatch>,
    barrier: Arc<std::sync::Barrier>,
    schema: SchemaRef,
}

impl Iterator for GatedReader {
    type Item = Result<RecordBatch, arrow_schema::ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.batch.take() {
            Some(b) => Some(Ok(b)),
            None => {
                self.barrier.wait();
                None
            }
        }
    }
}

impl RecordBatchReader for GatedReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// One round: the engine's first append of `table` and a second client's create of the same
/// dataset (`v2_paths` its manifest naming) commit at about the same moment (the second client
/// after `jitter`). Returns (engine result, second client result).
async fn race_second_client(
    lake: &Arc<TestLake>,
    table: &str,
    v2_paths: bool,
    jitter: Duration,
    engine_object: &ManagedObject,
    client_object: &ManagedObject,
) -> (Result<u64, String>, Result<u64, String>) {
    let uri = lake.engine.dataset_uri(table);
    let barrier = Arc::new(std::sync::Barrier::new(2));
    // The second client writes its data files first (table absent), then waits for the engine.
    let params = WriteParams { mode: WriteMode::Create, enable_v2_manifest_paths: v2_paths, ..Default::default() };
    let client_rows = batch(&[(&format!("{table}-client"), Some(client_object))]);
    let tx =
        InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted(vec![client_rows]).await.unwrap();
    let client = {
        let barrier = barrier.clone();
        let uri = uri.clone();
        tokio::spawn(async move {
            tokio::task::spawn_blocking(move || barrier.wait()).await.unwrap();
            tokio::time::sleep(jitter).await;
            CommitBuilder::new(uri.as_str())
                .enable_v2_manifest_paths(v2_paths)
                .with_skip_auto_cleanup(true)
                .execute(tx)
                .await
                .map(|ds| ds.version().version)
                .map_err(|e| e.to_string())
        })
    };
    let engine_rows = batch(&[(&format!("{table}-engine"), Some(engine_object))]);
    let gated = GatedReader { batch: Some(engine_rows), barrier, schema: schema() };
    let engine = lake.engine.append(table, Box::new(gated)).await.map(|o| o.version).map_err(|e| e.to_string());
    (engine, client.await.unwrap())
}

async fn second_client_race(v2_paths: bool) {
    let lake = Arc::new(new_lake().await);
    let mut both = 0;
    let mut lost = Vec::new();
    let mut broken = Vec::new();
    let mut engine_live = Vec::new();
    for round in 0..60u64 {
        let table = format!("r{round}");
        let eo = lake.upload(&format!("{table}-e"), format!("{table} engine").as_bytes()).await;
        let co = lake.upload(&format!("{table}-c"), format!("{table} client").as_bytes()).await;
        let jitter = Duration::from_micros((round % 12) * 500);
        let (engine, client) = race_second_client(&lake, &table, v2_paths, jitter, &eo, &co).await;
        let opened = try_episodes_at(&lake.engine.dataset_uri(&table)).await;
        let (version, episodes) = match &opened {
            Ok(x) => x.clone(),
            Err(e) => {
                broken.push(format!(
                    "{table}: engine {engine:?}, client {client:?}, {e}, _versions {:?}",
                    listing(&lake, &table)
                ));
                (0, BTreeSet::new())
            }
        };
        if engine.is_ok() && client.is_ok() {
            both += 1;
        }
        if engine.is_ok() {
            engine_live.push(eo.clone());
            if opened.is_ok() && !episodes.contains(&format!("{table}-engine")) {
                lost.push(format!(
                    "{table}: engine {engine:?}, client {client:?}, table at v{version} has {episodes:?}, _versions {:?}",
                    listing(&lake, &table)
                ));
            }
        }
    }
    eprintln!("rounds where both reported success: {both}");
    eprintln!("engine's successful create not in the latest version: {} rounds, e.g. {:?}", lost.len(), lost.first());
    eprintln!("table unreadable after the race: {} rounds, e.g. {:?}", broken.len(), broken.first());
    // No object of a successful engine write may be planned (the engine's version 1 is
    // retained even where a second client's overwrite replaced it).
    let live: Vec<&ManagedObject> = engine_live.iter().collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let planned = unchecked_plan_now(&lake, Duration::from_secs(1)).await;
    eprintln!(
        "plan: {:?}",
        planned.as_ref().map(|(p, _)| (p.lineage_complete, p.problems.clone())).map_err(|e| e.to_string())
    );
    // OPEN (outside the engine's reach): a second client's create replaces the rows of the
    // engine's create (Lance commits it as an `Overwrite` at version 2), or, with V1 manifest
    // names, lands beside it as a second version 1 that leaves the table unreadable. The
    // second client's commit goes through its own Lance, not through lake's create-only
    // handler. What must hold is that GC fails closed: it refuses the lake, or its lineage is
    // incomplete, and no object a successful write referenced is planned.
    let Ok((plan, _)) = planned else {
        assert!(!broken.is_empty(), "the plan failed although every table opens");
        return;
    };
    let candidates: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    for o in live {
        assert!(!candidates.contains(&o.key), "{} is referenced by a retained version but was planned", o.key);
    }
    if !lost.is_empty() || !broken.is_empty() {
        assert!(!plan.lineage_complete, "a second client replaced or broke a table, yet the lineage is complete");
    }
}

fn listing(lake: &TestLake, table: &str) -> Vec<String> {
    std::fs::read_dir(std::path::Path::new(&lake.engine.dataset_uri(table)).join("_versions"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

/// Second client with Lance's default (V2) manifest names: both creates put the same
/// `_versions` file, so conditional put lets one through.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn attack_create_races_a_second_client_create_v2_paths() {
    second_client_race(true).await;
}

/// Second client with V1 manifest names (`enable_v2_manifest_paths=False` in pylance, or an old
/// Lance): its version 1 is `_versions/1.manifest`, the engine's is
/// `_versions/18446744073709551614.manifest`; conditional put of one does not see the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn attack_create_races_a_second_client_create_v1_paths() {
    second_client_race(false).await;
}

// ---------------------------------------------------------------------------------------------
// 3. A create whose commit hits its deadline.

/// An engine whose commits get a deadline of a few milliseconds: some creates are refused by
/// the commit gate before their manifest write, some time out while it is in flight (the
/// version may land; the writer resolves its write intent: committed and journaled, or still
/// pending with its objects protected). Whatever happened, GC must plan no object that a
/// version in the table references: a version without a sidecar must make the lineage
/// incomplete, not be read as empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attack_create_timing_out_after_version_one_landed() {
    for ms in [20u64, 14, 10, 8] {
        timing_out_create(Duration::from_millis(ms)).await;
    }
}

async fn timing_out_create(min_age: Duration) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake");
    let mut lake = crate::support::new_lake_with_policy(root.to_str().unwrap(), min_age).await;
    lake.engine =
        lake_lance::LanceEngine::new(lake.store.clone()).with_memory_budget(2048).with_commit_deadline(min_age);
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    let mut in_table = Vec::new();
    for t in 0..40 {
        let table = format!("d{t}");
        let object = lake.upload(&table, table.as_bytes()).await;
        let r = lake.engine.append(&table, reader(vec![batch(&[(table.as_str(), Some(&object))])])).await;
        let landed = try_episodes_at(&lake.engine.dataset_uri(&table)).await.is_ok_and(|(_, e)| e.contains(&table));
        let kind = match &r {
            Ok(_) => "ok".to_string(),
            Err(LanceEngineError::Lance { source: lance::Error::Timeout { .. }, .. }) => "timeout".into(),
            Err(LanceEngineError::NotCommitted { .. }) => "not committed".into(),
            Err(LanceEngineError::CommitUncertain { .. }) => "uncertain".into(),
            Err(LanceEngineError::Guard { .. }) => "guard".into(),
            Err(e) => format!("other: {e}"),
        };
        *outcomes.entry(format!("{kind} landed={landed}")).or_default() += 1;
        if landed {
            in_table.push(object);
        }
    }
    eprintln!("min_age {min_age:?}: outcomes: {outcomes:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (plan, _) = unchecked_plan_now(&lake, min_age).await.unwrap();
    eprintln!(
        "plan: complete={} problems={} e.g. {:?}",
        plan.lineage_complete,
        plan.problems.len(),
        plan.problems.first()
    );
    let candidates: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    for o in &in_table {
        assert!(!candidates.contains(&o.key), "{} is in a table version but was planned", o.key);
    }
}
