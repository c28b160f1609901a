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

// ---------------------------------------------------------------------------------------------
// Adversarial review of 7216a9f: released keys looked up 32 at a time ahead of the sweep, a
// local root's live keys looked up for links in batches of 4096 (`ObjectInventory::links_among`,
// on blocking threads), a given inventory read by full plans only, a HEAD's whole-second time
// rounded on S3 only. Every attack below HELD: each test pins it.
// ---------------------------------------------------------------------------------------------

use lake_gc::plan::{GcPlan, PlanProblem};
use std::collections::BTreeSet;
use ulid::Ulid;

fn id(key: String) -> ObjectIdentity {
    ObjectIdentity::new(key, [0; 32], 1)
}

fn path_of(lake: &Lake, key: &str) -> std::path::PathBuf {
    lake.dir.path().join("lake").join(key)
}

/// The live keys a plan names as going through a symbolic link.
fn linked(plan: &GcPlan) -> BTreeSet<String> {
    plan.problems
        .iter()
        .filter(|p| p.kind == PlanProblem::LINKED_REFERENCE)
        .filter_map(|p| p.message.split('`').nth(1).map(str::to_string))
        .collect()
}

/// Sets the modification time of `key`'s file to `ms` (milliseconds since the epoch).
fn set_mtime(lake: &Lake, key: &str, ms: u64) {
    let file = std::fs::File::options().write(true).open(path_of(lake, key)).unwrap();
    file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms)).unwrap();
}

/// HELD: released keys looked up ahead of the sweep (more than `LOOKUPS_IN_FLIGHT` = 32 on
/// either side) with symbolic links among them. Since the state: a folder `objects/U` holding
/// the live keys `U/a` and `U/z` and the released key `U/k` is replaced by a link to a folder
/// `V` of orphans `V/a`, `V/k`, `V/z` (in the listed range); released keys `R1` and `R2` are
/// replaced by links to orphan files; the live key `L` is replaced by a link to an orphan file.
/// Every look-up of a released key is made before the live keys before it are looked up, and
/// its answer (a link under another key, `objects/U`) is taken in key order: the incremental
/// plan names every live key going through a link exactly as the full plan does and proposes
/// nothing (the plans are incomplete), never a link target. Then, with the live keys through
/// links removed from the journal, both plans propose the same orphans (a link met is no
/// reason to add or drop a candidate).
#[tokio::test]
async fn released_keys_looked_up_ahead_meet_links_as_a_full_plan_does() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 30 * HOUR_MS;
    let mut released = Vec::new();
    for i in 0..40 {
        released.push(lake.upload_minted(t0 + i).await);
    }
    let u = format!("objects/{}", Ulid::from_parts(t0 + 100, 7));
    let (ua, uk, uz) = (id(format!("{u}/a")), id(format!("{u}/k")), id(format!("{u}/z")));
    for key in [&ua, &uk, &uz] {
        lake.store.put(&key.uri, b"u".to_vec()).await.unwrap();
    }
    let mut later = Vec::new();
    for i in 0..40 {
        later.push(lake.upload_minted(t0 + 200 + i).await);
    }
    let live_link = lake.upload_minted(t0 + 150).await;
    let mut refs = released.clone();
    refs.extend([ua.clone(), uk.clone(), uz.clone(), live_link.clone()]);
    refs.extend(later.clone());
    lake.engine.append("t", &refs);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
    lake.now += HOUR_MS;

    // Orphans in the listed range (minted 2 h before the store's now, after the state's cutoff
    // minus the margin).
    let v = format!("objects/{}", Ulid::from_parts(lake.now - 2 * HOUR_MS, 9));
    for name in ["a", "k", "z"] {
        lake.store.put(&format!("{v}/{name}"), b"v".to_vec()).await.unwrap();
    }
    let target1 = lake.upload_minted(lake.now - 2 * HOUR_MS + 1).await;
    let target2 = lake.upload_minted(lake.now - 2 * HOUR_MS + 2).await;
    let target3 = lake.upload_minted(lake.now - 2 * HOUR_MS + 3).await;
    // Released since the state: everything but `U/a`, `U/z` and `L`.
    let mut gone = released.clone();
    gone.push(uk.clone());
    gone.extend(later.clone());
    lake.engine.delete("t", &gone);
    lake.engine.cleanup("t", |_| false);
    // The links.
    std::fs::remove_dir_all(path_of(&lake, &u)).unwrap();
    std::os::unix::fs::symlink(path_of(&lake, &v), path_of(&lake, &u)).unwrap();
    for (from, to) in [(&released[20], &target1), (&later[10], &target2), (&live_link, &target3)] {
        std::fs::remove_file(path_of(&lake, &from.uri)).unwrap();
        std::os::unix::fs::symlink(path_of(&lake, &to.uri), path_of(&lake, &from.uri)).unwrap();
    }

    let full = lake.plan(&IncrementalPolicy::full()).await;
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    let through = BTreeSet::from([ua.uri.clone(), uz.uri.clone(), live_link.uri.clone()]);
    assert_eq!(linked(&full), through, "full: {:?}", full.problems);
    assert_eq!(linked(&incremental), through, "incremental: {:?}", incremental.problems);
    assert!(keys(&incremental).is_empty() && keys(&full).is_empty());

    // Without live keys through a link: the same candidates, the link targets among them.
    lake.engine.delete("t", &[ua.clone(), uz.clone(), live_link.clone()]);
    lake.engine.cleanup("t", |_| false);
    let full = lake.plan(&IncrementalPolicy::full()).await;
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    assert!(linked(&incremental).is_empty() && linked(&full).is_empty());
    assert!(keys(&full).contains(&target1.uri) && keys(&full).contains(&format!("{v}/k")));
    assert!(keys(&incremental).is_subset(&keys(&full)), "{:?} vs {:?}", keys(&incremental), keys(&full));
    for link in [&released[20].uri, &later[10].uri, &live_link.uri, &u] {
        assert!(!keys(&incremental).iter().any(|k| k.starts_with(link.as_str())), "{link} planned");
    }
}

/// HELD: the batches of live keys looked up for links (4096 a batch, each split over up to 8
/// blocking threads) keep every answer with its key. Live keys replaced by links to orphans at
/// the first and last key of a batch, at the boundaries of a batch's parts for 1 to 8 threads,
/// and in the second batch, with the two keys on either side of the batch boundary referenced
/// twice (two tables: the merged live set holds them twice, across the boundary): the
/// incremental plan names exactly the live keys the full plan names, and proposes nothing.
#[tokio::test]
async fn links_at_every_batch_and_thread_boundary_are_met() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 30 * HOUR_MS;
    let mut live = Vec::new();
    for i in 0..4300 {
        live.push(lake.upload_minted(t0 + i).await);
    }
    lake.engine.append("t", &live);
    lake.engine.append("u", &live[4094..4098]);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
    lake.now += HOUR_MS;
    let mut at: BTreeSet<usize> = BTreeSet::from([0, 4095, 4096, 4097, 4299]);
    for threads in 1..=8usize {
        let per = 4096usize.div_ceil(threads);
        at.extend([per - 1, per, (2 * per).min(4095), (2 * per - 1).min(4095)]);
    }
    let mut through = BTreeSet::new();
    for (n, &i) in at.iter().enumerate() {
        let target = lake.upload_minted(lake.now - 2 * HOUR_MS + n as u64).await;
        let from = path_of(&lake, &live[i].uri);
        std::fs::remove_file(&from).unwrap();
        std::os::unix::fs::symlink(path_of(&lake, &target.uri), &from).unwrap();
        through.insert(live[i].uri.clone());
    }
    let full = lake.plan(&IncrementalPolicy::full()).await;
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    assert_eq!(linked(&full), through);
    assert_eq!(linked(&incremental), through);
    assert!(keys(&incremental).is_empty() && keys(&full).is_empty());
}

/// A lake whose `n` objects, minted 30 hours before its now, were referenced when its state was
/// recorded and were released since (deleted, the versions holding them cleaned up); its now at
/// `ms` past a whole second.
async fn released_lake(n: u64, ms: u64) -> (Lake, Vec<lake_common::ObjectIdentity>) {
    let mut lake = Lake::new().await;
    lake.now = lake.now - lake.now % 1000 + ms;
    let t0 = lake.now - 30 * HOUR_MS;
    let mut refs = Vec::new();
    for i in 0..n {
        refs.push(lake.upload_minted(t0 + i).await);
    }
    lake.engine.append("t", &refs);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
    lake.now += HOUR_MS;
    lake.engine.delete("t", &refs);
    lake.engine.cleanup("t", |_| false);
    (lake, refs)
}

/// HELD: a released key referenced again after the incremental plan looked it up (between the
/// look-up, made ahead of the sweep, and apply). Not a new window: the live set is read whole
/// before any look-up, then as now, so a commit after it is seen by apply's revalidation only,
/// which revives the key (it survives); a key referenced again before the plan read the journal
/// is live and never a candidate.
#[tokio::test]
async fn a_released_key_referenced_again_after_the_look_up_survives_apply() {
    let (lake, refs) = released_lake(70, 0).await;
    // Referenced again before the plan: live, not a candidate.
    lake.engine.append("t", &refs[..5]);
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&plan).0, PlanMode::Incremental, "{:?}", plan.mode);
    let expected: BTreeSet<String> = refs[5..].iter().map(|r| r.uri.clone()).collect();
    assert_eq!(keys(&plan), expected);
    // Referenced again after the plan: apply revives them.
    let again = [refs[5].clone(), refs[40].clone(), refs[69].clone()];
    lake.engine.append("t", &again);
    let checkpoint =
        lake_gc::checkpoint::CheckpointLocation::parse(lake.dir.path().join("again.ckpt").to_str().unwrap()).unwrap();
    let options = lake_gc::apply::ApplyOptions { page_size: 7, ..Default::default() };
    lake.gc().await.apply(&plan, &Horizon::new(MIN_AGE), &checkpoint, &options).await.unwrap();
    for r in refs[..5].iter().chain(&again) {
        assert!(lake.exists(&r.uri).await, "{} was deleted", r.uri);
    }
    assert!(!lake.exists(&refs[6].uri).await);
}

/// HELD: a local file's time is looked up to the nanosecond, as the listing reads it (no
/// rounding since 7216a9f, where S3's whole-second HEAD is rounded to the end of its second).
/// Released keys whose files were last written at whole seconds around a cutoff of `S.300`:
/// at `S.000` and `S.299` (before it: old), at `S.300` and `(S+1).000` (young by the store's
/// time): the incremental plan judges each exactly as the full plan does, and holds the young.
#[tokio::test]
async fn whole_second_local_times_around_the_cutoff_are_judged_as_the_listing_judges_them() {
    let (lake, refs) = released_lake(4, 300).await;
    let cutoff = lake.now - MIN_AGE.as_millis() as u64;
    assert_eq!(cutoff % 1000, 300);
    let second = cutoff - 300;
    for (r, ms) in refs.iter().zip([second, second + 299, second + 300, second + 1000]) {
        set_mtime(&lake, &r.uri, ms);
    }
    let full = lake.plan(&IncrementalPolicy::full()).await;
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    let old = BTreeSet::from([refs[0].uri.clone(), refs[1].uri.clone()]);
    assert_eq!(keys(&full), old);
    assert_eq!(keys(&incremental), old);
    let held = &incremental.mode.as_ref().unwrap().held;
    assert!(held.contains(&refs[2].uri) && held.contains(&refs[3].uri), "held: {held:?}");
}

/// HELD: an inventory given to `with_inventory` that lists ANOTHER lake (the other lake's
/// orphans, and under the keys of this lake's live objects, files of its own) is not read by
/// an incremental plan (7216a9f): the plan lists this lake with the store's own listing and
/// proposes exactly what this lake's own full plan proposes, none of the other lake's keys.
#[tokio::test]
async fn a_given_inventory_of_another_lake_is_not_read_by_incremental_plans() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 30 * HOUR_MS;
    let live = lake.upload_minted(t0).await;
    let released = lake.upload_minted(t0 + 1).await;
    lake.engine.append("t", &[live.clone(), released.clone()]);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
    lake.now += HOUR_MS;
    lake.engine.delete("t", std::slice::from_ref(&released));
    lake.engine.cleanup("t", |_| false);
    let orphan = lake.upload_minted(lake.now - 2 * HOUR_MS).await;

    let mut other = Lake::new().await;
    other.now = lake.now;
    other.store.put(&live.uri, b"other".to_vec()).await.unwrap();
    let foreign = other.upload_minted(lake.now - 2 * HOUR_MS + 5).await;
    let foreign_old = other.upload_minted(t0 + 7).await;
    let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
    let given =
        lake.gc().await.with_inventory(Box::new(lake_gc::inventory::local::LocalInventory::new(other.store.clone())));
    let plan = given.plan_with(&Horizon::new(MIN_AGE), &settings, &IncrementalPolicy::default()).await.unwrap().plan;
    assert_eq!(mode(&plan).0, PlanMode::Incremental, "{:?}", plan.mode);
    let own_full = lake.plan(&IncrementalPolicy::full()).await;
    assert_eq!(keys(&plan), BTreeSet::from([released.uri.clone(), orphan.uri.clone()]));
    assert_eq!(keys(&plan), keys(&own_full));
    assert!(!keys(&plan).contains(&foreign.uri) && !keys(&plan).contains(&foreign_old.uri));
    assert!(!keys(&plan).contains(&live.uri));
}

// ---------------------------------------------------------------------------------------------
// Adversarial review of 5275c29 (the state's lineages and journal positions checked by the plan,
// not by `choose`) and 09e15d5 (incremental sharded plans: one shard over every key,
// `ShardSpec::incremental`, whose complete apply records a state; one listing range per stream).
// Every attack on the two commits HELD: each test of `mod sharded` pins it. One probe beyond
// them found a HOLE in every local plan, fixed: a young live key made a symbolic link
// (`a_young_live_key_made_a_link_to_an_old_orphan_is_met_past_the_sweep`, after the module). What they check is the invariant a state can only
// make GC miss garbage: every plan proposes a subset of the full plan at its cutoff and nothing a
// retained version or an intent references, and every live object survives every apply.
// ---------------------------------------------------------------------------------------------

mod sharded {
    use crate::incremental::{keys, mode, Lake, HOUR_MS, MIN_AGE};
    use async_trait::async_trait;
    use chrono::{DateTime, Utc};
    use lake_common::{ErrorKind, ObjectIdentity};
    use lake_engine::memory::MemoryEngine;
    use lake_engine::{
        Engine, EngineError, LineageStamp, Removals, TableLocation, TableSet, TableSnapshot, UnreferencedFile,
        UriRange, WriteIntents,
    };
    use lake_gc::apply::{ApplyOptions, ApplyReport};
    use lake_gc::checkpoint::CheckpointLocation;
    use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
    use lake_gc::key_range::KeyRange;
    use lake_gc::plan::{GcPlan, PlanMode, PlanShard};
    use lake_gc::plan_time::PlanTime;
    use lake_gc::shards::{ShardIncremental, ShardManifest, ShardSpec, ShardedPlan};
    use lake_gc::state::{GcState, IncrementalPolicy, STATE_PREFIX};
    use lake_store::clock::FixedClock;
    use std::collections::BTreeSet;
    use std::time::Duration;

    fn settings() -> PlanSettings {
        PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() }
    }

    fn horizon() -> Horizon {
        Horizon::new(MIN_AGE)
    }

    fn clock(lake: &Lake) -> FixedClock {
        FixedClock(DateTime::<Utc>::from_timestamp_millis(lake.now as i64).unwrap())
    }

    fn checkpoint(lake: &Lake, name: &str) -> CheckpointLocation {
        CheckpointLocation::parse(lake.dir.path().join(name).to_str().unwrap()).unwrap()
    }

    fn options(max_pages: Option<u64>) -> ApplyOptions {
        ApplyOptions { page_size: 1, max_pages, ..ApplyOptions::default() }
    }

    async fn states(lake: &Lake) -> Vec<String> {
        lake.store.list_all(STATE_PREFIX).await.unwrap().into_iter().map(|(k, _)| k).collect()
    }

    async fn state_at(lake: &Lake, key: &str) -> GcState {
        GcState::decode(&lake.store.get(key).await.unwrap().unwrap(), key).unwrap()
    }

    /// The keys a retained version or an intent references now.
    fn live_keys(engine: &MemoryEngine) -> BTreeSet<String> {
        engine.true_live_set().into_iter().map(|i| i.uri).collect()
    }

    /// The full plan at `cutoff` (the store's now minus `min_age` when `None`).
    async fn full_at(lake: &Lake, cutoff: Option<PlanTime>) -> GcPlan {
        let horizon = Horizon { earlier_cutoff: cutoff.map(|c| c.datetime()), ..horizon() };
        lake.gc().await.plan(&horizon, &settings()).await.unwrap().plan
    }

    /// `plan` proposes a subset of `full` and nothing live now.
    fn assert_subset_and_not_live(plan: &GcPlan, full: &GcPlan, engine: &MemoryEngine, what: &str) {
        assert!(
            keys(plan).is_subset(&keys(full)),
            "{what}: {:?} is not a subset of the full plan's {:?}",
            keys(plan),
            keys(full)
        );
        let live = live_keys(engine);
        assert!(
            keys(plan).is_disjoint(&live),
            "{what}: live keys proposed: {:?}",
            keys(plan).intersection(&live).collect::<Vec<_>>()
        );
    }

    /// Every object a retained version references still exists.
    async fn assert_live_exist(lake: &Lake, what: &str) {
        for key in live_keys(&lake.engine) {
            assert!(lake.exists(&key).await, "{what}: the live object {key} was deleted");
        }
    }

    /// A lake with a table `t` and a branch `t@b` of it, and a state recorded by a complete
    /// apply; a day later, since the state: `b` released (deleted from `t`, the branch's
    /// versions holding it cleaned up), an orphan `n` in the listed range, a live key `e` in it.
    /// `d` is referenced only by the branch.
    struct Fixture {
        lake: Lake,
        a: ObjectIdentity,
        b: ObjectIdentity,
        d: ObjectIdentity,
        n: ObjectIdentity,
        state: String,
    }

    async fn fixture() -> Fixture {
        let mut lake = Lake::new().await;
        let t0 = lake.now - 30 * HOUR_MS;
        let a = lake.upload_minted(t0).await;
        let b = lake.upload_minted(t0 + 1).await;
        let c = lake.upload_minted(t0 + 2).await;
        let d = lake.upload_minted(t0 + 3).await;
        lake.upload_minted(t0 + 4).await; // an orphan the first run collects
        lake.engine.append("t", &[a.clone(), b.clone(), c.clone()]);
        lake.engine.branch("t", "t@b").unwrap();
        lake.engine.append("t@b", std::slice::from_ref(&d));
        lake.engine.delete("t@b", std::slice::from_ref(&b));
        let state = lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.unwrap();
        lake.now += 24 * HOUR_MS;
        lake.engine.delete("t", std::slice::from_ref(&b));
        lake.engine.cleanup("t", |_| false);
        lake.engine.cleanup("t@b", |_| false);
        let e = lake.upload_minted(lake.now - 3 * HOUR_MS).await;
        lake.engine.append("t", std::slice::from_ref(&e));
        let n = lake.upload_minted(lake.now - 2 * HOUR_MS).await;
        let incremental = lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
        assert_eq!(keys(&incremental), BTreeSet::from([b.uri.clone(), n.uri.clone()]));
        Fixture { lake, a, b, d, n, state }
    }

    /// Replaces the journal entry of `t`'s version 1 (a version cleanup removed: the journal
    /// outlives it) by another file.
    fn rewrite_entry(engine: &MemoryEngine) {
        engine.corrupt_sidecar("t", 1, lake_common::DecodeError::CorruptJson("rewritten".into()));
    }

    /// The one-shard plan of `spec` and its manifest (as a worker and a coordinator make them).
    async fn one_shard(lake: &Lake, spec: &ShardSpec) -> ShardedPlan {
        let plan = lake.gc().await.plan_shard(&horizon(), &settings(), spec, 0).await.unwrap().plan;
        let manifest = ShardManifest::assemble(std::slice::from_ref(&plan)).unwrap();
        ShardedPlan { manifest, plans: vec![plan] }
    }

    async fn apply_one(lake: &Lake, sharded: &ShardedPlan, at: &str, max_pages: Option<u64>) -> ApplyReport {
        let gc = lake.gc().await;
        gc.apply_shard(&sharded.manifest, &sharded.plans[0], &horizon(), &checkpoint(lake, at), &options(max_pages))
            .await
            .unwrap()
    }

    /// HELD: a shard spec edited by hand (the JSON handed to workers): `incremental` set on a
    /// spec of several ranges, on the one range of a spec at another index, on a spec whose
    /// one range is not every key; the same for the manifest built from workers' entries. Every
    /// one is refused before anything is planned.
    #[tokio::test]
    async fn an_incremental_spec_is_only_one_shard_over_every_key() {
        let f = fixture().await;
        let gc = f.lake.gc().await;
        let incremental = gc.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
        assert!(incremental.incremental.is_some() && incremental.ranges == [KeyRange::all()]);
        let full = gc.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::full()).await.unwrap();
        assert!(full.ranges.len() > 1, "{full:?}");
        let several = ShardSpec { incremental: incremental.incremental, ..full.clone() };
        for index in 0..several.ranges.len() {
            let err = gc.plan_shard(&horizon(), &settings(), &several, index).await.unwrap_err();
            crate::refused(err, ErrorKind::ShardMismatch);
        }
        let err = gc.plan_shard(&horizon(), &settings(), &incremental, 1).await.unwrap_err();
        crate::refused(err, ErrorKind::ShardMismatch);
        let first_only = ShardSpec { ranges: vec![full.ranges[0].clone()], ..incremental.clone() };
        let err = gc.plan_shard(&horizon(), &settings(), &first_only, 0).await.unwrap_err();
        crate::refused(err, ErrorKind::ShardMismatch);
        // The JSON a Ray task gets, edited: the same refusals.
        let text = serde_json::to_string(&several).unwrap();
        let read: ShardSpec = serde_json::from_str(&text).unwrap();
        crate::refused(gc.plan_shard(&horizon(), &settings(), &read, 0).await.unwrap_err(), ErrorKind::ShardMismatch);
        // A coordinator's manifest from entries of a full spec under an incremental one.
        let shard0 = gc.plan_shard(&horizon(), &settings(), &full, 0).await.unwrap().plan;
        let entry = lake_gc::shards::ShardEntry::of(&shard0).unwrap();
        crate::refused(ShardManifest::from_entries(&several, vec![entry]).unwrap_err(), ErrorKind::ShardMismatch);
    }

    /// HELD: the margins of an incremental spec edited (`margin_seconds` 0 or `u64::MAX`,
    /// `full_every_seconds` 0 or `u64::MAX`, what a forged spec can say). A margin of 0 lists
    /// less (may miss), `u64::MAX` lists every key (as a full plan), `full_every` 0 plans in
    /// full, `u64::MAX` never comes due: each plan is a subset of the full plan at the spec's
    /// cutoff, proposes nothing live, and its apply deletes nothing live.
    #[tokio::test]
    async fn an_incremental_spec_with_edited_margins_plans_a_subset_of_the_full_plan() {
        for (margin, full_every, expected) in [
            (0, 7 * 24 * 3600, PlanMode::Incremental),
            (u64::MAX, 7 * 24 * 3600, PlanMode::Incremental),
            (3600, 0, PlanMode::Full),
            (3600, u64::MAX, PlanMode::Incremental),
            (u64::MAX, u64::MAX, PlanMode::Incremental),
        ] {
            let f = fixture().await;
            let lake = &f.lake;
            let mut spec =
                lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
            spec.incremental = Some(ShardIncremental { full_every_seconds: full_every, margin_seconds: margin });
            let sharded = one_shard(lake, &spec).await;
            let what = format!("margin {margin}, full_every {full_every}");
            assert_eq!(mode(&sharded.plans[0]).0, expected, "{what}: {:?}", sharded.plans[0].mode);
            let full = full_at(lake, Some(spec.cutoff)).await;
            assert_subset_and_not_live(&sharded.plans[0], &full, &lake.engine, &what);
            if margin == u64::MAX {
                assert_eq!(keys(&sharded.plans[0]), keys(&full), "{what}: every key listed");
            }
            let report = apply_one(lake, &sharded, "m.ckpt", None).await;
            assert!(report.checkpoint.complete && report.state.is_some(), "{what}");
            assert_live_exist(lake, &what).await;
        }
    }

    /// HELD: an incremental spec whose cutoff was edited. Later than the store's now minus
    /// `min_age`: refused. Earlier than the state's own cutoff (`choose` does not compare them):
    /// the plan judges every key at the spec's cutoff, a subset of the full plan there; its apply
    /// records a state of that earlier cutoff, which is not the latest: the next run still starts
    /// from the state after it.
    #[tokio::test]
    async fn an_incremental_spec_with_an_edited_cutoff_is_refused_or_judged_at_its_cutoff() {
        let f = fixture().await;
        let lake = &f.lake;
        let spec = lake.gc().await.shard_ranges_with(&horizon(), 1, &IncrementalPolicy::default()).await.unwrap();
        let later = ShardSpec {
            cutoff: PlanTime::from_datetime(spec.cutoff.datetime() + chrono::Duration::seconds(1)),
            ..spec.clone()
        };
        let err = lake.gc().await.plan_shard(&horizon(), &settings(), &later, 0).await.unwrap_err();
        crate::refused(err, ErrorKind::CutoffTooLate);

        let recorded = state_at(lake, &f.state).await;
        let before = recorded.cutoff.datetime() - chrono::Duration::hours(2);
        let earlier = ShardSpec { cutoff: PlanTime::from_datetime(before), ..spec.clone() };
        let sharded = one_shard(lake, &earlier).await;
        assert_eq!(mode(&sharded.plans[0]).0, PlanMode::Incremental, "{:?}", sharded.plans[0].mode);
        let full = full_at(lake, Some(earlier.cutoff)).await;
        assert_subset_and_not_live(&sharded.plans[0], &full, &lake.engine, "a cutoff before the state's");
        let report = apply_one(lake, &sharded, "early.ckpt", None).await;
        let early = report.state.expect("a complete apply of the one shard records a state");
        assert!(early < f.state, "{early} sorts before {}", f.state);
        assert_live_exist(lake, "a cutoff before the state's").await;
        let next = lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(next.mode.as_ref().unwrap().state.as_deref(), Some(recorded.digest().as_str()));
        assert_subset_and_not_live(&next, &full_at(lake, None).await, &lake.engine, "the next run");
    }

    /// HELD: a lineage the state records deleted (the branch dropped: it released `d` without
    /// any journal entry) or rewritten (a journal entry of `t` replaced) after the coordinator
    /// chose an incremental spec (`choose` no longer reads lineage, so a branch deleted before
    /// the coordinator ran gives an incremental spec too): the worker's plan checks the state's
    /// lineages against what it reads and falls back to a full plan of every key, saying why,
    /// equal to the full plan; its apply records a full state and deletes nothing live. Changed
    /// before the coordinator ran: the spec has the shards asked for.
    #[tokio::test]
    async fn a_lineage_deleted_or_rewritten_before_the_worker_plans_falls_back_to_a_full_plan() {
        for (rewrite, expected) in [(false, "`t@b` it records is no longer registered"), (true, "journal positions")] {
            let f = fixture().await;
            let lake = &f.lake;
            let spec = lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
            assert!(spec.incremental.is_some());
            if rewrite {
                rewrite_entry(&lake.engine);
            } else {
                lake.engine.drop_table("t@b");
            }
            let sharded = one_shard(lake, &spec).await;
            let (m, reason) = mode(&sharded.plans[0]);
            assert_eq!(m, PlanMode::Full, "{reason}");
            assert!(reason.contains(expected), "expected `{expected}` in: {reason}");
            let full = full_at(lake, Some(spec.cutoff)).await;
            assert_eq!(keys(&sharded.plans[0]), keys(&full));
            if !rewrite {
                assert!(keys(&full).contains(&f.d.uri), "only the dropped branch referenced `d`");
            }
            assert_subset_and_not_live(&sharded.plans[0], &full, &lake.engine, expected);
            let report = apply_one(lake, &sharded, "fb.ckpt", None).await;
            let key = report.state.expect("a complete apply records a state");
            assert_eq!(state_at(lake, &key).await.mode, PlanMode::Full);
            assert_live_exist(lake, expected).await;
        }
        // Dropped or rewritten before the coordinator ran: the coordinator makes the plan's
        // lineage checks itself (`state::lineage_fallback`), so the spec has the shards asked
        // for, not one shard planned in full; the shards together are the full plan.
        for rewrite in [false, true] {
            let f = fixture().await;
            if rewrite {
                rewrite_entry(&f.lake.engine);
            } else {
                f.lake.engine.drop_table("t@b");
            }
            let gc = f.lake.gc().await;
            let spec = gc.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
            assert!(spec.incremental.is_none() && spec.ranges.len() > 1, "{spec:?}");
            let mut union = BTreeSet::new();
            for index in 0..spec.ranges.len() {
                union.extend(keys(&gc.plan_shard(&horizon(), &settings(), &spec, index).await.unwrap().plan));
            }
            drop(gc);
            assert_eq!(union, keys(&full_at(&f.lake, Some(spec.cutoff)).await));
        }
    }

    /// The in-memory engine with a hook run once, right after the first answer of `tables()`:
    /// a change to the lineage between the worker's read of the registry (where it checks that
    /// the state's lineages are registered) and its read of each lineage.
    struct Hooked<'a> {
        inner: &'a MemoryEngine,
        hook: std::sync::Mutex<Option<Hook<'a>>>,
    }

    /// A change to the lineage, made once.
    type Hook<'a> = Box<dyn FnOnce(&MemoryEngine) + Send + 'a>;

    #[async_trait]
    impl Engine for Hooked<'_> {
        fn lake_root(&self) -> Option<String> {
            self.inner.lake_root()
        }
        async fn tables(&self) -> Result<TableSet, EngineError> {
            let tables = self.inner.tables().await?;
            let hook = self.hook.lock().unwrap().take();
            if let Some(hook) = hook {
                hook(self.inner);
            }
            Ok(tables)
        }
        async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError> {
            self.inner.snapshot(location).await
        }
        async fn snapshot_in(
            &self,
            location: &TableLocation,
            range: &UriRange,
        ) -> Result<Box<dyn TableSnapshot>, EngineError> {
            self.inner.snapshot_in(location, range).await
        }
        async fn lineage_stamp(&self, location: &TableLocation) -> Result<LineageStamp, EngineError> {
            self.inner.lineage_stamp(location).await
        }
        async fn references_added_between(
            &self,
            location: &TableLocation,
            after: u64,
            upto: u64,
        ) -> Result<Vec<ObjectIdentity>, EngineError> {
            self.inner.references_added_between(location, after, upto).await
        }
        async fn references_removed_between(
            &self,
            location: &TableLocation,
            after: Option<u64>,
            upto: u64,
            range: &UriRange,
            visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
        ) -> Result<Removals, EngineError> {
            self.inner.references_removed_between(location, after, upto, range, visit).await
        }
        async fn unreferenced_journal_files(
            &self,
            location: &TableLocation,
            cutoff_ms: i64,
        ) -> Result<Vec<UnreferencedFile>, EngineError> {
            self.inner.unreferenced_journal_files(location, cutoff_ms).await
        }
        async fn write_intents(
            &self,
            visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
        ) -> Result<WriteIntents, EngineError> {
            self.inner.write_intents(visit).await
        }
    }

    /// HELD: the branch the state records deleted, deleted and created again from `t` (another
    /// lineage under its name), or `t`'s journal entry rewritten, right after the worker read
    /// the registry (its check that the state's lineages are registered passed) and before it
    /// read each lineage. Deleted: the plan is incomplete (the lineage vanished), no candidate,
    /// and no shard is applied. Created again or rewritten: the plan falls back to a full one
    /// (the journal positions the state records are gone), equal to the full plan, and its
    /// apply deletes nothing live.
    #[tokio::test]
    async fn a_lineage_changed_between_the_workers_registry_read_and_its_lineage_read_is_met() {
        for change in ["drop", "recreate", "rewrite"] {
            let f = fixture().await;
            let lake = &f.lake;
            let spec = lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
            let x = lake.engine.append("t", &[]); // `t` moves on: a branch made now differs
            assert!(x > 1);
            let hooked = Hooked {
                inner: &lake.engine,
                hook: std::sync::Mutex::new(Some(Box::new(move |engine: &MemoryEngine| match change {
                    "drop" => engine.drop_table("t@b"),
                    "recreate" => {
                        engine.drop_table("t@b");
                        engine.branch("t", "t@b").unwrap();
                    }
                    _ => rewrite_entry(engine),
                }))),
            };
            let gc =
                GarbageCollector::open(lake.store.clone(), &hooked).await.unwrap().with_unchecked_clock(clock(lake));
            let plan = gc.plan_shard(&horizon(), &settings(), &spec, 0).await.unwrap().plan;
            let manifest = ShardManifest::assemble(std::slice::from_ref(&plan)).unwrap();
            drop(gc);
            let full = full_at(lake, Some(spec.cutoff)).await;
            assert_subset_and_not_live(&plan, &full, &lake.engine, change);
            match change {
                "drop" => {
                    assert!(!plan.lineage_complete && keys(&plan).is_empty(), "{change}: {:?}", plan.problems);
                    let gc = lake.gc().await;
                    let err = gc
                        .apply_shard(&manifest, &plan, &horizon(), &checkpoint(lake, "h.ckpt"), &options(None))
                        .await
                        .unwrap_err();
                    assert!(matches!(err, lake_gc::GcError::PlanIncomplete { .. }), "{err:?}");
                }
                _ => {
                    assert!(plan.lineage_complete, "{change}: {:?}", plan.problems);
                    let (m, reason) = mode(&plan);
                    assert_eq!(m, PlanMode::Full, "{change}: {reason}");
                    assert!(reason.contains("journal positions"), "{change}: {reason}");
                    assert_eq!(keys(&plan), keys(&full), "{change}");
                    let sharded = ShardedPlan { manifest, plans: vec![plan] };
                    let report = apply_one(lake, &sharded, "h.ckpt", None).await;
                    assert!(report.checkpoint.complete && report.state.is_some(), "{change}");
                }
            }
            assert_live_exist(lake, change).await;
        }
    }

    /// HELD: a table registered after the state (a lineage the state does not record), with the
    /// one shard: keys its versions after its first released are examined, keys it still
    /// references are live; the plan equals the full plan, and a key the new table took over
    /// from `t` (released by `t`, referenced by `u`) survives.
    #[tokio::test]
    async fn a_table_registered_after_the_state_keeps_its_keys_live_in_the_one_shard() {
        let mut f = fixture().await;
        let c = f.lake.upload_minted(f.lake.now - 20 * HOUR_MS).await;
        let lake = &f.lake;
        lake.engine.append("u", &[f.a.clone(), c.clone()]);
        lake.engine.delete("t", std::slice::from_ref(&f.a)); // still referenced by `u`
        lake.engine.delete("u", std::slice::from_ref(&c));
        lake.engine.cleanup("u", |_| false);
        lake.engine.cleanup("t", |_| false);
        let spec = lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
        let sharded = one_shard(lake, &spec).await;
        assert_eq!(mode(&sharded.plans[0]).0, PlanMode::Incremental, "{:?}", sharded.plans[0].mode);
        let full = full_at(lake, Some(spec.cutoff)).await;
        assert_eq!(keys(&sharded.plans[0]), keys(&full));
        assert!(keys(&full).contains(&c.uri) && !keys(&full).contains(&f.a.uri));
        apply_one(lake, &sharded, "u.ckpt", None).await;
        assert!(lake.exists(&f.a.uri).await && !lake.exists(&c.uri).await);
        assert_live_exist(lake, "a table new since the state").await;
    }

    /// HELD: the one shard's apply crashed after one page (no state recorded: the next plan
    /// still starts from the old state); a candidate referenced again before the resume; the
    /// resume (`resume_shard`, from the checkpoint alone) revives it, finishes and records the
    /// state; a second apply with the same checkpoint is a no-op whose state is the same file,
    /// unchanged; one with a new checkpoint path deletes nothing more and leaves the state as
    /// it was (create-only). The next incremental plan is a subset of the full plan.
    #[tokio::test]
    async fn a_crashed_resumed_and_repeated_one_shard_apply_records_one_state_and_keeps_live_objects() {
        let mut f = fixture().await;
        let before = states(&f.lake).await;
        let spec = f.lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
        let sharded = one_shard(&f.lake, &spec).await;
        assert_eq!(sharded.plans[0].candidates.len(), 2);
        let crashed = apply_one(&f.lake, &sharded, "c.ckpt", Some(1)).await;
        assert!(!crashed.checkpoint.complete && crashed.state.is_none());
        assert_eq!(states(&f.lake).await, before);
        let old = state_at(&f.lake, &f.state).await.digest();
        let meanwhile = f.lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(meanwhile.mode.as_ref().unwrap().state.as_deref(), Some(old.as_str()));

        f.lake.engine.append("t", std::slice::from_ref(&f.n)); // `n` referenced again
        let resumed = {
            let gc = f.lake.gc().await;
            gc.resume_shard(&sharded.manifest, &horizon(), &checkpoint(&f.lake, "c.ckpt"), &options(None))
                .await
                .unwrap()
                .expect("an unfinished apply to resume")
        };
        assert!(resumed.checkpoint.complete, "{:?}", resumed.checkpoint);
        assert!(resumed.checkpoint.revived.contains(&f.n.uri), "{:?}", resumed.checkpoint.revived);
        let key = resumed.state.expect("the finished resume records the state");
        let bytes = f.lake.store.get(&key).await.unwrap().unwrap();
        assert!(f.lake.exists(&f.n.uri).await && !f.lake.exists(&f.b.uri).await);
        assert_live_exist(&f.lake, "resumed").await;

        let again = apply_one(&f.lake, &sharded, "c.ckpt", None).await;
        assert!(again.was_complete && again.state.as_deref() == Some(key.as_str()));
        let elsewhere = apply_one(&f.lake, &sharded, "d.ckpt", None).await;
        assert!(elsewhere.checkpoint.complete && elsewhere.checkpoint.deleted == 0, "{:?}", elsewhere.checkpoint);
        assert_eq!(elsewhere.state.as_deref(), Some(key.as_str()));
        assert_eq!(f.lake.store.get(&key).await.unwrap().unwrap(), bytes, "a state is written once");
        assert_eq!(states(&f.lake).await.len(), before.len() + 1);
        assert_live_exist(&f.lake, "applied again").await;

        f.lake.now += HOUR_MS;
        f.lake.engine.delete("t", std::slice::from_ref(&f.n));
        let next = f.lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(mode(&next).0, PlanMode::Incremental);
        assert_subset_and_not_live(&next, &full_at(&f.lake, None).await, &f.lake.engine, "after the resume");
    }

    /// HELD (safety; the state is recorded): a forged one-shard sharded plan that is not whole:
    /// shard 0 of a full sharded plan of several shards, its `shard` field edited to one shard
    /// over every key and given a mode record, its manifest assembled again (digests are
    /// unkeyed: anyone can recompute them). Its apply deletes only its own candidates, checked
    /// against the live set, and records a state claiming every key was swept; later plans
    /// from that state miss the garbage of the other ranges (a full plan collects it) and
    /// propose a subset of the full plan, nothing live.
    #[tokio::test]
    async fn a_forged_one_shard_manifest_of_part_of_a_plan_misses_garbage_but_deletes_nothing_live() {
        let mut f = fixture().await;
        // More garbage, spread over time so that the shards split it.
        let mut old = Vec::new();
        for i in 0..6u64 {
            old.push(f.lake.upload_minted(f.lake.now - (26 - 3 * i) * HOUR_MS).await);
        }
        let incremental_mode = f.lake.plan(&IncrementalPolicy::default()).await.mode;
        let full = f
            .lake
            .gc()
            .await
            .plan_sharded_with(&horizon(), &settings(), 4, &IncrementalPolicy::full())
            .await
            .unwrap()
            .plan;
        assert!(full.manifest.count > 1);
        let mut forged = full.plans[0].clone();
        forged.shard = Some(PlanShard { index: 0, count: 1, range: KeyRange::all() });
        forged.mode = incremental_mode;
        let manifest = ShardManifest::assemble(std::slice::from_ref(&forged)).unwrap();
        let sharded = ShardedPlan { manifest, plans: vec![forged] };
        let report = apply_one(&f.lake, &sharded, "forged.ckpt", None).await;
        assert!(report.state.is_some(), "the library cannot tell a forged whole shard from a real one");
        assert_live_exist(&f.lake, "forged").await;
        f.lake.now += HOUR_MS;
        let next = f.lake.plan(&IncrementalPolicy::default()).await;
        assert_eq!(mode(&next).0, PlanMode::Incremental);
        let whole = full_at(&f.lake, None).await;
        assert_subset_and_not_live(&next, &whole, &f.lake.engine, "from the forged state");
        f.lake.run(IncrementalPolicy::default(), None).await;
        assert_live_exist(&f.lake, "after the next run").await;
        f.lake.run(IncrementalPolicy::full(), None).await;
        for o in &old {
            assert!(!f.lake.exists(&o.uri).await, "a full run collects {}", o.uri);
        }
        assert_live_exist(&f.lake, "after a full run").await;
    }

    /// HELD: a state copied in from another lake as it is: not used (another lake's), the
    /// sharded plan is full. Then the same state edited to this lake's root and identity and
    /// sealed again (the seal is an unkeyed SHA-256), with a later cutoff than this lake's state
    /// (so it is the latest), no lineage, and this lake's live keys as `unfinished` and `held`.
    /// The one shard plans incrementally from it: every lineage is new since such a state, the
    /// named keys are looked up and found live; the plan is a subset of the full plan, its apply
    /// deletes nothing live.
    #[tokio::test]
    async fn a_state_of_another_lake_resealed_as_this_lakes_deletes_nothing_live() {
        let f = fixture().await;
        let lake = &f.lake;
        let other = fixture().await;
        let ours = state_at(lake, &f.state).await;
        let mut copied = state_at(&other.lake, &other.state).await;
        copied.cutoff = PlanTime::from_datetime(ours.cutoff.datetime() + chrono::Duration::milliseconds(1));
        copied.full_cutoff = copied.cutoff;
        // Copied as it is (its cutoff made the latest): not used, the sharded plan is full.
        lake.store.put(&copied.key(), copied.encode()).await.unwrap();
        let spec = lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
        assert!(spec.incremental.is_none(), "{spec:?}");
        let (m, reason) = mode(&lake.plan(&IncrementalPolicy::default()).await);
        assert!(m == PlanMode::Full && reason.contains("of lake"), "{reason}");
        lake.store.delete(&copied.key()).await.unwrap();
        // Resealed as this lake's.
        copied.root = ours.root.clone();
        copied.lake_id = ours.lake_id.clone();
        copied.cutoff = PlanTime::from_datetime(ours.cutoff.datetime() + chrono::Duration::milliseconds(1));
        copied.full_cutoff = copied.cutoff;
        copied.basis = Vec::new();
        let mut named: Vec<String> = [&f.a, &f.d, &f.b].iter().map(|o| o.uri.clone()).collect();
        named.extend(other.lake.engine.true_live_set().into_iter().map(|i| i.uri));
        named.sort();
        named.dedup();
        copied.unfinished = named.clone();
        copied.held = named;
        lake.store.put(&copied.key(), copied.encode()).await.unwrap();
        let spec = lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
        let sharded = one_shard(lake, &spec).await;
        let record = sharded.plans[0].mode.clone().unwrap();
        assert_eq!(record.mode, PlanMode::Incremental, "{record:?}");
        assert_eq!(record.state.as_deref(), Some(copied.digest().as_str()));
        let full = full_at(lake, Some(spec.cutoff)).await;
        assert_subset_and_not_live(&sharded.plans[0], &full, &lake.engine, "a resealed foreign state");
        apply_one(lake, &sharded, "copied.ckpt", None).await;
        assert_live_exist(lake, "a resealed foreign state").await;
    }

    /// HELD: a fallback found while the listing is many pages ahead of the sweep (pages of 3,
    /// 100 keys in the listed range: more than the channel holds): the plan returns the reason
    /// and the listing stops, instead of waiting on a full channel; the fallback full plan
    /// equals the full plan. For both checks made by the plan: a lineage the state records no
    /// longer registered, and a journal entry rewritten.
    #[tokio::test]
    async fn a_fallback_found_with_the_listing_pages_ahead_plans_in_full() {
        for rewrite in [false, true] {
            let mut f = fixture().await;
            for i in 0..100 {
                f.lake.upload_minted(f.lake.now - 2 * HOUR_MS + 10 + i).await;
            }
            // The coordinator chose before the change: the worker's plan finds it.
            let spec = f.lake.gc().await.shard_ranges_with(&horizon(), 4, &IncrementalPolicy::default()).await.unwrap();
            assert!(spec.incremental.is_some());
            if rewrite {
                rewrite_entry(&f.lake.engine);
            } else {
                f.lake.engine.drop_table("t@b");
            }
            let lake = &f.lake;
            let planned = tokio::time::timeout(Duration::from_secs(300), one_shard(lake, &spec))
                .await
                .expect("the plan finished");
            assert_eq!(mode(&planned.plans[0]).0, PlanMode::Full, "{:?}", planned.plans[0].mode);
            assert_eq!(keys(&planned.plans[0]), keys(&full_at(lake, None).await));
        }
    }

    /// HELD: the listing an incremental plan makes on S3 (`ParallelInventory` with one range per
    /// stream, 09e15d5), checked here over a local store: from every start an incremental plan
    /// uses (`first_key_at` of a state's cutoff minus the margin, before, between and after the
    /// keys) it yields exactly the plain listing's pages, for 2 to 8 streams, pages of 1 to 1000
    /// and both ends of time (the host's now, the store's virtual now).
    #[tokio::test]
    async fn one_range_per_stream_lists_exactly_the_plain_listing() {
        use futures::StreamExt;
        use lake_gc::inventory::local::LocalInventory;
        use lake_gc::inventory::parallel::ParallelInventory;
        use lake_gc::inventory::ObjectInventory;
        let mut lake = Lake::new().await;
        let t0 = lake.now - 30 * HOUR_MS;
        // Sparse over 30 hours, then dense in the last three.
        for i in 0..30 {
            lake.upload_minted(t0 + i * HOUR_MS).await;
        }
        for i in 0..120 {
            lake.upload_minted(lake.now - 3 * HOUR_MS + i * 7).await;
        }
        async fn listed(
            inventory: &dyn ObjectInventory,
            after: Option<String>,
            page: usize,
        ) -> Vec<(Vec<String>, Option<String>)> {
            let mut pages = inventory.list_from(after, page);
            let mut out = Vec::new();
            while let Some(p) = pages.next().await {
                let p = p.unwrap();
                out.push((p.entries.into_iter().map(|e| e.key).collect(), p.next));
            }
            out
        }
        let plain = LocalInventory::new(lake.store.clone());
        let at =
            |ms: u64| Some(lake_store::keys::first_key_at(DateTime::<Utc>::from_timestamp_millis(ms as i64).unwrap()));
        let starts = [
            None,
            at(t0 - HOUR_MS),
            at(t0 + 5 * HOUR_MS),
            at(lake.now - 3 * HOUR_MS),
            at(lake.now - 2 * HOUR_MS),
            at(lake.now),
        ];
        let end = DateTime::<Utc>::from_timestamp_millis(lake.now as i64).unwrap();
        for after in starts {
            for page in [1, 3, 1000] {
                let want = listed(&plain, after.clone(), page).await;
                for streams in [2, 3, 8] {
                    for span_end in [None, Some(end)] {
                        let mut parallel =
                            ParallelInventory::new(&plain, streams).with_ranges_per_stream(1).with_buffered_pages(2);
                        if let Some(end) = span_end {
                            parallel = parallel.with_span_end(end);
                        }
                        let got = listed(&parallel, after.clone(), page).await;
                        assert_eq!(got, want, "after {after:?}, pages of {page}, {streams} streams, end {span_end:?}");
                    }
                }
            }
        }
    }
}

/// HOLE (fixed; outside the two commits, in every plan on a local root): a live key minted
/// after the cutoff (young), replaced by a symbolic link to an old orphan, in a folder the
/// sweep never reads (it stops at the first young key, and a page reads only the folders of its
/// entries). The link was never met, so the live key going through it was checked against no
/// link: the full plan (and the incremental plan, by the same code) was complete and proposed
/// the link's target, and apply, which cannot see links, deleted it: the table's reference then
/// named nothing. Fix (`planner.rs`): on a local root the live keys after the last listed
/// entry are looked up for links ([`ObjectInventory::links_among`], as an incremental plan
/// looks up the live keys before its listed range) before each is checked; a link there makes
/// the plan incomplete, naming it, as a link the sweep meets does. Checked for full and
/// incremental plans and for the one shard of an incremental sharded plan, and for a link to
/// a folder of orphans as well as to a file.
#[tokio::test]
async fn a_young_live_key_made_a_link_to_an_old_orphan_is_met_past_the_sweep() {
    for folder in [false, true] {
        for policy in [IncrementalPolicy::full(), IncrementalPolicy::default()] {
            let mut lake = Lake::new().await;
            let orphan = lake.upload_minted(lake.now - 30 * HOUR_MS).await;
            let kept = lake.upload_minted(lake.now - 30 * HOUR_MS + 1).await;
            lake.engine.append("t", std::slice::from_ref(&kept));
            if policy == IncrementalPolicy::default() {
                // A state first (it collects nothing: `orphan` is referenced until after it).
                lake.engine.append("t", std::slice::from_ref(&orphan));
                assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());
                lake.now += HOUR_MS;
                lake.engine.delete("t", std::slice::from_ref(&orphan));
                lake.engine.cleanup("t", |_| false);
            }
            let mut young = Vec::new();
            for i in 0..10 {
                young.push(lake.upload_minted(lake.now - 10 * 60_000 + i * 1000).await);
            }
            let via = young[9].clone();
            lake.engine.append("t", std::slice::from_ref(&via));
            let parent = |key: &str| key.rsplit_once('/').unwrap().0.to_string();
            let (from, to) = if folder {
                (path_of(&lake, &parent(&via.uri)), path_of(&lake, &parent(&orphan.uri)))
            } else {
                (path_of(&lake, &via.uri), path_of(&lake, &orphan.uri))
            };
            if folder {
                // The live key's name inside the orphan's folder (the link makes them one).
                let name = via.uri.rsplit_once('/').unwrap().1;
                std::fs::copy(path_of(&lake, &orphan.uri), to.join(name)).unwrap();
                std::fs::remove_dir_all(&from).unwrap();
            } else {
                std::fs::remove_file(&from).unwrap();
            }
            std::os::unix::fs::symlink(&to, &from).unwrap();
            let what = format!("folder {folder}, {policy:?}");
            let plan = lake.plan(&policy).await;
            if policy == IncrementalPolicy::default() {
                assert_eq!(mode(&plan).0, PlanMode::Incremental, "{what}: {:?}", plan.mode);
            }
            assert!(!plan.lineage_complete && keys(&plan).is_empty(), "{what}: {:?} {:?}", keys(&plan), plan.problems);
            assert!(linked(&plan).contains(&via.uri), "{what}: {:?}", plan.problems);
            if policy == IncrementalPolicy::default() {
                let gc = lake.gc().await;
                let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
                let shard = gc.plan_sharded_with(&Horizon::new(MIN_AGE), &settings, 4, &policy).await.unwrap().plan;
                assert_eq!(shard.manifest.count, 1);
                assert!(!shard.manifest.lineage_complete(), "{what}: {:?}", shard.plans[0].problems);
            }
            let at = lake.dir.path().join("young.ckpt");
            let checkpoint = lake_gc::checkpoint::CheckpointLocation::parse(at.to_str().unwrap()).unwrap();
            let options = lake_gc::apply::ApplyOptions::default();
            let applied = lake.gc().await.apply(&plan, &Horizon::new(MIN_AGE), &checkpoint, &options).await;
            assert!(matches!(applied, Err(lake_gc::GcError::PlanIncomplete { .. })), "{what}: {applied:?}");
            assert!(lake.exists(&orphan.uri).await, "{what}: apply deleted the target of live {}", via.uri);
        }
    }
}
