//! The library, not the CLI, refuses unsafe GC: a horizon below the policy or below 1 s, a
//! cutoff past the store's clock minus `min_age`, a clock skew past the bound, and a plan or
//! checkpoint that is not bound to this lake and horizon, each with a typed error and nothing
//! deleted.

use crate::refused;
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::inventory;
use lake_gc::unchecked::{plan_with_unchecked_cutoff, PlanOptions};
use lake_gc::GcError;
use lake_store::clock::{ClockReading, FixedClock, StoreClock};
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::ManagedObjectWriter;
use lake_store::LakeStore;
use lake_store::StoreError;
use std::time::Duration;

struct Lake {
    dir: tempfile::TempDir,
    store: LakeStore,
    orphan: String,
}

/// A lake with a policy floor of one hour and one unreferenced object.
async fn lake() -> Lake {
    let dir = tempfile::tempdir().unwrap();
    let store = LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    let orphan = ManagedObjectWriter::new(store.clone()).upload("o.bin", &b"o"[..]).await.unwrap().key;
    Lake { dir, store, orphan }
}

/// A clock two hours after the object's upload: old enough for a one-hour horizon.
fn later() -> FixedClock {
    FixedClock(Utc::now() + chrono::Duration::hours(2))
}

struct Skewed(DateTime<Utc>);

#[async_trait::async_trait]
impl StoreClock for Skewed {
    async fn read(&self, _: &LakeStore) -> Result<ClockReading, lake_store::StoreError> {
        Ok(ClockReading { store_now: self.0, local_now: self.0 + chrono::Duration::hours(1) })
    }
}

/// A floor is a lower bound: a sub-second part rounds it up (`1500ms` is 2s, so GC at 1s needs
/// the override); a floor past what GC can represent is refused.
#[tokio::test]
async fn policy_floors_round_up_and_stay_representable() {
    let dir = tempfile::tempdir().unwrap();
    let store = LakeStore::open(dir.path().join("a").to_str().unwrap()).unwrap();
    let (descriptor, _) = LakeDescriptor::create(&store, Duration::from_millis(1500)).await.unwrap();
    assert_eq!(descriptor.min_age(), Duration::from_secs(2));
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(store, &engine).await.unwrap();
    refused(
        gc.plan(&Horizon::new(Duration::from_secs(1)), &PlanSettings::default()).await.unwrap_err(),
        ErrorKind::PolicyFloor,
    );
    let huge = LakeStore::open(dir.path().join("b").to_str().unwrap()).unwrap();
    let e = LakeDescriptor::create(&huge, Duration::from_secs(u64::MAX)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "a floor no object can reach is refused at init: {e}");
}

#[tokio::test]
async fn unsafe_horizons_and_cutoffs_are_refused_by_the_library() {
    let l = lake().await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap().with_unchecked_clock(later());
    let settings = PlanSettings::default();
    refused(gc.plan(&Horizon::new(Duration::from_secs(60)), &settings).await.unwrap_err(), ErrorKind::PolicyFloor);
    refused(gc.plan(&Horizon::new(Duration::from_millis(500)), &settings).await.unwrap_err(), ErrorKind::Horizon);
    let future = Horizon {
        earlier_cutoff: Some(Utc::now() + chrono::Duration::hours(3)),
        ..Horizon::new(Duration::from_secs(3600))
    };
    refused(gc.plan(&future, &settings).await.unwrap_err(), ErrorKind::CutoffTooLate);
    let skewed =
        GarbageCollector::open(l.store.clone(), &engine).await.unwrap().with_unchecked_clock(Skewed(Utc::now()));
    refused(skewed.plan(&Horizon::new(Duration::from_secs(3600)), &settings).await.unwrap_err(), ErrorKind::ClockSkew);
    // Below the policy only when asked explicitly; then the (old) orphan is planned.
    let below = Horizon { allow_below_policy: true, ..Horizon::new(Duration::from_secs(60)) };
    let planned = gc.plan(&below, &settings).await.unwrap();
    assert_eq!(planned.plan.candidates.keys().unwrap(), vec![l.orphan.clone()]);
    // The real store clock: the object is seconds old, nothing is planned at a one-hour horizon.
    let real = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    assert!(real.plan(&Horizon::new(Duration::from_secs(3600)), &settings).await.unwrap().plan.candidates.is_empty());
    assert!(l.store.head(&l.orphan).await.unwrap().is_some());
}

#[tokio::test]
async fn only_a_plan_bound_to_this_lake_horizon_and_clock_is_applied() {
    let l = lake().await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap().with_unchecked_clock(later());
    let horizon = Horizon::new(Duration::from_secs(3600));
    let plan = gc.plan(&horizon, &PlanSettings::default()).await.unwrap().plan;
    let ckpt = |name: &str| CheckpointLocation::parse(l.dir.path().join(name).to_str().unwrap()).unwrap();
    let options = ApplyOptions::default();

    // Another horizon than the plan's.
    let other = Horizon::new(Duration::from_secs(7200));
    refused(gc.apply(&plan, &other, &ckpt("a"), &options).await.unwrap_err(), ErrorKind::BoundToMinAge);
    // A plan of another lake.
    let elsewhere = lake().await;
    let foreign = GarbageCollector::open(elsewhere.store.clone(), &engine).await.unwrap().with_unchecked_clock(later());
    refused(foreign.apply(&plan, &horizon, &ckpt("b"), &options).await.unwrap_err(), ErrorKind::BoundToRoot);
    // A plan made at a cutoff the store's clock does not allow now (here: by the real clock).
    let real = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    refused(real.apply(&plan, &horizon, &ckpt("c"), &options).await.unwrap_err(), ErrorKind::CutoffTooLate);
    let options_unchecked =
        PlanOptions::new(l.store.root(), Duration::from_secs(3600), Utc::now() + chrono::Duration::minutes(5))
            .page_size(100)
            .memory_budget(1 << 20);
    let (mut too_late, _) =
        plan_with_unchecked_cutoff(&engine, inventory::for_store(&l.store).as_ref(), &options_unchecked).await.unwrap();
    // Bound to this lake, as the collector's own plans are: only the cutoff is wrong.
    too_late.lake_id = Some(gc.policy().identity());
    refused(real.apply(&too_late, &horizon, &ckpt("d"), &options).await.unwrap_err(), ErrorKind::CutoffTooLate);
    // A checkpoint inside the lake root.
    let inside = CheckpointLocation::parse(l.dir.path().join("lake/gc.ckpt").to_str().unwrap()).unwrap();
    assert!(matches!(
        gc.apply(&plan, &horizon, &inside, &options).await.unwrap_err(),
        GcError::Store(StoreError::Root { .. })
    ));
    assert!(l.store.head(&l.orphan).await.unwrap().is_some(), "nothing deleted by any refusal");

    // The bound plan is applied; resuming its checkpoint from another lake is refused.
    let done = gc.apply(&plan, &horizon, &ckpt("e"), &options).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == 1);
    refused(foreign.resume(&horizon, &ckpt("e"), &options).await.unwrap_err(), ErrorKind::BoundToRoot);
    assert!(gc.resume(&horizon, &ckpt("e"), &options).await.unwrap().unwrap().was_complete);
    assert!(gc.resume(&horizon, &ckpt("none"), &options).await.unwrap().is_none());
}
