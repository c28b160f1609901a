//! Entries larger than `INLINE_MAX_IDENTITIES` (a delete's delta, repair's snapshot, the
//! reference checkpoint) are written as a head naming sorted reference logs and streamed on read:
//! on real Lance datasets, local and on LocalStack, they replay to what full scans see, plan what
//! inline entries plan (also with a budget of a few KiB), keep their logs out of GC's own garbage,
//! and fail closed when a log is edited, cut or missing.

use crate::gc_scenario::dry_run;
use crate::support::{batch, iter, new_lake, new_s3_lake, reader, TestLake};
use chrono::Utc;
use lake_common::{DeltaKind, SidecarDocument};
use lake_lance::sidecar::INLINE_MAX_IDENTITIES;
use lake_lance::LanceEngine;
use lake_objects::keys::mint_key;
use lake_objects::layout::{reference_log_key, sidecar_key};
use lake_objects::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::time::Duration;

/// `n` references to managed keys no object was uploaded for (the journal does not care; GC
/// only ever deletes what it lists).
fn phantoms(prefix: &str, n: usize) -> Vec<ManagedObject> {
    (0..n)
        .map(|i| ManagedObject {
            key: mint_key(&format!("{prefix}{i}")).0,
            sha256: [(i % 251) as u8; 32],
            size: i as u64,
            last_modified: Utc::now(),
        })
        .collect()
}

fn rows<'a>(episode: &'a str, objects: &'a [ManagedObject]) -> Vec<(&'a str, Option<&'a ManagedObject>)> {
    objects.iter().map(|o| (episode, Some(o))).collect()
}

/// The sidecar of `v` as a document (a head, or inline).
async fn document(lake: &TestLake, v: u64) -> SidecarDocument {
    let bytes = lake.store.get(&sidecar_key("t", v)).await.unwrap().unwrap();
    SidecarDocument::decode(&bytes, "t", v).unwrap()
}

/// Every journal entry equals a full scan (`lake refs verify`), in memory and spilling.
async fn assert_verified(lake: &TestLake) {
    for budget in [1 << 30, 4096] {
        let engine = LanceEngine::new(lake.store.clone()).with_memory_budget(budget);
        let report = engine.verify_refs(&[]).await.unwrap();
        let mismatches = report.mismatch_count;
        assert!(report.problems.is_empty() && mismatches == 0, "budget {budget}: {report:#?}");
    }
}

/// The candidates of a dry run now.
async fn candidates(lake: &TestLake) -> (bool, Vec<String>) {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let plan = dry_run(lake, Utc::now(), 100).await;
    (plan.lineage_complete, plan.candidates.keys().unwrap())
}

/// The keys of `a` and `b` in key order (as a plan lists candidates).
fn both(a: &ManagedObject, b: &ManagedObject) -> Vec<String> {
    let mut keys = vec![a.key.clone(), b.key.clone()];
    keys.sort();
    keys
}

/// Flips one byte in the middle of the object at `key` (same length: only its digest tells).
async fn flip_a_byte(lake: &TestLake, key: &str) -> bytes::Bytes {
    let original = lake.store.get(key).await.unwrap().unwrap();
    let mut edited = original.to_vec();
    let at = edited.len() / 2;
    edited[at] ^= 0x01;
    lake.store.put(key, edited).await.unwrap();
    original
}

async fn large_entries_replay_like_inline_ones(lake: TestLake) {
    let keep = lake.upload("keep.bin", b"referenced to the end").await;
    let gone = lake.upload("gone.bin", b"referenced by deleted rows").await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    let many = phantoms("p", INLINE_MAX_IDENTITIES + 300);

    // v1: an append (a head and its row log); v2: a delete of more identities than an inline
    // entry holds, journaled as a head naming a sorted log of removals.
    let mut v1 = rows("A", &many[..INLINE_MAX_IDENTITIES + 100]);
    v1.extend(rows("B", &many[INLINE_MAX_IDENTITIES + 100..]));
    v1.push(("A", Some(&gone)));
    v1.push(("B", Some(&keep)));
    lake.engine.append("t", reader(vec![batch(&v1)])).await.unwrap();
    lake.engine.delete("t", "episode = 'A'").await.unwrap().unwrap();
    let SidecarDocument::Log(head) = document(&lake, 2).await else { panic!("a large delta is a head") };
    assert_eq!(head.kind, DeltaKind::Delta);
    let removed = head.removed.clone().expect("a log of removals");
    assert!(removed.sorted && removed.references == INLINE_MAX_IDENTITIES as u64 + 101, "{removed:?}");
    assert_verified(&lake).await;
    assert_eq!(candidates(&lake).await, (true, vec![orphan.key.clone()]), "version 1 (retained) references `gone`");

    // An edited log of removals: the version is a lineage problem, nothing is planned.
    let log_key = reference_log_key("t", &removed.write_id);
    let original = flip_a_byte(&lake, &log_key).await;
    assert_eq!(candidates(&lake).await, (false, vec![]));
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.problems.iter().any(|p| p.contains("does not match the SHA-256")), "{report:#?}");
    lake.store.put(&log_key, original.to_vec()).await.unwrap();

    // v3: a second client's append of many rows, journaled by repair as a head naming a sorted
    // snapshot log, written in bounded memory (a budget of a few KiB spills the scan).
    let more = phantoms("q", INLINE_MAX_IDENTITIES + 50);
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    Dataset::write(iter(batch(&rows("C", &more))), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    let small = LanceEngine::new(lake.store.clone()).with_memory_budget(4096);
    let repaired = small.repair_refs("t", 3).await.unwrap();
    assert!(repaired.spilled_runs > 2, "{repaired:?}");
    let expected = INLINE_MAX_IDENTITIES as u64 + 50 + 200 + 1;
    assert_eq!((repaired.references, repaired.objects), (expected, expected));
    assert!(small.repair_refs("t", 3).await.is_ok(), "repairing the same version again is a no-op");
    let SidecarDocument::Log(head) = document(&lake, 3).await else { panic!("a large snapshot is a head") };
    assert!(head.kind == DeltaKind::Snapshot && head.log.sorted && head.removed.is_none());
    assert_verified(&lake).await;
    assert_eq!(candidates(&lake).await, (true, vec![orphan.key.clone()]), "version 1 (retained) references `gone`");

    // v4: an append; version cleanup keeps v4 only and writes the reference checkpoint at v4,
    // a head naming a sorted log. Its logs and every entry's are named: none is GC's garbage.
    lake.engine.append("t", reader(vec![batch(&[("D", Some(&keep))])])).await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let checkpoint_key = lake_lance::refs_checkpoint::checkpoint_key("t");
    let checkpoint: serde_json::Value =
        serde_json::from_slice(&lake.store.get(&checkpoint_key).await.unwrap().unwrap()).unwrap();
    let write_id = checkpoint["snapshot"]["log"]["write_id"].as_str().expect("a checkpoint naming a log").to_string();
    assert_eq!(checkpoint["format_version"], 2);
    assert_eq!(candidates(&lake).await, (true, both(&gone, &orphan)));
    assert_verified(&lake).await;

    // The checkpoint's log edited in place: found while it streams, nothing is planned.
    let log_key = reference_log_key("t", &write_id);
    let original = flip_a_byte(&lake, &log_key).await;
    assert_eq!(candidates(&lake).await, (false, vec![]));
    // Cut short or missing: the checkpoint is ignored and replay starts at the journal's base.
    lake.store.put(&log_key, original[..original.len() - 9].to_vec()).await.unwrap();
    assert_eq!(candidates(&lake).await, (true, both(&gone, &orphan)));
    lake.store.delete(&log_key).await.unwrap();
    assert_eq!(candidates(&lake).await, (true, both(&gone, &orphan)));
    // Cleanup writes it again.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(candidates(&lake).await, (true, both(&gone, &orphan)));
}

#[tokio::test(flavor = "multi_thread")]
async fn large_entries_are_sorted_logs_that_replay_like_inline_entries() {
    large_entries_replay_like_inline_ones(new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn large_entries_on_s3_are_sorted_logs_that_replay_like_inline_entries() {
    large_entries_replay_like_inline_ones(new_s3_lake("large-entries").await).await;
}

/// A restore of a version with many references journals a snapshot replayed from the journal in
/// sorted runs and written as a sorted log; the restored version's journal equals its scan.
#[tokio::test(flavor = "multi_thread")]
async fn a_large_restore_is_journaled_as_a_sorted_snapshot_log() {
    let lake = new_lake().await;
    let many = phantoms("r", INLINE_MAX_IDENTITIES + 10);
    lake.engine.append("t", reader(vec![batch(&rows("A", &many))])).await.unwrap();
    lake.engine.delete("t", "episode = 'A'").await.unwrap().unwrap();
    lake.engine.restore("t", 1).await.unwrap();
    let SidecarDocument::Log(head) = document(&lake, 3).await else { panic!("a large restore is a head") };
    assert!(head.kind == DeltaKind::Snapshot && head.log.sorted);
    assert_verified(&lake).await;
}
