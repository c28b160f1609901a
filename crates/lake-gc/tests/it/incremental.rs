//! Incremental GC (`lake_gc::state`): a complete apply records a GC state under the root, the
//! next run plans incrementally from it, and every incremental plan is a subset of the full plan
//! at the same cutoff (equal to it when no upload outlived the margin). A state that cannot be
//! trusted is never used: the run makes a full plan and says why.
//!
//! Time is injected: keys are minted at chosen times (ULIDs in the future of the host's clock,
//! so every file's `last_modified` is before every cutoff) and the store's clock is a
//! [`FixedClock`]; nothing sleeps.

use chrono::{DateTime, Utc};
use lake_common::ObjectIdentity;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::plan::{GcPlan, PlanMode};
use lake_gc::run::{PlanSource, RunRequest};
use lake_gc::state::{IncrementalPolicy, STATE_PREFIX};
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::LakeStore;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::time::Duration;
use ulid::Ulid;

pub(crate) const HOUR_MS: u64 = 3_600_000;
pub(crate) const MIN_AGE: Duration = Duration::from_secs(3600);

/// A local lake on a virtual clock (shared with `incremental_attacks`).
pub(crate) struct Lake {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) store: LakeStore,
    pub(crate) engine: MemoryEngine,
    /// The store's now, milliseconds (virtual: days after the host's now).
    pub(crate) now: u64,
    minted: u64,
}

impl Lake {
    pub(crate) async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap();
        LakeDescriptor::create(&store, Duration::from_secs(1)).await.unwrap();
        let now = (Utc::now().timestamp_millis() as u64) + 10 * 24 * HOUR_MS;
        Self { dir, store, engine: MemoryEngine::new(), now, minted: 0 }
    }

    /// Writes an object minted at `at` (ms); returns its identity.
    pub(crate) async fn upload_minted(&mut self, at: u64) -> ObjectIdentity {
        self.minted += 1;
        let key = format!("objects/{}/o{}", Ulid::from_parts(at, u128::from(self.minted)), self.minted);
        self.store.put(&key, b"x".to_vec()).await.unwrap();
        ObjectIdentity::new(key, [0; 32], 1)
    }

    fn clock(&self) -> FixedClock {
        FixedClock(DateTime::<Utc>::from_timestamp_millis(self.now as i64).unwrap())
    }

    pub(crate) async fn gc(&self) -> GarbageCollector<'_> {
        GarbageCollector::open(self.store.clone(), &self.engine).await.unwrap().with_unchecked_clock(self.clock())
    }

    fn checkpoint(&self) -> CheckpointLocation {
        CheckpointLocation::parse(self.dir.path().join("gc.ckpt").to_str().unwrap()).unwrap()
    }

    pub(crate) async fn plan(&self, policy: &IncrementalPolicy) -> GcPlan {
        let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
        self.gc().await.plan_with(&Horizon::new(MIN_AGE), &settings, policy).await.unwrap().plan
    }

    /// A scheduled run: plan under `policy`, apply with the fixed checkpoint.
    pub(crate) async fn run(&self, policy: IncrementalPolicy, max_pages: Option<u64>) -> lake_gc::run::RunOutcome {
        let checkpoint = self.checkpoint();
        let request = RunRequest {
            plan: PlanSource::New,
            checkpoint: Some(&checkpoint),
            apply: ApplyOptions { page_size: 1, max_pages, ..ApplyOptions::default() },
            settings: PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() },
            incremental: policy,
            ..RunRequest::dry_run(Horizon::new(MIN_AGE))
        };
        self.gc().await.run(&request).await.unwrap()
    }

    pub(crate) async fn exists(&self, key: &str) -> bool {
        self.store.head(key).await.unwrap().is_some()
    }

    async fn states(&self) -> Vec<String> {
        self.store.list_all(STATE_PREFIX).await.unwrap().into_iter().map(|(k, _)| k).collect()
    }
}

pub(crate) fn keys(plan: &GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().map(|k| k.to_string()).collect()
}

pub(crate) fn mode(plan: &GcPlan) -> (PlanMode, String) {
    let record = plan.mode.as_ref().expect("a collector's plan records its mode");
    (record.mode, record.reason.clone().unwrap_or_default())
}

/// The first run is full (no state), its complete apply records a state, and the next run is
/// incremental from it and finds: new orphans, keys released since (a delete, a version retention
/// dropped), and nothing live.
#[tokio::test]
async fn a_complete_apply_records_a_state_and_the_next_run_is_incremental() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 5 * HOUR_MS;
    let kept = lake.upload_minted(t0).await;
    let released = lake.upload_minted(t0 + 1).await;
    let tagged = lake.upload_minted(t0 + 2).await;
    let orphan = lake.upload_minted(t0 + 3).await;
    lake.engine.append("t", &[kept.clone(), released.clone(), tagged.clone()]);
    lake.engine.delete("t", std::slice::from_ref(&tagged)); // version 1 still holds it
    let first = lake.run(IncrementalPolicy::default(), None).await;
    assert_eq!(mode(&first.plan).0, PlanMode::Full);
    assert!(mode(&first.plan).1.contains("no GC state"), "{:?}", first.plan.mode);
    assert_eq!(keys(&first.plan), BTreeSet::from([orphan.uri.clone()]));
    let state = first.apply.as_ref().unwrap().state.clone().expect("a complete apply records a state");
    assert_eq!(lake.states().await, vec![state]);

    // A day later: a new orphan, a release by a delete, a release by retention.
    lake.now += 24 * HOUR_MS;
    let new_orphan = lake.upload_minted(lake.now - 3 * HOUR_MS).await;
    lake.engine.delete("t", std::slice::from_ref(&released));
    lake.engine.cleanup("t", |_| false);
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    let full = lake.plan(&IncrementalPolicy::full()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    assert_eq!(incremental.mode.as_ref().unwrap().state.as_deref().map(str::len), Some(64));
    assert_eq!(keys(&incremental), BTreeSet::from([new_orphan.uri.clone(), released.uri.clone(), tagged.uri.clone()]));
    assert_eq!(keys(&incremental), keys(&full));
    // Deterministic: the same inputs give the same bytes.
    assert_eq!(
        incremental.canonical_bytes().unwrap(),
        lake.plan(&IncrementalPolicy::default()).await.canonical_bytes().unwrap()
    );
    let second = lake.run(IncrementalPolicy::default(), None).await;
    assert_eq!(mode(&second.plan).0, PlanMode::Incremental);
    assert!(lake.exists(&kept.uri).await && !lake.exists(&released.uri).await && !lake.exists(&new_orphan.uri).await);
    assert_eq!(lake.states().await.len(), 2);

    // `full_every` bounds the chain: a week after the last full plan, the run is full.
    lake.now += 8 * 24 * HOUR_MS;
    let (m, reason) = mode(&lake.plan(&IncrementalPolicy::default()).await);
    assert_eq!(m, PlanMode::Full);
    assert!(reason.contains("last full plan"), "{reason}");
}

/// A dry run writes no state; an apply interrupted before it finished writes none either, and the
/// next plan is full, saying there is no state.
#[tokio::test]
async fn dry_runs_and_unfinished_applies_record_no_state() {
    let mut lake = Lake::new().await;
    for i in 0..3 {
        lake.upload_minted(lake.now - 5 * HOUR_MS + i).await;
    }
    lake.plan(&IncrementalPolicy::default()).await;
    assert!(lake.states().await.is_empty());
    let stopped = lake.run(IncrementalPolicy::default(), Some(1)).await;
    assert!(!stopped.apply.as_ref().unwrap().checkpoint.complete);
    assert!(stopped.apply.unwrap().state.is_none());
    assert!(lake.states().await.is_empty());
    let (m, reason) = mode(&lake.plan(&IncrementalPolicy::default()).await);
    assert_eq!(m, PlanMode::Full);
    assert!(reason.contains("no GC state"), "{reason}");
}

/// A lake with one recorded state; returns its key.
async fn lake_with_state() -> (Lake, String) {
    let mut lake = Lake::new().await;
    let live = lake.upload_minted(lake.now - 5 * HOUR_MS).await;
    lake.upload_minted(lake.now - 5 * HOUR_MS + 1).await;
    lake.engine.append("t", &[live]);
    let done = lake.run(IncrementalPolicy::default(), None).await;
    let key = done.apply.unwrap().state.unwrap();
    lake.now += HOUR_MS;
    assert_eq!(mode(&lake.plan(&IncrementalPolicy::default()).await).0, PlanMode::Incremental);
    (lake, key)
}

async fn falls_back(lake: &Lake, expected: &str) {
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    let (m, reason) = mode(&plan);
    assert_eq!(m, PlanMode::Full);
    assert!(reason.contains(expected), "expected `{expected}` in: {reason}");
    assert_eq!(keys(&plan), keys(&lake.plan(&IncrementalPolicy::full()).await));
}

/// A listing that fails when read (an S3 Inventory report that must not be needed).
struct Unreadable;

impl lake_gc::inventory::ObjectInventory for Unreadable {
    fn list_from(
        &self,
        _after: Option<String>,
        _page_size: usize,
    ) -> futures::stream::BoxStream<'_, Result<lake_gc::inventory::InventoryPage, lake_gc::GcError>> {
        let failed = lake_gc::GcError::storage("the given inventory", "read although not needed");
        Box::pin(futures::stream::iter([Err(failed)]))
    }
}

/// With an inventory given (an S3 Inventory report), an incremental plan lists the keys minted
/// since its state with the store's own listing and does not read the inventory, whose age then
/// does not matter; a full plan reads it.
#[tokio::test]
async fn an_incremental_plan_does_not_read_a_given_inventory_and_a_full_plan_does() {
    let (mut lake, _) = lake_with_state().await;
    let orphan = lake.upload_minted(lake.now - 2 * HOUR_MS).await;
    let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
    let horizon = Horizon::new(MIN_AGE);
    let given = lake.gc().await.with_inventory(Box::new(Unreadable));
    let plan = given.plan_with(&horizon, &settings, &IncrementalPolicy::default()).await.unwrap().plan;
    assert_eq!(mode(&plan).0, PlanMode::Incremental, "{:?}", plan.mode);
    assert_eq!(keys(&plan), BTreeSet::from([orphan.uri.clone()]));
    assert_eq!(keys(&plan), keys(&lake.plan(&IncrementalPolicy::full()).await));
    let full = given.plan_with(&horizon, &settings, &IncrementalPolicy::full()).await.unwrap_err();
    assert!(full.to_string().contains("read although not needed"), "{full}");
}

/// A live key before the listed range replaced since the state by a symbolic link to an orphan
/// the plan would collect (deep in the live set: the look-ups go in batches of 4096), or whose
/// folder was: the incremental plan meets the link as a full plan does, names the problem and
/// has no candidate.
#[tokio::test]
async fn a_live_key_made_a_symbolic_link_since_the_state_is_met_by_incremental_plans() {
    for folder in [false, true] {
        let mut lake = Lake::new().await;
        let t0 = lake.now - 30 * HOUR_MS;
        let mut live = Vec::new();
        for i in 0..5000 {
            live.push(lake.upload_minted(t0 + i).await);
        }
        lake.engine.append("t", &live);
        let first = lake.run(IncrementalPolicy::default(), None).await;
        assert!(first.apply.unwrap().state.is_some());
        lake.now += HOUR_MS;
        let orphan = lake.upload_minted(lake.now - 2 * HOUR_MS).await;
        let path = |key: &str| lake.dir.path().join("lake").join(key);
        let linked = &live[4500].uri;
        let (from, to) = match folder {
            false => (path(linked), path(&orphan.uri)),
            true => {
                let parent = |key: &str| key.rsplit_once('/').unwrap().0.to_string();
                (path(&parent(linked)), path(&parent(&orphan.uri)))
            }
        };
        if folder {
            std::fs::remove_dir_all(&from).unwrap();
        } else {
            std::fs::remove_file(&from).unwrap();
        }
        std::os::unix::fs::symlink(&to, &from).unwrap();
        for policy in [IncrementalPolicy::default(), IncrementalPolicy::full()] {
            let plan = lake.plan(&policy).await;
            assert_eq!(mode(&plan).0 == PlanMode::Full, policy.full, "{:?}", plan.mode);
            assert!(!plan.lineage_complete, "folder {folder}, {:?}", plan.mode);
            assert!(
                plan.problems.iter().any(|p| p.kind == lake_gc::plan::PlanProblem::LINKED_REFERENCE),
                "folder {folder}: {:?}",
                plan.problems
            );
            assert!(keys(&plan).is_empty(), "folder {folder}: {:?}", keys(&plan));
        }
    }
}

#[tokio::test]
async fn a_corrupt_or_edited_state_is_not_used() {
    let (lake, key) = lake_with_state().await;
    let bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    // Edited: another cutoff, its seal kept.
    let text = String::from_utf8(bytes.clone()).unwrap();
    let edited = text.replacen("\"held_overflow\":false", "\"held_overflow\":true", 1);
    assert_ne!(edited, text);
    lake.store.put(&key, edited.into_bytes()).await.unwrap();
    falls_back(&lake, "edited").await;
    lake.store.put(&key, b"{not json".to_vec()).await.unwrap();
    falls_back(&lake, "corrupt").await;
    // Renamed: a state under another state's name.
    lake.store.put(&key, bytes.clone()).await.unwrap();
    let later = key.replace("state/1", "state/2");
    assert_ne!(later, key);
    lake.store.put(&later, bytes).await.unwrap();
    falls_back(&lake, "renamed").await;
    lake.store.delete(&later).await.unwrap();
    // A stray file beside the states.
    lake.store.put(&format!("{STATE_PREFIX}/notes.txt"), b"x".to_vec()).await.unwrap();
    falls_back(&lake, "is not a GC state").await;
}

#[tokio::test]
async fn a_state_of_another_lake_is_not_used() {
    let (lake, key) = lake_with_state().await;
    let (other, _) = lake_with_state().await;
    let bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    let theirs = other.states().await;
    for k in theirs {
        other.store.delete(&k).await.unwrap();
    }
    other.store.put(&key, bytes).await.unwrap();
    falls_back(&other, "of lake").await;
}

#[tokio::test]
async fn a_state_from_the_future_is_not_used() {
    let (mut lake, _) = lake_with_state().await;
    lake.now -= 3 * HOUR_MS; // the store's now before the state's cutoff
    falls_back(&lake, "from the future").await;
}

#[tokio::test]
async fn a_state_whose_journal_positions_are_gone_is_not_used() {
    let (lake, _) = lake_with_state().await;
    // Version 1's journal entry rewritten (restored from elsewhere): the position is gone.
    lake.engine.write_sidecar("t", 1);
    falls_back(&lake, "journal positions").await;
}

#[tokio::test]
async fn a_state_of_a_lineage_no_longer_there_is_not_used() {
    let (lake, _) = lake_with_state().await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(lake.store.clone(), &engine).await.unwrap().with_unchecked_clock(lake.clock());
    let plan =
        gc.plan_with(&Horizon::new(MIN_AGE), &PlanSettings::default(), &IncrementalPolicy::default()).await.unwrap();
    let (m, reason) = mode(&plan.plan);
    assert_eq!(m, PlanMode::Full);
    assert!(reason.contains("no longer registered"), "{reason}");
}

/// The daily workflow: write, delete rows, `cleanup` (which writes a reference checkpoint: the
/// replay's base moves past the versions the state retained), GC applied; then more deletes and
/// another cleanup: the next plan is incremental (the keys released are read from the entries
/// of the versions since the state, those cleanup removed included) and equals the full plan.
#[tokio::test]
async fn plans_after_a_cleanup_are_incremental_and_equal_to_full_plans() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 5 * HOUR_MS;
    let objects: Vec<ObjectIdentity> = {
        let mut v = Vec::new();
        for i in 0..6 {
            v.push(lake.upload_minted(t0 + i).await);
        }
        v
    };
    lake.engine.append("t", &objects[..3]);
    lake.engine.append("t", &objects[3..]);
    lake.engine.delete("t", &objects[..1]);
    lake.engine.cleanup("t", |_| false);
    let first = lake.run(IncrementalPolicy::default(), None).await;
    assert_eq!(keys(&first.plan), BTreeSet::from([objects[0].uri.clone()]));
    assert!(first.apply.unwrap().state.is_some());

    // A day later: more deletes (one of them while a version still holds the key), cleanups.
    lake.now += 24 * HOUR_MS;
    lake.engine.delete("t", &objects[1..3]);
    lake.engine.cleanup("t", |_| false);
    lake.engine.delete("t", &objects[3..4]);
    let shared = lake.upload_minted(lake.now - 2 * HOUR_MS).await; // a new orphan
    lake.engine.append("u", std::slice::from_ref(&objects[4]));
    lake.engine.delete("t", &objects[4..5]); // still referenced by `u`
    lake.engine.cleanup("t", |_| false);
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    let full = lake.plan(&IncrementalPolicy::full()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    let expected: BTreeSet<String> =
        [&objects[1], &objects[2], &objects[3], &shared].iter().map(|o| o.uri.clone()).collect();
    assert_eq!(keys(&incremental), expected);
    assert_eq!(keys(&incremental), keys(&full));
    let second = lake.run(IncrementalPolicy::default(), None).await;
    assert_eq!(mode(&second.plan).0, PlanMode::Incremental);
    assert!(second.apply.unwrap().state.is_some());
    assert!(lake.exists(&objects[4].uri).await && lake.exists(&objects[5].uri).await);

    // Again, a day later: a cleanup with nothing deleted, then a delete: incremental, equal.
    lake.now += 24 * HOUR_MS;
    lake.engine.cleanup("t", |_| false);
    lake.engine.delete("u", &objects[4..5]);
    lake.engine.cleanup("u", |_| false);
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    assert_eq!(keys(&incremental), BTreeSet::from([objects[4].uri.clone()]));
    assert_eq!(keys(&incremental), keys(&lake.plan(&IncrementalPolicy::full()).await));
}

/// A branch created since the state is a lineage new since: the keys it released are those its
/// entries after its first (the snapshot of its source's version) remove. A key the branch
/// copied and then deleted, that its source deleted too, is found; the plan is incremental and
/// equals the full plan. A branch deleted since the state (a lineage the state records gone)
/// makes the plan full and says so.
#[tokio::test]
async fn a_branch_created_since_the_state_keeps_plans_incremental() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 5 * HOUR_MS;
    let a = lake.upload_minted(t0).await;
    let b = lake.upload_minted(t0 + 1).await;
    let c = lake.upload_minted(t0 + 2).await;
    lake.engine.append("t", &[a.clone(), b.clone(), c.clone()]);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());

    lake.now += 24 * HOUR_MS;
    let first = lake.engine.branch("t", "t@b").unwrap();
    assert_eq!(first, 1, "the branch starts at its source's version");
    lake.engine.delete("t", &[a.clone(), b.clone()]);
    lake.engine.cleanup("t", |_| false);
    lake.engine.delete("t@b", std::slice::from_ref(&a));
    let d = lake.upload_minted(lake.now - 2 * HOUR_MS).await;
    lake.engine.append("t@b", std::slice::from_ref(&d));
    lake.engine.delete("t@b", std::slice::from_ref(&d));
    lake.engine.cleanup("t@b", |_| false);
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental, "{:?}", incremental.mode);
    // `b` is still referenced by the branch's first version? No: cleaned up; by its latest: yes.
    assert_eq!(keys(&incremental), BTreeSet::from([a.uri.clone(), d.uri.clone()]));
    assert_eq!(keys(&incremental), keys(&lake.plan(&IncrementalPolicy::full()).await));
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());

    // The branch deleted since the state recorded it: a full plan, and why.
    lake.now += HOUR_MS;
    lake.engine.drop_table("t@b");
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    let (m, reason) = mode(&plan);
    assert_eq!(m, PlanMode::Full);
    assert!(reason.contains("`t@b` it records is no longer registered"), "{reason}");
    assert!(keys(&plan).contains(&b.uri), "only the deleted branch referenced `b`: {:?}", keys(&plan));
}

/// An entry since the state that is a snapshot (an overwrite) lists what its version references,
/// not what it removed. Without a cleanup since, the lineage's journal is replayed again from
/// the oldest version the state retained (incremental, equal to the full plan); after a cleanup
/// moved the replay's base past it, the plan is full and its reason names the snapshot. An entry
/// since the state that cannot be decoded makes the plan full and is named too.
#[tokio::test]
async fn a_snapshot_or_an_unreadable_entry_since_the_state_is_named() {
    let mut lake = Lake::new().await;
    let t0 = lake.now - 5 * HOUR_MS;
    let a = lake.upload_minted(t0).await;
    let b = lake.upload_minted(t0 + 1).await;
    lake.engine.append("t", &[a.clone(), b.clone()]);
    assert!(lake.run(IncrementalPolicy::default(), None).await.apply.unwrap().state.is_some());

    lake.now += 24 * HOUR_MS;
    let overwrite = lake.engine.overwrite("t", std::slice::from_ref(&b));
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&plan).0, PlanMode::Incremental, "no cleanup since: {:?}", plan.mode);
    assert!(keys(&plan).is_empty(), "version 1 still holds `a`: {:?}", keys(&plan));
    // Version 1 retained by a tag: the overwrite released `a` from the latest version only.
    lake.engine.cleanup("t", |v| v == 1);
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&plan).0, PlanMode::Incremental, "no checkpoint past version 1: {:?}", plan.mode);
    assert!(keys(&plan).is_empty(), "{:?}", keys(&plan));

    lake.engine.cleanup("t", |_| false);
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    let (m, reason) = mode(&plan);
    assert_eq!(m, PlanMode::Full, "{reason}");
    assert!(reason.contains(&format!("journal entry of version {overwrite} is a snapshot")), "{reason}");
    assert!(reason.contains(&format!("what version {} referenced", overwrite - 1)), "{reason}");
    assert!(reason.contains("reference checkpoint"), "{reason}");
    assert_eq!(keys(&plan), BTreeSet::from([a.uri.clone()]));

    // A later state; then an entry since it, of a version cleanup removed, corrupted.
    assert!(lake.run(IncrementalPolicy::full(), None).await.apply.unwrap().state.is_some());
    lake.now += HOUR_MS;
    let gone = lake.engine.delete("t", std::slice::from_ref(&b));
    lake.engine.append("t", std::slice::from_ref(&b));
    lake.engine.cleanup("t", |_| false);
    lake.engine.corrupt_sidecar("t", gone, lake_common::DecodeError::CorruptJson("truncated".into()));
    let plan = lake.plan(&IncrementalPolicy::default()).await;
    let (m, reason) = mode(&plan);
    assert_eq!(m, PlanMode::Full, "{reason}");
    assert!(reason.contains(&format!("journal entry of version {gone} cannot be read")), "{reason}");
    assert!(plan.lineage_complete, "the lineage itself reads from its checkpoint: {:?}", plan.problems);
}

/// One step of a random history.
#[derive(Debug, Clone)]
enum Step {
    /// An upload minted now (minus `back` minutes, within the margin).
    Upload { back: u64 },
    /// An upload minted `hours` ago that lands only now: it outlived the margin when `hours`
    /// passes the state's cutoff minus the margin.
    LateUpload { hours: u64 },
    /// A write of table `table` referencing the `pick`-th existing object `n` times.
    Reference { table: u8, pick: usize, n: u8 },
    /// A delete of one reference to the `pick`-th referenced object.
    Unreference { table: u8, pick: usize },
    /// An overwrite of `table` (a snapshot entry) with one reference to the `pick`-th object.
    Overwrite { table: u8, pick: usize },
    /// Version cleanup of `table`, keeping versions whose number is a multiple of `keep`
    /// (writes a reference checkpoint when versions went: the replay's base moves).
    Cleanup { table: u8, keep: u64 },
    /// Branch `t0@b` of `t0` created (table 2 of the other steps), or deleted when it exists
    /// and `delete`.
    Branch { delete: bool },
    /// A write intent naming the `pick`-th object, or the removal of the oldest intent.
    Intent { pick: usize, remove: bool },
    /// Time passes.
    Wait { hours: u64 },
    /// A GC run, incremental when the state allows or full, applied or not.
    Gc { full: bool, apply: bool },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..50).prop_map(|back| Step::Upload { back }),
        1 => (1u64..30).prop_map(|hours| Step::LateUpload { hours }),
        3 => (0u8..3, any::<usize>(), 1u8..3).prop_map(|(table, pick, n)| Step::Reference { table, pick, n }),
        3 => (0u8..3, any::<usize>()).prop_map(|(table, pick)| Step::Unreference { table, pick }),
        1 => (0u8..3, any::<usize>()).prop_map(|(table, pick)| Step::Overwrite { table, pick }),
        4 => (0u8..3, 2u64..6).prop_map(|(table, keep)| Step::Cleanup { table, keep }),
        1 => (0u8..4).prop_map(|d| Step::Branch { delete: d == 0 }),
        1 => (any::<usize>(), any::<bool>()).prop_map(|(pick, remove)| Step::Intent { pick, remove }),
        2 => (1u64..6).prop_map(|hours| Step::Wait { hours }),
        4 => (any::<bool>(), 0u8..3).prop_map(|(full, apply)| Step::Gc { full, apply: apply > 0 }),
    ]
}

/// The table of index `table` (2: the branch `t0@b`, `None` while it does not exist).
fn table_name(lake: &Lake, table: u8) -> Option<String> {
    match table {
        2 => lake.engine.lineage_exists("t0@b").then(|| "t0@b".to_string()),
        n => Some(format!("t{n}")),
    }
}

/// What a random history's GC steps came to.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    /// GC steps with a state recorded before a cleanup that removed versions (the replay's base
    /// moved since the state).
    after_cleanup: u64,
    /// Of those, the steps whose plan was incremental.
    incremental_after_cleanup: u64,
    /// GC steps with a state recorded before a branch was created.
    after_branch: u64,
    /// Of those, the steps whose plan was incremental.
    incremental_after_branch: u64,
}

/// The objects of `objects` that still exist (a writer references what it uploaded).
async fn present(lake: &Lake, objects: &[ObjectIdentity]) -> Vec<ObjectIdentity> {
    let mut v = Vec::new();
    for o in objects {
        if lake.exists(&o.uri).await {
            v.push(o.clone());
        }
    }
    v
}

/// Runs one random history, checking after every step that nothing a retained version or an
/// intent references is missing, and at every GC step that the incremental plan is a subset of
/// the full plan at the same cutoff, equal unless an upload outlived the margin since the last
/// full apply. Returns how many GC steps after a cleanup (or a branch) since the state were
/// incremental.
async fn history(steps: Vec<Step>) -> Counts {
    let mut counts = Counts::default();
    // Since the latest recorded state: a cleanup removed versions, a branch was created.
    let (mut cleaned, mut branched) = (false, false);
    // The overwrites (lineage, version: snapshot entries); the branch deleted since the state.
    let mut snapshots: Vec<(String, u64)> = Vec::new();
    let mut dropped = false;
    let mut lake = Lake::new().await;
    let mut objects: Vec<ObjectIdentity> = Vec::new();
    let mut referenced: Vec<(String, ObjectIdentity)> = Vec::new();
    let mut intents: Vec<(String, ObjectIdentity)> = Vec::new();
    // The cutoff of the latest recorded state, and whether an incremental plan may miss a key
    // since the last full apply (an upload that outlived the margin, an intent that never landed).
    let mut state_cutoff: Option<u64> = None;
    let mut outlived = false;
    let margin = IncrementalPolicy::default().margin.as_millis() as u64;
    for step in steps {
        match step {
            Step::Upload { back } => objects.push(lake.upload_minted(lake.now - back * 60_000).await),
            Step::LateUpload { hours } => {
                let at = lake.now - hours * HOUR_MS;
                outlived |= state_cutoff.is_some_and(|c| at < c.saturating_sub(margin));
                objects.push(lake.upload_minted(at).await);
            }
            Step::Reference { table, pick, n } => {
                // Only objects that exist are referenced (a writer references what it uploaded).
                let present = present(&lake, &objects).await;
                if let (Some(o), Some(t)) = (present.get(pick % present.len().max(1)), table_name(&lake, table)) {
                    lake.engine.append(&t, &vec![o.clone(); usize::from(n)]);
                    for _ in 0..n {
                        referenced.push((t.clone(), o.clone()));
                    }
                }
            }
            Step::Unreference { table, pick } => {
                let Some(t) = table_name(&lake, table) else { continue };
                let of_table: Vec<usize> =
                    referenced.iter().enumerate().filter(|(_, (rt, _))| *rt == t).map(|(i, _)| i).collect();
                if let Some(&i) = of_table.get(pick % of_table.len().max(1)) {
                    let (_, o) = referenced.remove(i);
                    lake.engine.delete(&t, &[o]);
                }
            }
            Step::Overwrite { table, pick } => {
                let present = present(&lake, &objects).await;
                if let (Some(o), Some(t)) = (present.get(pick % present.len().max(1)), table_name(&lake, table)) {
                    snapshots.push((t.clone(), lake.engine.overwrite(&t, std::slice::from_ref(o))));
                    referenced.retain(|(rt, _)| *rt != t);
                    referenced.push((t, o.clone()));
                }
            }
            Step::Cleanup { table, keep } => {
                let Some(t) = table_name(&lake, table) else { continue };
                let before = lake.engine.retained_versions(&t);
                lake.engine.cleanup(&t, |v| v % keep == 0);
                cleaned |= lake.engine.retained_versions(&t) != before;
            }
            Step::Branch { delete } => {
                if !lake.engine.lineage_exists("t0@b") {
                    if lake.engine.branch("t0", "t0@b").is_some() {
                        let copied: Vec<_> = referenced
                            .iter()
                            .filter(|(t, _)| t == "t0")
                            .map(|(_, o)| ("t0@b".to_string(), o.clone()))
                            .collect();
                        referenced.extend(copied);
                        branched = true;
                    }
                } else if delete {
                    lake.engine.drop_table("t0@b");
                    snapshots.retain(|(t, _)| t != "t0@b");
                    dropped = true;
                    referenced.retain(|(t, _)| t != "t0@b");
                }
            }
            Step::Intent { pick, remove } => {
                if remove && !intents.is_empty() {
                    let (key, o) = intents.remove(0);
                    lake.engine.remove_intent(&key);
                    // Kept only by an intent that never landed: an incremental plan misses it
                    // when it was minted before the listed range (a full plan collects it).
                    let minted = lake_store::keys::minted_at(&o.uri).unwrap().timestamp_millis() as u64;
                    outlived |= state_cutoff.is_some_and(|c| minted < c.saturating_sub(margin));
                } else if let Some(o) = objects.get(pick % objects.len().max(1)) {
                    if lake.exists(&o.uri).await {
                        intents.push((lake.engine.add_intent("t0", vec![o.clone()]), o.clone()));
                    }
                }
            }
            Step::Wait { hours } => lake.now += hours * HOUR_MS,
            Step::Gc { full, apply } => {
                lake.now += 1000; // a run takes time: each one's cutoff is its own
                let incremental = lake.plan(&IncrementalPolicy::default()).await;
                let whole = lake.plan(&IncrementalPolicy::full()).await;
                let (m, reason) = mode(&incremental);
                let was_incremental = m == PlanMode::Incremental;
                // With a state, only these make a plan full: a snapshot entry since the state
                // (an overwrite) once a cleanup moved the replay's base past it, a lineage the
                // state records deleted (the branch), or the last full plan a week old.
                if state_cutoff.is_some() && !was_incremental {
                    let snapshot = snapshots
                        .iter()
                        .any(|(t, v)| reason.contains(&format!("`{t}`'s journal entry of version {v} is a snapshot")));
                    let expected = (snapshot && reason.contains("reference checkpoint"))
                        || (dropped
                            && (reason.contains("`t0@b` it records is no longer registered")
                                || reason.contains("journal positions")))
                        || reason.contains("the last full plan");
                    assert!(expected, "a full plan for an unexpected reason: {reason}");
                }
                if state_cutoff.is_some() && cleaned {
                    counts.after_cleanup += 1;
                    counts.incremental_after_cleanup += u64::from(was_incremental);
                }
                if state_cutoff.is_some() && branched {
                    counts.after_branch += 1;
                    counts.incremental_after_branch += u64::from(was_incremental);
                }
                assert_eq!(incremental.cutoff, whole.cutoff);
                let (inc, all) = (keys(&incremental), keys(&whole));
                assert!(inc.is_subset(&all), "incremental {inc:?} is not a subset of full {all:?}");
                if !outlived {
                    assert_eq!(inc, all, "no upload outlived the margin: {:?}", incremental.mode);
                }
                if apply {
                    let policy = if full { IncrementalPolicy::full() } else { IncrementalPolicy::default() };
                    let done = lake.run(policy, None).await;
                    let report = done.apply.unwrap();
                    if report.state.is_some() {
                        state_cutoff = Some(done.plan.cutoff.timestamp_millis() as u64);
                        (cleaned, branched, dropped) = (false, false, false);
                        if done.plan.mode.as_ref().is_some_and(|m| m.mode == PlanMode::Full) {
                            outlived = false;
                        }
                    }
                }
            }
        }
        // Nothing a retained version or an intent references is missing.
        for identity in lake.engine.true_live_set().iter().chain(intents.iter().map(|(_, o)| o)) {
            assert!(lake.exists(&identity.uri).await, "{} is referenced but missing", identity.uri);
        }
    }
    counts
}

/// 160 random histories; besides each one's checks (among them: with a state, a plan is full
/// only for a snapshot entry (an overwrite) after the oldest version the state retained once a
/// cleanup moved the replay's base past that version, a lineage the state records deleted, or
/// a last full plan a week old), at least half of the GC
/// steps after a cleanup since the state (the replay's base moved) and after a branch created
/// since plan incrementally (the rest: overwrites among them).
#[test]
fn incremental_plans_are_subsets_of_full_plans_on_random_histories() {
    use proptest::test_runner::{Config, TestRunner};
    let total = std::sync::Mutex::new(Counts::default());
    let mut runner = TestRunner::new(Config { cases: 160, ..Config::default() });
    runner
        .run(&proptest::collection::vec(step(), 1..60), |steps| {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let c = runtime.block_on(history(steps));
            let mut t = total.lock().unwrap();
            t.after_cleanup += c.after_cleanup;
            t.incremental_after_cleanup += c.incremental_after_cleanup;
            t.after_branch += c.after_branch;
            t.incremental_after_branch += c.incremental_after_branch;
            Ok(())
        })
        .unwrap();
    let t = *total.lock().unwrap();
    eprintln!("{t:?}");
    assert!(t.after_cleanup >= 20, "too few GC steps after a cleanup to judge: {t:?}");
    assert!(
        t.incremental_after_cleanup * 2 >= t.after_cleanup,
        "most GC steps after a cleanup since the state must be incremental: {t:?}"
    );
    assert!(t.after_branch >= 5, "too few GC steps after a branch to judge: {t:?}");
    assert!(
        t.incremental_after_branch * 2 >= t.after_branch,
        "most GC steps after a branch created since the state must be incremental: {t:?}"
    );
}

/// A sharded plan with a usable GC state is one incremental shard over every key
/// (`ShardSpec::incremental`): a worker plans it as `plan_with` does (also from the spec read
/// back from JSON, as a Ray task gets it), in one process or from the spec, with the whole
/// incremental plan's candidates; its complete apply records a GC state the next run starts
/// from. Asked for in full, the plan has several shards whose union is the full plan, and a
/// spec edited to be incremental over several ranges is refused.
#[tokio::test]
async fn a_sharded_plan_with_a_state_is_one_incremental_shard_whose_apply_records_a_state() {
    use lake_gc::key_range::KeyRange;
    use lake_gc::shards::ShardSpec;
    let (mut lake, _) = lake_with_state().await;
    let live = lake.upload_minted(lake.now - 3 * HOUR_MS).await;
    let orphan = lake.upload_minted(lake.now - 2 * HOUR_MS).await;
    lake.engine.append("t", std::slice::from_ref(&live));
    let horizon = Horizon::new(MIN_AGE);
    let settings = PlanSettings { inventory_page_size: 3, memory_budget: 256, ..PlanSettings::default() };
    let incremental = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&incremental).0, PlanMode::Incremental);
    assert!(keys(&incremental).contains(&orphan.uri) && !keys(&incremental).contains(&live.uri));

    let gc = lake.gc().await;
    let spec = gc.shard_ranges_with(&horizon, 4, &IncrementalPolicy::default()).await.unwrap();
    assert_eq!(spec.ranges, vec![KeyRange::all()]);
    assert!(spec.incremental.is_some());
    let spec: ShardSpec = serde_json::from_str(&serde_json::to_string(&spec).unwrap()).unwrap();
    let shard = gc.plan_shard(&horizon, &settings, &spec, 0).await.unwrap().plan;
    assert_eq!(mode(&shard).0, PlanMode::Incremental);
    assert_eq!(keys(&shard), keys(&incremental));
    let sharded = gc.plan_sharded_with(&horizon, &settings, 4, &IncrementalPolicy::default()).await.unwrap().plan;
    assert_eq!(sharded.manifest.count, 1);
    assert_eq!(keys(&sharded.plans[0]), keys(&incremental));

    let full = gc.plan_sharded_with(&horizon, &settings, 4, &IncrementalPolicy::full()).await.unwrap().plan;
    assert!(full.manifest.count > 1, "{:?}", full.manifest);
    let union: BTreeSet<String> = full.plans.iter().flat_map(keys).collect();
    assert_eq!(union, keys(&lake.plan(&IncrementalPolicy::full()).await));
    assert!(keys(&incremental).is_subset(&union));
    let full_spec = gc.shard_ranges_with(&horizon, 4, &IncrementalPolicy::full()).await.unwrap();
    assert!(full_spec.incremental.is_none() && full_spec.ranges.len() > 1);
    let edited = ShardSpec { incremental: spec.incremental, ..full_spec };
    let refused = gc.plan_shard(&horizon, &settings, &edited, 0).await.unwrap_err();
    assert!(refused.to_string().contains("one shard over every key"), "{refused}");

    let states = lake.states().await.len();
    let options = ApplyOptions { page_size: 1, ..ApplyOptions::default() };
    let checkpoint = lake.checkpoint();
    let report = gc.apply_shard(&sharded.manifest, &sharded.plans[0], &horizon, &checkpoint, &options).await.unwrap();
    assert!(report.checkpoint.complete);
    assert!(report.state.is_some(), "the one shard over every key records a state");
    assert_eq!(lake.states().await.len(), states + 1);
    assert!(!lake.exists(&orphan.uri).await && lake.exists(&live.uri).await);
    drop(gc);
    lake.now += HOUR_MS;
    let next = lake.plan(&IncrementalPolicy::default()).await;
    assert_eq!(mode(&next).0, PlanMode::Incremental);
    assert_eq!(keys(&next), keys(&lake.plan(&IncrementalPolicy::full()).await));
}
