//! Incremental replay: the reference checkpoint is used when valid and ignored otherwise.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader};
use chrono::Utc;
use lake_lance::refs_checkpoint::checkpoint_key;
use lake_store::layout::sidecar_key;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn replay_starts_at_a_valid_checkpoint_and_never_trusts_a_bad_one() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    let b = lake.upload("b", b"b").await;
    let c = lake.upload("c", b"c").await;
    lake.engine.append("t", reader(vec![batch(&[("x", Some(&a)), ("y", Some(&b))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("y", Some(&c))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'x'").await.unwrap().unwrap();
    lake.engine.append("t", reader(vec![batch(&[("z", Some(&b))])])).await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    let reference = dry_run(&lake, cutoff, 10).await;
    assert_eq!(reference.candidates.keys().unwrap().into_iter().collect::<Vec<_>>(), vec![a.key.clone()]);

    // Version cleanup wrote a checkpoint at the oldest retained version (4, the only one); a
    // dry run never writes one.
    let key = checkpoint_key("t");
    let doc: serde_json::Value =
        serde_json::from_slice(&lake.store.get(&key).await.unwrap().expect("checkpoint written")).unwrap();
    assert_eq!(doc["snapshot"]["version"], 4);

    // Remove the sidecars before the checkpoint: a replay from the checkpoint does not need them.
    let saved: Vec<(u64, Vec<u8>)> = {
        let mut v = Vec::new();
        for version in 1..4 {
            v.push((version, lake.store.get(&sidecar_key("t", version)).await.unwrap().unwrap().to_vec()));
            lake.store.delete(&sidecar_key("t", version)).await.unwrap();
        }
        v
    };
    let from_checkpoint = dry_run(&lake, cutoff, 10).await;
    assert!(from_checkpoint.lineage_complete, "{:?}", from_checkpoint.problems);
    // The same objects (the logs of the removed heads are now named by nothing: garbage); the
    // basis differs, as it binds the journal files, three of which are gone.
    let objects = |p: &lake_gc::plan::GcPlan| -> Vec<String> {
        p.candidates.keys().unwrap().into_iter().filter(|k| k.starts_with("objects/")).collect()
    };
    assert_eq!(objects(&from_checkpoint), objects(&reference));
    assert_ne!(from_checkpoint.basis, reference.basis);

    // An edited checkpoint (counts changed, digest not) is ignored: replay falls back to the
    // journal, which now lacks versions 1-3, so lineage is incomplete instead of wrong.
    let mut edited = doc.clone();
    edited["snapshot"]["added"] = serde_json::json!([]);
    lake.store.put(&key, serde_json::to_vec(&edited).unwrap()).await.unwrap();
    let plan = dry_run(&lake, cutoff, 10).await;
    assert!(!plan.lineage_complete && plan.candidates.is_empty(), "an edited checkpoint must not be trusted");
    // Truncated: ignored the same way.
    lake.store.put(&key, br#"{"format_version": 1"#.to_vec()).await.unwrap();
    assert!(!dry_run(&lake, cutoff, 10).await.lineage_complete);

    // With the journal back, the bad checkpoint is ignored and the plan is right; a dry run
    // leaves the bad checkpoint as it is, and writing the checkpoint again (what version cleanup
    // does) replaces it.
    for (version, bytes) in saved {
        lake.store.put(&sidecar_key("t", version), bytes).await.unwrap();
    }
    let bad = lake.store.get(&key).await.unwrap().unwrap();
    let rebuilt = dry_run(&lake, cutoff, 10).await;
    assert_eq!(objects(&rebuilt), objects(&reference));
    assert_eq!(lake.store.get(&key).await.unwrap().unwrap(), bad, "a dry run writes no checkpoint");
    assert_eq!(lake.engine.write_reference_checkpoint("t").await.unwrap(), Some(4));
    let doc2: serde_json::Value = serde_json::from_slice(&lake.store.get(&key).await.unwrap().unwrap()).unwrap();
    assert_eq!(doc2, doc, "the checkpoint was rebuilt identically");

    // A checkpoint bound to a sidecar that changed (here: repaired as a snapshot) is ignored.
    lake.store.delete(&sidecar_key("t", 4)).await.unwrap();
    lake.engine.repair_refs("t", 4).await.unwrap();
    let after_repair = dry_run(&lake, cutoff, 10).await;
    assert!(after_repair.lineage_complete);
    assert_eq!(objects(&after_repair), objects(&reference));
}

/// The removals an incremental GC plan reads (`Engine::references_removed_between`): the journal
/// entries of versions cleanup removed are still read (the journal outlives its versions, the
/// checkpoint plays no part), a snapshot entry is named, and a missing entry makes the answer
/// unreadable, never empty.
#[tokio::test(flavor = "multi_thread")]
async fn removals_since_a_version_are_read_from_entries_cleanup_removed() {
    use lake_engine::{Engine, Removals, TableLocation, UriRange};
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    let b = lake.upload("b", b"b").await;
    let c = lake.upload("c", b"c").await;
    lake.engine.append("t", reader(vec![batch(&[("x", Some(&a)), ("y", Some(&b))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("y", Some(&c))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'x'").await.unwrap().unwrap();
    lake.engine.append("t", reader(vec![batch(&[("z", Some(&b))])])).await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(lake.store.get(&checkpoint_key("t")).await.unwrap().is_some(), "the replay starts at version 4 now");
    let location = TableLocation { name: "t".into(), uri: String::new() };
    let removed = |after: Option<u64>| {
        let (engine, location) = (&lake.engine, &location);
        async move {
            let mut keys = Vec::new();
            let mut visit = |identity: lake_common::ObjectIdentity| {
                keys.push(identity.uri);
                Ok(())
            };
            let outcome = engine.references_removed_between(location, after, 4, &UriRange::all(), &mut visit).await;
            (outcome.unwrap(), keys)
        }
    };
    let expected = (Removals::Read { after: 1, snapshots: vec![] }, vec![a.key.clone()]);
    assert_eq!(removed(Some(1)).await, expected, "version 3 (cleaned up) removed `a`");
    assert_eq!(removed(None).await, expected, "from the first entry: version 1");
    assert_eq!(removed(Some(3)).await, (Removals::Read { after: 3, snapshots: vec![] }, vec![]));

    // The logs of what the appends added are not read (only removals are): the same answer
    // with them gone. The live set, which reads the retained versions' logs, is not this read.
    let logs = lake.store.list_all("tables/t.lance/_lake/object_ref_logs/").await.unwrap();
    assert!(logs.len() >= 3, "{logs:?}");
    let mut saved_logs = Vec::new();
    for (key, _) in &logs {
        saved_logs.push((key.clone(), lake.store.get(key).await.unwrap().unwrap()));
        lake.store.delete(key).await.unwrap();
    }
    assert_eq!(removed(Some(1)).await, expected, "the appends' logs are not read");
    for (key, bytes) in saved_logs {
        lake.store.put(&key, bytes.to_vec()).await.unwrap();
    }

    // A missing entry of a version cleanup removed: unreadable (no Lance transaction to imply it).
    let saved = lake.store.get(&sidecar_key("t", 2)).await.unwrap().unwrap();
    lake.store.delete(&sidecar_key("t", 2)).await.unwrap();
    match removed(Some(1)).await.0 {
        Removals::Unreadable { version: 2, reason } => assert!(reason.contains("no journal entry"), "{reason}"),
        other => panic!("expected version 2 unreadable, got {other:?}"),
    }
    lake.store.put(&sidecar_key("t", 2), saved.to_vec()).await.unwrap();

    // A version whose entry is a snapshot (a repair writes one) is named.
    lake.store.delete(&sidecar_key("t", 4)).await.unwrap();
    lake.engine.repair_refs("t", 4).await.unwrap();
    let (outcome, keys) = removed(Some(1)).await;
    assert_eq!(outcome, Removals::Read { after: 1, snapshots: vec![4] });
    assert_eq!(keys, vec![a.key.clone()]);
}
