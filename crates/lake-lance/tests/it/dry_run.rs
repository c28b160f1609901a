//! A dry run changes nothing under the lake root: every file (object, journal entry, registry
//! document, Lance file, reference checkpoint) is byte-identical before and after, on both
//! backends. (The clock probe it writes under `_lake/clock/` is removed before it returns.)

use crate::support::{batch, new_lake, new_s3_lake, reader, TestLake};
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;

/// SHA-256 of every file under the lake root, by key.
async fn tree(lake: &TestLake) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, _) in lake.store.list_all("").await.unwrap() {
        let bytes = lake.store.get(&key).await.unwrap().unwrap_or_default();
        out.insert(key, hex::encode(Sha256::digest(&bytes)));
    }
    out
}

async fn a_dry_run_writes_nothing(lake: TestLake) {
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    lake.upload("orphan.bin", b"never referenced").await;
    lake.engine.append("t", reader(vec![batch(&[("x", Some(&a)), ("y", Some(&b))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("z", Some(&b))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'x'").await.unwrap().unwrap();
    // Cleanup moves the replay's base: it writes the reference checkpoint; a plan never does.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    // Older than 1 s by the store's clock, whose HEAD reading (S3's Last-Modified header) has
    // whole seconds.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let before = tree(&lake).await;
    assert!(before.keys().any(|k| k.ends_with("refs_checkpoint.json")), "{:?}", before.keys());
    let gc = GarbageCollector::open(lake.store.clone(), &lake.engine).await.unwrap();
    let horizon = Horizon { allow_below_policy: true, ..Horizon::new(Duration::from_secs(1)) };
    let planned = gc
        .plan(&horizon, &PlanSettings { inventory_page_size: 2, memory_budget: 64, ..PlanSettings::default() })
        .await
        .unwrap();
    assert!(planned.plan.lineage_complete, "{:?}", planned.plan.problems);
    assert_eq!(planned.plan.candidates.len(), 2, "the orphan and the deleted row's object");
    assert_eq!(tree(&lake).await, before, "a dry run must leave every file as it was");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_leaves_a_local_lake_byte_identical() {
    a_dry_run_writes_nothing(new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn a_dry_run_leaves_an_s3_lake_byte_identical() {
    a_dry_run_writes_nothing(new_s3_lake("dry-run").await).await;
}
