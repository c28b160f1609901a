//! Stress: writers ingest and delete concurrently while GC cleans up, plans and applies in a
//! loop with a short min_age. Bounded in time: `LAKE_STRESS_SECONDS` (default 12 on LocalStack,
//! 4 locally) sets how long the writers run; run longer with e.g.
//! `LAKE_STRESS_SECONDS=600 scripts/test.sh stress`.

use crate::support::{batch, new_lake_with_policy, reader, TestLake};
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::cutoff::gc_cutoff;
use lake_gc::inventory;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_lance::verify::check_retained_objects;
use lake_lance::LanceEngineError;
use lake_store::clock::read_store_clock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that the publication guard's limit (three quarters of it) holds between an upload
/// and its append on a loaded machine.
const MIN_AGE: Duration = Duration::from_secs(10);

async fn writer(lake: Arc<TestLake>, id: usize, stop: Arc<AtomicBool>, abandoned: Arc<AtomicU64>) -> u64 {
    let mut commits = 0;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let a = lake.upload(&format!("w{id}-{n}-a"), format!("writer {id} object {n} a").as_bytes()).await;
        let b = lake.upload(&format!("w{id}-{n}-b"), format!("writer {id} object {n} b").as_bytes()).await;
        let episode = format!("w{id}-{n}");
        let rows = reader(vec![batch(&[(episode.as_str(), Some(&a)), (episode.as_str(), Some(&b))])]);
        match lake.engine.append("t", rows).await {
            Ok(_) => commits += 1,
            // The commit failed and was proven never to land (its write intent kept the objects
            // until then), or was refused at its deadline before any manifest write.
            Err(LanceEngineError::NotCommitted { .. })
            | Err(LanceEngineError::Lance { source: lance::Error::Timeout { .. }, .. }) => {
                abandoned.fetch_add(1, Ordering::Relaxed);
            }
            // Lance listed a version as the latest and the GC round's `cleanup` (1 s retention)
            // removed its manifest before Lance read it, as a newer version had just landed:
            // Lance gives up before its commit, which commits nothing.
            Err(LanceEngineError::Lance { source, .. }) if manifest_cleaned_up(&source) => {
                abandoned.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => panic!("writer {id}: {e}"),
        }
        if n.is_multiple_of(3) {
            // Delete an earlier episode of this writer; a conflicting concurrent delete may make
            // Lance give up, which commits nothing.
            match lake.engine.delete("t", &format!("episode = 'w{id}-{}'", n - 1)).await {
                Ok(_) => commits += 1,
                Err(LanceEngineError::Lance { action: "delete", source, .. }) => {
                    eprintln!("writer {id}: delete gave up: {source}")
                }
                Err(e) => panic!("writer {id}: {e}"),
            }
        }
    }
    commits
}

/// Whether Lance failed reading a manifest that is gone (`_versions/<n>.manifest` not found).
fn manifest_cleaned_up(error: &lance::Error) -> bool {
    let text = error.to_string();
    text.contains("Not found") && text.contains("/_versions/") && text.contains(".manifest")
}

async fn gc_round(lake: &TestLake, dir: &std::path::Path, round: u64, deleted: &AtomicU64) {
    lake.engine.cleanup("t", Duration::from_secs(1)).await.unwrap();
    let clock = read_store_clock(&lake.store).await.unwrap();
    let cutoff = gc_cutoff(&clock, MIN_AGE, Duration::from_secs(60)).unwrap();
    let options = PlanOptions::new(lake.store.root(), MIN_AGE, cutoff).page_size(50).memory_budget(3);
    let inv = inventory::for_store(&lake.store);
    let (p, _) = plan(&lake.engine, inv.as_ref(), &options).await.unwrap();
    if !p.lineage_complete {
        // A writer between its Lance commit and its sidecar: nothing is planned; try again later.
        return;
    }
    let ckpt = CheckpointLocation::Local(dir.join(format!("gc-{round}.ckpt")));
    match apply(
        &lake.engine,
        &lake_gc::deleter::for_store(&lake.store),
        &ckpt,
        Some(&p),
        &ApplyOptions { page_size: 10, max_pages: None, progress: None, concurrency: 4, ..ApplyOptions::default() },
    )
    .await
    {
        Ok(r) => {
            deleted.fetch_add(r.checkpoint.deleted + r.checkpoint.absent, Ordering::Relaxed);
        }
        // A writer between its commit and its journal entry, met before or during the apply.
        Err(lake_gc::GcError::LineageIncomplete { .. } | lake_gc::GcError::JournalPending { .. }) => {}
        Err(e) => panic!("apply: {e}"),
    }
}

async fn stress(lake: TestLake, seconds: u64) {
    // The table exists before the writers race (concurrent creators: one gets ConcurrentCreate).
    let seed = lake.upload("seed", b"seed").await;
    lake.engine.append("t", reader(vec![batch(&[("seed", Some(&seed))])])).await.unwrap();
    let lake = Arc::new(lake);
    let stop = Arc::new(AtomicBool::new(false));
    let deleted = Arc::new(AtomicU64::new(0));
    let abandoned = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> =
        (0..3).map(|id| tokio::spawn(writer(lake.clone(), id, stop.clone(), abandoned.clone()))).collect();
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut round = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        round += 1;
        gc_round(&lake, dir.path(), round, &deleted).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut commits = 0;
    for w in writers {
        commits += w.await.unwrap();
    }
    // Let the last deletions age past min_age (and any abandoned request settle), repair what
    // abandoned commits left without a journal entry (what an operator does when GC names such a
    // version), then collect once more.
    tokio::time::sleep(MIN_AGE + Duration::from_millis(1500)).await;
    for location in lake_engine::Engine::tables(&lake.engine).await.unwrap().tables {
        for problem in lake_engine::Engine::snapshot(&lake.engine, &location).await.unwrap().lineage().clone().problems
        {
            match problem {
                lake_engine::LineageProblem::MissingSidecar { table, version } => {
                    lake.engine.repair_refs(&table, version).await.unwrap();
                }
                other => panic!("unexpected lineage problem: {other}"),
            }
        }
    }
    round += 1;
    gc_round(&lake, dir.path(), round, &deleted).await;
    let report = check_retained_objects(&lake.engine).await.unwrap();
    println!(
        "stress: {seconds}s, {commits} writer commits ({} not committed), {round} GC rounds, {} objects deleted, {} retained objects verified",
        abandoned.load(Ordering::Relaxed),
        deleted.load(Ordering::Relaxed),
        report.objects_checked
    );
    assert!(report.is_ok(), "{report:?}");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert!(deleted.load(Ordering::Relaxed) > 0, "GC never deleted anything: the stress did not exercise it");
}

fn seconds(default: u64) -> u64 {
    std::env::var("LAKE_STRESS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread")]
async fn stress_local() {
    let dir = tempfile::tempdir().unwrap();
    let lake = new_lake_with_policy(dir.path().join("lake").to_str().unwrap(), MIN_AGE).await;
    stress(lake, seconds(4)).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn stress_s3() {
    let bucket =
        std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET is not set: run through scripts/test.sh");
    let root = format!("s3://{bucket}/stress-{}", ulid::Ulid::new().to_string().to_lowercase());
    let lake = new_lake_with_policy(&root, MIN_AGE).await;
    stress(lake, seconds(12)).await;
}
