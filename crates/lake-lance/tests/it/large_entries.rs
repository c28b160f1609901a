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
use lake_store::keys::mint_key;
use lake_store::layout::{reference_log_key, sidecar_key};
use lake_store::writer::ManagedObject;
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

/// Rows `(episode, object)` with the episodes given as owned strings.
fn named<'a>(rows: &'a [(String, &'a ManagedObject)]) -> Vec<(&'a str, Option<&'a ManagedObject>)> {
    rows.iter().map(|(e, o)| (e.as_str(), Some(*o))).collect()
}

/// An upsert of more identities than an inline entry holds names its own row log (the one its
/// intent named) as its additions and a row log of the replaced rows' references as its
/// removals: no read of the rows it wrote. Its journal equals a full scan, and GC keeps what
/// retained versions reference, also an object that a replaced row and its replacement both
/// reference (the two logs name it once each).
async fn large_upserts_name_their_row_log(lake: TestLake) {
    let n = INLINE_MAX_IDENTITIES + 200;
    let (old, new) = (phantoms("o", n), phantoms("n", n));
    let same = lake.upload("same.bin", b"referenced before and after the upsert").await;
    let replaced = lake.upload("replaced.bin", b"referenced by a replaced row only").await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    let mut v1: Vec<(String, &ManagedObject)> = old.iter().enumerate().map(|(i, o)| (format!("e{i}"), o)).collect();
    v1.push(("S".into(), &same));
    v1.push(("R".into(), &replaced));
    lake.engine.append("t", reader(vec![batch(&named(&v1))])).await.unwrap();
    // v2: half the `e` rows replaced, as many new rows, `S` replaced by a row referencing the
    // same object, `R` by one referencing another.
    let mut v2: Vec<(String, &ManagedObject)> = (n / 2..n).map(|i| (format!("e{i}"), &new[i])).collect();
    v2.extend((0..n / 2).map(|i| (format!("x{i}"), &new[i])));
    v2.push(("S".into(), &same));
    v2.push(("R".into(), &new[0]));
    let on = vec!["episode".to_string()];
    let outcome = lake.engine.upsert("t", &on, reader(vec![batch(&named(&v2))])).await.unwrap();
    let replaced_rows = (n - n / 2 + 2) as u64;
    assert_eq!((outcome.references_added, outcome.references_removed), (n as u64 + 2, replaced_rows));
    let SidecarDocument::Log(head) = document(&lake, 2).await else { panic!("a large upsert is a head") };
    assert_eq!(head.kind, DeltaKind::Delta);
    assert!(!head.log.sorted && head.log.references == n as u64 + 2, "the write's own row log: {:?}", head.log);
    let removed = head.removed.clone().expect("a log of the replaced rows");
    assert!(!removed.sorted && removed.references == replaced_rows, "{removed:?}");
    assert!(lake.store.get(&reference_log_key("t", &head.log.write_id)).await.unwrap().is_some());
    assert_verified(&lake).await;
    assert_eq!(candidates(&lake).await, (true, vec![orphan.key.clone()]), "version 1 (retained) references `replaced`");
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(candidates(&lake).await, (true, both(&replaced, &orphan)), "`same` is still referenced");
    assert_verified(&lake).await;

    // v3, v4: the table gets a duplicate key (`D` twice), then an upsert whose `D` row matches
    // both: whatever Lance writes for it, the entry equals a full scan (the shortcut's row count
    // check sends it to the entry computed from the manifests when the counts differ).
    let dups = phantoms("d", 3);
    lake.engine.append("t", reader(vec![batch(&[("D", Some(&dups[0])), ("D", Some(&dups[1]))])])).await.unwrap();
    let more = phantoms("m", n);
    let mut v4: Vec<(String, &ManagedObject)> = more.iter().enumerate().map(|(i, o)| (format!("m{i}"), o)).collect();
    v4.push(("D".into(), &dups[2]));
    let result = lake.engine.upsert("t", &on, reader(vec![batch(&named(&v4))])).await;
    // Lance 14 writes the `D` row once per row it matches: one more row than the source had,
    // so the entry is the one computed from the manifests (sorted logs), not the shortcut.
    let outcome = result.unwrap();
    assert_eq!(outcome.rows, v4.len() as u64 + 1, "one written row per matched row");
    let SidecarDocument::Log(head) = document(&lake, outcome.version).await else { panic!("a head") };
    assert!(head.log.sorted, "counts differ: the entry computed from the manifests");
    assert_verified(&lake).await;
    assert!(candidates(&lake).await.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn large_upserts_name_their_own_row_log() {
    large_upserts_name_their_row_log(new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn large_upserts_on_s3_name_their_own_row_log() {
    large_upserts_name_their_row_log(new_s3_lake("large-upserts").await).await;
}

/// A large upsert killed after its entry (naming the intent's log) was written, before it ended
/// its intent: recovery finds the version journaled and keeps the log the entry names (it used
/// to delete an upsert's log with its intent), so the journal stays whole.
#[tokio::test(flavor = "multi_thread")]
async fn recovery_keeps_the_log_a_killed_upserts_entry_names() {
    let lake = new_lake().await;
    let n = INLINE_MAX_IDENTITIES + 10;
    let (old, new) = (phantoms("o", n), phantoms("n", n));
    let v1: Vec<(String, &ManagedObject)> = old.iter().enumerate().map(|(i, o)| (format!("e{i}"), o)).collect();
    lake.engine.append("t", reader(vec![batch(&named(&v1))])).await.unwrap();
    let v2: Vec<(String, &ManagedObject)> = new.iter().enumerate().map(|(i, o)| (format!("e{i}"), o)).collect();
    let on = vec!["episode".to_string()];
    let killed = lake_store::failpoint::scope(
        "commit.after_entry",
        lake.engine.upsert("t", &on, reader(vec![batch(&named(&v2))])),
    )
    .await;
    assert!(killed.unwrap_err().to_string().contains("commit.after_entry"));
    let SidecarDocument::Log(head) = document(&lake, 2).await else { panic!("a large upsert is a head") };
    // Once the killed writer's deadline has passed (the store's clock an hour on).
    let later = crate::support::engine_later(&lake, crate::support::LATER);
    let report = later.recover_writes(Some("t")).await.unwrap();
    assert_eq!(report.pending(), 0, "{report:?}");
    assert!(
        lake.store.get(&reference_log_key("t", &head.log.write_id)).await.unwrap().is_some(),
        "the log the entry names is kept"
    );
    assert_verified(&lake).await;
    assert!(candidates(&lake).await.0);
}

/// One batch of the nullable-key schema: rows of (episode or NULL, object).
fn nullable_key_batch(rows: &[(Option<&str>, &ManagedObject)]) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let schema = Arc::new(Schema::new(vec![
        Field::new("episode", DataType::Utf8, true),
        lake_common::data_location_field("file", true),
    ]));
    let episodes: ArrayRef = Arc::new(rows.iter().map(|(e, _)| *e).collect::<StringArray>());
    let mut files = lake_common::DataLocationBuilder::new();
    for (_, o) in rows {
        files.append(&o.key, o.sha256, o.size);
    }
    let batch = RecordBatch::try_new(schema.clone(), vec![episodes, Arc::new(files.finish())]).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema))
}

/// Found by the attack pass: with a B-tree index on the key, Lance's older merge plan drops a
/// source row whose key is null and writes a source row once per table row it matches. One of
/// each kept the written rows' count equal to the source's, so the row-log shortcut journaled
/// the dropped row's object and one copy too few of the doubled one; after a delete of the
/// doubled rows the journal dropped an object a row still referenced, and GC would delete it.
/// A null key or an index on a key column now keeps the upsert on the entry computed from the
/// manifests: the journal equals a scan, and GC keeps every referenced object.
#[tokio::test(flavor = "multi_thread")]
async fn an_indexed_or_null_key_keeps_an_upsert_off_the_row_log_shortcut() {
    for indexed in [true, false] {
        let lake = new_lake().await;
        let n = INLINE_MAX_IDENTITIES + 20;
        let (old, new) = (phantoms("o", n), phantoms("n", n));
        let (a, b) = (lake.upload("a.bin", b"a").await, lake.upload("b.bin", b"b").await);
        let y = lake.upload("y.bin", b"written for `q` and for both `D` rows").await;
        let x = lake.upload("x.bin", b"the null-key row's").await;
        let names: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
        let mut v1: Vec<(Option<&str>, &ManagedObject)> =
            names.iter().zip(&old).map(|(e, o)| (Some(e.as_str()), o)).collect();
        v1.push((Some("D"), &a));
        v1.push((Some("D"), &b));
        lake.engine.append("t", nullable_key_batch(&v1)).await.unwrap();
        if indexed {
            lake.engine.create_index("t", "episode", lake_lance::index::IndexKind::Btree, None, false).await.unwrap();
        }
        let fresh: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        let mut v2: Vec<(Option<&str>, &ManagedObject)> =
            fresh.iter().zip(&new).map(|(e, o)| (Some(e.as_str()), o)).collect();
        v2.push((Some("q"), &y));
        v2.push((Some("D"), &y));
        v2.push((None, &x));
        let on = vec!["episode".to_string()];
        let result = lake.engine.upsert("t", &on, nullable_key_batch(&v2)).await;
        eprintln!(
            "indexed {indexed}: {:?}",
            result
                .as_ref()
                .map(|o| (o.version, o.rows, o.references_added, o.references_removed))
                .map_err(|e| e.to_string())
        );
        if let Ok(outcome) = &result {
            let SidecarDocument::Log(head) = document(&lake, outcome.version).await else { panic!("a head") };
            assert!(head.log.sorted, "indexed {indexed}: not the shortcut, {:?}", head.log);
        }
        assert_verified(&lake).await;
        lake.engine.delete("t", "episode = 'D'").await.unwrap();
        lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
        assert_verified(&lake).await;
        let (complete, planned) = candidates(&lake).await;
        assert!(complete, "indexed {indexed}");
        if result.is_ok() {
            assert!(!planned.contains(&y.key), "indexed {indexed}: `q` still references y: {planned:?}");
        }
    }
}
