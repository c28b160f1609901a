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
