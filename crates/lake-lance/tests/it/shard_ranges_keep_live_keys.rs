//! Attacks on streamed journal entries and on plans of one key range: each test
//! asserts the SAFE behaviour, so a failing test is a successful attack.

use crate::support::{new_lake, schema, TestLake};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use chrono::Utc;
use lake_common::DataLocationBuilder;
use lake_gc::key_range::KeyRange;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
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
    let inventory = lake_gc::inventory::for_store(&lake.store);
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
        !all_complete || planned.is_empty(),
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
    let link = lake_store::keys::first_key_at(chrono::DateTime::from_timestamp_millis(ms as i64).unwrap());
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
        assert!(shards[0].problems.iter().any(|p| p.message.contains(&link)), "{:?}", shards[0].problems);
    }
    assert!(lake.store.head(&x.key).await.unwrap().is_some());
}

/// The live identities' URIs of table `t` read for `range`.
async fn live_in(lake: &TestLake, range: &lake_engine::UriRange) -> std::collections::BTreeSet<String> {
    use lake_engine::Engine;
    let location = lake_engine::TableLocation { name: "t".into(), uri: lake.engine.dataset_uri("t") };
    let snapshot = lake.engine.snapshot_in(&location, range).await.unwrap();
    assert!(snapshot.lineage().problems.is_empty(), "{:?}", snapshot.lineage().problems);
    let roots = lake_engine::RetainedRoots::new(snapshot.lineage().retained.clone());
    let mut stream = snapshot.live(&roots).unwrap();
    let mut live = std::collections::BTreeSet::new();
    while let Some(identity) = stream.next_identity().unwrap() {
        live.insert(identity.uri);
    }
    live
}

/// Ranges cut exactly at every block's first and last key (and just after them) of a sorted
/// snapshot log (repair) and of a delta's added and removed logs (a delete of every other row,
/// keys written in shuffled order): each range's live set is exactly the full live set's part
/// the range concerns. A block whose first or last key equals a range's bound is read.
#[tokio::test(flavor = "multi_thread")]
async fn ranges_cut_at_block_edges_keep_every_live_key() {
    use lake_common::SidecarDocument;
    use lake_store::layout::sidecar_key;
    let lake = new_lake().await;
    let first = lake.upload("first.bin", b"the engine's own row").await;
    lake.engine.append("t", crate::support::reader(vec![crate::support::batch(&[("e", Some(&first))])])).await.unwrap();
    let start = Utc::now().timestamp_millis() as u64 - 60_000;
    let n = 9_000u64;
    // Shuffled (a stride coprime with n), names of different lengths and characters that
    // sort around `/`.
    let objects: Vec<ManagedObject> = (0..n)
        .map(|i| (i * 7_919) % n)
        .map(|i| ManagedObject {
            key: format!(
                "objects/{}/{}",
                ulid::Ulid::from_parts(start + i / 3, u128::from(i)),
                ["a", "a-b", "a.b_c"][(i % 3) as usize]
            ),
            sha256: [(i % 251) as u8; 32],
            size: i,
            last_modified: Utc::now(),
        })
        .collect();
    let rows: Vec<(&str, Option<&ManagedObject>)> =
        objects.iter().enumerate().map(|(i, o)| (if i % 2 == 0 { "even" } else { "odd" }, Some(o))).collect();
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    Dataset::write(crate::support::iter(crate::support::batch(&rows)), &lake.engine.dataset_uri("t"), Some(params))
        .await
        .unwrap();
    lake.engine.repair_refs("t", 2).await.unwrap();
    lake.engine.delete("t", "episode = 'even'").await.unwrap().unwrap();

    let mut cuts = std::collections::BTreeSet::new();
    for v in [2, 3] {
        let bytes = lake.store.get(&sidecar_key("t", v)).await.unwrap().unwrap();
        let SidecarDocument::Log(head) = SidecarDocument::decode(&bytes, "t", v).unwrap() else { panic!("a head") };
        for log in head.logs() {
            let index = log.index.clone().expect("an indexed log");
            // A delete's head names an empty log of additions.
            if log.references == 0 {
                continue;
            }
            assert!(index.blocks.len() >= 2, "{index:?}");
            for block in index.blocks {
                cuts.extend([block.first.clone(), block.last.clone()]);
            }
        }
    }
    let all = live_in(&lake, &lake_engine::UriRange::all()).await;
    assert_eq!(all.len() as u64, n + 1);
    check_cuts(&lake, &cuts, &all).await;
    // Versions 1 and 2 cleaned up: the delete's removals count (through the reference
    // checkpoint at version 3, a sorted log of its own).
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let all = live_in(&lake, &lake_engine::UriRange::all()).await;
    assert_eq!(all.len() as u64, n / 2 + 1);
    check_cuts(&lake, &cuts, &all).await;
}

/// Each cut of `cuts` splits the keys in two ranges whose live sets are `all`'s parts.
async fn check_cuts(
    lake: &TestLake,
    cuts: &std::collections::BTreeSet<String>,
    all: &std::collections::BTreeSet<String>,
) {
    for cut in cuts {
        let below = lake_engine::UriRange { after: None, until: Some(cut.clone()) };
        let above = lake_engine::UriRange { after: Some(cut.clone()), until: None };
        let mut union = std::collections::BTreeSet::new();
        for range in [below, above] {
            let live = live_in(lake, &range).await;
            let expected: std::collections::BTreeSet<String> =
                all.iter().filter(|u| range.concerns(u)).cloned().collect();
            assert_eq!(live, expected, "{range:?}");
            union.extend(live);
        }
        assert_eq!(&union, all, "cut at {cut}");
    }
}
