//! The writer-side publication guard on real appends.

use crate::support::{batch, new_lake_with_policy, reader};
use lake_lance::{LanceEngine, LanceEngineError};
use lake_store::guard::{FixedWriterClock, GuardError};
use lake_store::keys::parse_managed_key;
use std::sync::Arc;
use std::time::Duration;

/// The guard's verdict is a function of the writer's clock, injected here
/// ([`FixedWriterClock`]) rather than slept for: whatever the machine's speed, an object 2.9 s
/// old passes a 3 s limit and one 3.1 s old does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_writer_is_refused_until_it_copies_the_object() {
    let dir = tempfile::tempdir().unwrap();
    // min_age 4s: margin 1s, new references must be younger than 3s.
    let mut lake = new_lake_with_policy(dir.path().join("lake").to_str().unwrap(), Duration::from_secs(4)).await;
    let clock = Arc::new(FixedWriterClock::new(chrono::Utc::now()));
    lake.engine = LanceEngine::new(lake.store.clone()).with_writer_clock(clock.clone());
    let at = |object: &lake_store::writer::ManagedObject, age_ms: i64| {
        parse_managed_key(&object.key).unwrap().minted_at() + chrono::Duration::milliseconds(age_ms)
    };
    let fresh = lake.upload("fresh", b"fresh").await;
    clock.set(at(&fresh, 2900));
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&fresh))])])).await.unwrap();
    let stalled = lake.upload("stalled", b"uploaded, then the writer stalled").await;
    clock.set(at(&stalled, 3100));
    for overwrite in [false, true] {
        let rows = reader(vec![batch(&[("e", Some(&stalled))])]);
        let err = if overwrite { lake.engine.overwrite("t", rows).await } else { lake.engine.append("t", rows).await }
            .unwrap_err();
        match &err {
            LanceEngineError::Guard { source: GuardError::TooOld { uri, age, limit, .. }, .. } => {
                assert_eq!(*uri, stalled.key);
                assert_eq!((*age, *limit), (Duration::from_millis(3100), Duration::from_millis(3000)), "{err}");
            }
            other => panic!("expected the guard's refusal, got {other}"),
        }
        assert!(err.to_string().contains("`copy fresh`"), "the error says what to do: {err}");
    }
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");
    assert!(
        lake_store::intents::list(&lake.store, None).await.unwrap().0.is_empty(),
        "a refused write leaves no intent"
    );
    // The same writer after a server-side copy to a fresh key succeeds.
    let copy = lake.writer.copy_fresh(&stalled.identity()).await.unwrap();
    assert_ne!(copy.key, stalled.key);
    assert_eq!((copy.sha256, copy.size), (stalled.sha256, stalled.size));
    clock.set(at(&copy, 0));
    let out = lake.engine.append("t", reader(vec![batch(&[("e", Some(&copy))])])).await.unwrap();
    assert_eq!(out.version, 2);
    assert_eq!(lake.store.get(&copy.key).await.unwrap().unwrap().as_ref(), b"uploaded, then the writer stalled");
}

/// A GC host whose clock is days ahead still plans by the store's clock: nothing young is deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_gc_host_clock_days_ahead_deletes_nothing_young() {
    use lake_gc::cutoff::gc_cutoff;
    use lake_store::clock::ClockReading;
    let dir = tempfile::tempdir().unwrap();
    let lake = new_lake_with_policy(dir.path().join("lake").to_str().unwrap(), Duration::from_secs(1)).await;
    let old = lake.upload("old", b"old orphan").await;
    // At least 1.3 s between the two uploads (a slower machine only makes the gap longer).
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let young = lake.upload("young", b"young orphan").await;
    // The store's "now" is the young object's own write time, however long the reading takes.
    let written = lake.store.head(&young.key).await.unwrap().unwrap().last_modified;
    let ahead = ClockReading { store_now: written, local_now: written + chrono::Duration::days(3) };
    // Refused by default (skew far above 5 minutes) ...
    assert!(gc_cutoff(&ahead, Duration::from_secs(1), Duration::from_secs(300)).is_err());
    // ... and when the operator raises the bound, the cutoff still follows the store's clock.
    let cutoff = gc_cutoff(&ahead, Duration::from_secs(1), Duration::from_secs(4 * 86400)).unwrap();
    let plan = crate::gc_scenario::dry_run(&lake, cutoff, 10).await;
    assert_eq!(plan.candidates.keys().unwrap().into_iter().collect::<Vec<_>>(), vec![old.key.clone()]);
    let ckpt = dir.path().join("c");
    let deleter = lake_gc::deleter::for_store(&lake.store);
    lake_gc::unchecked::apply_unchecked(
        &lake.engine,
        &deleter,
        &ckpt.as_path().into(),
        Some(&plan),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(lake.store.head(&young.key).await.unwrap().is_some(), "the young object survives");
    assert!(lake.store.head(&old.key).await.unwrap().is_none());
}
