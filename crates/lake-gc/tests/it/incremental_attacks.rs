//! Attacks on incremental GC (issue 40) by an adversarial review, each a HOLE (fixed):
//!
//! - `ObjectInventory::head` on a local root answered a key whose folder path holds a regular
//!   file (`<live key>/`, `<live key>/x`) with that file's entry, under its own key; the
//!   incremental sweep judged it after its merge with the live set had passed that key, so a live
//!   object became a candidate a full plan never proposes (apply's own live-set check revived
//!   it). Such keys came from an edited state (its seal is an unkeyed SHA-256) or from a removed
//!   reference below an object. Fix: only collectable keys are looked up, each once, and an
//!   answer under another key is never judged (`planner.rs`).
//! - The same keys twice made planning fail ("not in ascending order") instead of planning.
//! - A state whose `full_cutoff` lay in the future kept the chain incremental for good. Fix: it
//!   is not trusted (`state::choose`).

use crate::incremental::{keys, mode, Lake, HOUR_MS, MIN_AGE};
use chrono::{DateTime, Utc};
use lake_common::ObjectIdentity;
use lake_gc::collector::{Horizon, PlanSettings};
use lake_gc::plan::PlanMode;
use lake_gc::state::{GcState, IncrementalPolicy};

/// A lake with a live object `live` (old, before any listed range) and one recorded state.
async fn lake_with_live_object() -> (Lake, ObjectIdentity, String) {
    let mut lake = Lake::new().await;
    let live = lake.upload_minted(lake.now - 5 * HOUR_MS).await;
    lake.upload_minted(lake.now - 5 * HOUR_MS + 1).await; // an orphan, collected by the first run
    lake.engine.append("t", std::slice::from_ref(&live));
    let key = lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.unwrap();
    lake.now += 24 * HOUR_MS;
    (lake, live, key)
}

/// Attack: a state edited to list `<live key>/` (or `<live key>/x`) as unfinished, its seal
/// recomputed (an unkeyed SHA-256). The incremental plan looks the key up; the local `head`
/// answers with the live object itself (ENOTDIR on its "folder"), which the sweep takes for a
/// key it has not merged against the live set: the live object is a candidate (apply's own
/// live-set check revives it, so it survives). A full plan at the same cutoff proposes nothing.
#[tokio::test]
async fn a_state_edited_to_name_a_key_below_a_live_object_plans_nothing_live() {
    let mut found = Vec::new();
    for suffix in ["/", "/x"] {
        let (lake, live, key) = lake_with_live_object().await;
        let bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
        let mut state = GcState::decode(&bytes, &key).unwrap();
        state.unfinished.push(format!("{}{suffix}", live.uri));
        state.unfinished.sort();
        assert_eq!(state.key(), key);
        lake.store.put(&key, state.encode()).await.unwrap();

        let full = lake.plan(&IncrementalPolicy::full()).await;
        let incremental = lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
        assert!(keys(&full).is_empty(), "full: {:?}", keys(&full));
        if !keys(&incremental).is_subset(&keys(&full)) {
            found.push(format!(
                "suffix {suffix:?}: the incremental plan proposes {:?}, the full plan {:?}",
                keys(&incremental),
                keys(&full)
            ));
        }
        // Apply re-reads the whole live set and revives it (checked here: it must survive).
        lake.run(IncrementalPolicy::default(), None).await;
        if !lake.exists(&live.uri).await {
            found.push(format!("suffix {suffix:?}: apply deleted the live object {}", live.uri));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Attack without touching the state: a reference inside the root below a live object's key
/// (`<live key>/sub`: an unmanaged key inside the root; lake-lance refuses it for new
/// references, the MemoryEngine journals it), added and deleted since the state and its version
/// cleaned up. Its removal is "released"; the incremental plan looks it up and the
/// local `head` answers with the live object.
#[tokio::test]
async fn a_released_reference_below_a_live_object_plans_nothing_live() {
    let mut lake = Lake::new().await;
    let live = lake.upload_minted(lake.now - 5 * HOUR_MS).await;
    let below = ObjectIdentity::new(format!("{}/sub", live.uri), [0; 32], 1);
    lake.engine.append("t", std::slice::from_ref(&live));
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
    lake.now += 24 * HOUR_MS;
    // Since the state: a version adds the reference, the next removes it, cleanup drops the
    // version that held it (no retained version names it: no `unmanaged_reference` problem).
    lake.engine.append("t", std::slice::from_ref(&below));
    lake.engine.delete("t", std::slice::from_ref(&below));
    lake.engine.cleanup("t", |_| false);

    let full = lake.plan(&IncrementalPolicy::full()).await;
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    let mut found = Vec::new();
    if !keys(&incremental).is_subset(&keys(&full)) {
        found.push(format!("the incremental plan proposes {:?}, the full plan {:?}", keys(&incremental), keys(&full)));
    }
    lake.run(IncrementalPolicy::default(), None).await;
    if !lake.exists(&live.uri).await {
        found.push(format!("apply deleted the live object {}", live.uri));
    }
    assert!(found.is_empty(), "{found:#?}");
}

/// Attack: the same substitution twice. A state edited to list an old orphan `k` and `k/` as
/// unfinished: both look-ups answer `k`, the second push is out of order, and planning fails
/// ("keys did not come in strictly ascending order") instead of falling back to a full plan: every
/// default run errors until `full_every` makes the run full (or `--full`).
#[tokio::test]
async fn a_state_naming_a_key_twice_still_plans() {
    let (mut lake, _live, key) = lake_with_live_object().await;
    let orphan = lake.upload_minted(lake.now - 30 * HOUR_MS).await; // an old key written by hand
    let bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    let mut state = GcState::decode(&bytes, &key).unwrap();
    state.unfinished = vec![orphan.uri.clone(), format!("{}/", orphan.uri)];
    lake.store.put(&key, state.encode()).await.unwrap();
    let full = lake.plan(&IncrementalPolicy::full()).await;
    assert!(keys(&full).contains(&orphan.uri));
    let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
    let planned = lake.gc().await.plan_with(&Horizon::new(MIN_AGE), &settings, &IncrementalPolicy::default()).await;
    match planned {
        Ok(p) => assert!(keys(&p.plan).is_subset(&keys(&full))),
        Err(e) => panic!("an edited state makes the default plan fail instead of falling back: {e}"),
    }
}

/// Attack on `full_every`: a state (edited, or recorded from an edited plan document's `mode`)
/// whose `full_cutoff` is in the future. `choose` checks the state's `cutoff` against the store's
/// now but not `full_cutoff`, so `full_every` never comes due: the chain stays incremental and
/// what incremental plans miss (uploads that outlived the margin, keys written by hand) is
/// never collected. Completeness, not safety.
#[tokio::test]
async fn a_state_whose_last_full_plan_is_in_the_future_is_not_used() {
    let (mut lake, _live, key) = lake_with_live_object().await;
    let bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    let mut state = GcState::decode(&bytes, &key).unwrap();
    let far = DateTime::<Utc>::from_timestamp_millis((lake.now + 3650 * 24 * HOUR_MS) as i64).unwrap();
    state.full_cutoff = lake_gc::plan_time::PlanTime::from_datetime(far);
    lake.store.put(&key, state.encode()).await.unwrap();
    lake.now += 30 * 24 * HOUR_MS; // 30 days: past the default full_every of 7
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&plan).0, PlanMode::Full, "30 days after the last full plan: {:?}", plan.mode);
}
