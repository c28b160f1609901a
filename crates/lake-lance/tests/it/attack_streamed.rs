//! Attacks on streamed journal entries and on plans of one key range (issue 23): each test
//! asserts the SAFE behaviour, so a failing test is a successful attack.

use crate::support::{new_lake, schema, TestLake};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use chrono::Utc;
use lake_common::DataLocationBuilder;
use lake_objects::key_range::KeyRange;
use lake_objects::plan::GcPlan;
use lake_objects::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_objects::writer::ManagedObject;
use std::sync::Arc;
use std::time::Duration;

/// Appends one row naming `object` by the key `uri` (spelled freely) through the engine.
async fn append_as(lake: &TestLake, table: &str, uri: &str, object: &ManagedObject) {
    let mut files = DataLocationBuilder::new();
    files.append(uri, object.sha256, object.size);
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(["e"]));
    let batch = RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap();
    lake.engine.append(table, Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema()))).await.unwrap();
}

/// The plan of each of `ranges` at `cutoff` (what `GarbageCollector::plan_shard` computes for
/// each shard of a spec with these ranges).
async fn plan_each(lake: &TestLake, ranges: &[KeyRange], cutoff: chrono::DateTime<Utc>) -> Vec<GcPlan> {
    let inventory = lake_objects::inventory::for_store(&lake.store);
    let mut plans = Vec::new();
    for range in ranges {
        let options = PlanOptions::new(lake.store.root(), Duration::from_secs(1), cutoff).range(range.clone());
        plans.push(plan(&lake.engine, inventory.as_ref(), &options).await.unwrap().0);
    }
    plans
}

/// No shard may plan `key` while every shard of the spec is complete (apply refuses every shard
/// of a manifest with an incomplete one).
fn assert_no_shard_deletes(plans: &[GcPlan], key: &str, what: &str) {
    let all_complete = plans.iter().all(|p| p.lineage_complete);
    let planned: Vec<usize> =
        (0..plans.len()).filter(|i| plans[*i].candidates.keys().unwrap().contains(&key.to_string())).collect();
    assert!(
        !(all_complete && !planned.is_empty()),
        "{what}: live object {key} planned by shards {planned:?}, every shard complete; problems {:?}",
        plans.iter().map(|p| &p.problems).collect::<Vec<_>>()
    );
}

/// A folder link `objects/<B>` whose key is a shard boundary (split_by_time's boundaries are
/// `objects/<ULID of a millisecond, randomness 0>`), pointing at the folder of object `x`, and a
/// live row naming `x` through it (`objects/<B>/x.bin`). The link lies in shard 0 (keys up to
/// and including the boundary), the live key in shard 1. An unsharded plan refuses (the live
/// key goes through a link). Each shard must still refuse or keep `x`: the shard that meets
/// the link must see the live keys below it, even those past its range.
#[tokio::test(flavor = "multi_thread")]
async fn attack_link_at_a_shard_boundary() {
    let lake = new_lake().await;
    let root = lake.store.local_dir().unwrap().to_path_buf();
    let x = lake.upload("x.bin", b"precious x").await;
    let (folder, name) = x.key.rsplit_once('/').unwrap();
    // A boundary as split_by_time makes one, a minute before x was minted.
    let ms = Utc::now().timestamp_millis() as u64 - 60_000;
    let link = lake_objects::keys::first_key_at(chrono::DateTime::from_timestamp_millis(ms as i64).unwrap());
    assert_eq!(link, format!("objects/{}", ulid::Ulid::from_parts(ms, 0)));
    std::os::unix::fs::symlink(root.join(folder), root.join(&link)).unwrap();
    append_as(&lake, "t", &format!("{link}/{name}"), &x).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cutoff = Utc::now();

    let whole = plan_each(&lake, &[KeyRange::all()], cutoff).await;
    assert_no_shard_deletes(&whole, &x.key, "unsharded");
    // Split at the link (split_by_time's shape), and inside its folder before the live key (a
    // spec made by hand: `plan_shard` takes any partition).
    for boundary in [link.clone(), format!("{link}/a.bin")] {
        let ranges = KeyRange::split_at(std::slice::from_ref(&boundary));
        let shards = plan_each(&lake, &ranges, cutoff).await;
        assert_no_shard_deletes(&shards, &x.key, &format!("two shards split at {boundary}"));
        assert!(!shards[0].lineage_complete, "the shard that meets the link names it: {:?}", shards[0].problems);
        assert!(shards[0].problems.iter().any(|p| p.contains(&link)), "{:?}", shards[0].problems);
    }
    assert!(lake.store.head(&x.key).await.unwrap().is_some());
}
