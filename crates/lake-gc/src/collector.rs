//! [`GarbageCollector`]: the one entry to garbage collection, whoever calls it (the CLI, tests,
//! a Python binding, a Ray task). Every rule that keeps a live object alive and depends on the
//! caller's input is enforced here, so no caller can plan or delete with a horizon the lake's
//! policy refuses:
//! - the horizon (`min_age`) is at least 1 s and not below the lake's policy floor unless the
//!   caller says so explicitly ([`Horizon::allow_below_policy`], like Delta's retention check);
//! - the cutoff is read from the store's clock ([`StoreClock`]: a probe object's
//!   `last_modified`), minus `min_age`; a host clock that differs from the store's by more than
//!   [`Horizon::max_clock_skew`] refuses the run; a cutoff the caller asks for may only be
//!   earlier;
//! - a plan is applied, and a checkpoint resumed, only for the lake it was made for, with the
//!   same `min_age`, a cutoff no later than the store's clock allows now, and a checkpoint
//!   location outside the lake root. The checkpoint binds its plan by digest
//!   ([`crate::checkpoint`]); apply revalidates every key ([`crate::apply`]);
//! - a plan given with a checkpoint that records another plan is never silently ignored: it
//!   replaces a finished apply, and an unfinished one refuses it naming both plans
//!   ([`GarbageCollector::apply`]);
//! - a sharded plan ([`crate::shards`]) has one cutoff, fixed by the coordinator
//!   ([`GarbageCollector::shard_ranges`]) under the rules above and checked again by every
//!   worker ([`GarbageCollector::plan_shard`]); a shard is applied only with a manifest it is
//!   bound to, whose every shard is complete ([`GarbageCollector::apply_shard`]), and never as
//!   a whole plan.
//!
//! Time is the store's, through the [`StoreClock`] trait: tests of age gates inject a fixed
//! clock with [`GarbageCollector::with_unchecked_clock`], a name that says what it does, rather
//! than sleeping. No CLI flag reaches it.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use lake_gc::apply::ApplyOptions;
//! use lake_gc::checkpoint::CheckpointLocation;
//! use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
//! use lake_store::descriptor::LakeDescriptor;
//! use lake_store::writer::ManagedObjectWriter;
//! use lake_store::LakeStore;
//! use std::time::Duration;
//!
//! // A local lake whose GC policy floor is 1 s, and an object nothing references.
//! let dir = tempfile::tempdir()?;
//! let store = LakeStore::open(dir.path().join("lake").to_str().ok_or("path")?)?;
//! LakeDescriptor::create(&store, Duration::from_secs(1)).await?;
//! let orphan = ManagedObjectWriter::new(store.clone()).upload("orphan.bin", &b"unreferenced"[..]).await?;
//! tokio::time::sleep(Duration::from_millis(2100)).await;
//!
//! // The tables' engine: here the in-memory test double (a lake of Lance tables passes
//! // `lake_lance::LanceEngine`).
//! let engine = lake_engine::memory::MemoryEngine::new();
//! let gc = GarbageCollector::open(store, &engine).await?;
//! let horizon = Horizon::new(Duration::from_secs(1));
//! let planned = gc.plan(&horizon, &PlanSettings::default()).await?;
//! assert_eq!(planned.plan.candidates.keys()?, vec![orphan.key.clone()]);
//!
//! // Apply with a checkpoint outside the lake: deletes page by page, resumable.
//! let checkpoint = CheckpointLocation::parse(dir.path().join("gc.ckpt").to_str().ok_or("path")?)?;
//! let report = gc.apply(&planned.plan, &horizon, &checkpoint, &ApplyOptions::default()).await?;
//! assert!(report.checkpoint.complete && report.checkpoint.deleted == 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! Size: about 640 lines, 60 of them this documentation and its example; every entry (plan, apply,
//! resume, and their sharded forms) enforces the rules above through the same checks, kept in one
//! file so that a reader can see that none skips one.

use crate::apply::{apply_loaded, ApplyOptions, ApplyReport};
use crate::checkpoint::{ApplyCheckpoint, CheckpointLocation, LoadedCheckpoint};
use crate::cutoff::{check_horizon, gc_cutoff};
use crate::deleter::ObjectDeleter;
use crate::error::GcError;
use crate::inventory::parallel::{buffered_pages, ParallelInventory};
use crate::inventory::ObjectInventory;
use crate::key_range::KeyRange;
use crate::plan::{GcPlan, PlanMode, PlanModeRecord, PlanProblem, PlanShard};
use crate::plan_time::PlanTime;
use crate::planner::{format_time, plan, plan_incremental, plan_ranges, PlanOptions, PlanStats, Planning};
use crate::shards::{check_count, ShardIncremental, ShardManifest, ShardSpec, ShardedPlan};
use crate::state::{choose, lineage_fallback, Choice, Chooser, GcState, IncrementalPolicy};
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_engine::Engine;
use lake_store::clock::{ClockReading, ProbeClock, StoreClock};
use lake_store::descriptor::LakeDescriptor;
use lake_store::store::LakeStore;
use lake_store::StoreError;
use std::time::Duration;

/// The default bound on the difference between this host's clock and the store's.
pub const DEFAULT_MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

/// How old an object must be to be collected, and the checks around it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Horizon {
    /// Objects younger than this by the store's clock are never candidates (at least 1 s).
    pub min_age: Duration,
    /// Accept a `min_age` below the lake's policy floor (only when no writer can still publish
    /// objects that old).
    pub allow_below_policy: bool,
    /// Largest accepted difference between this host's clock and the store's (default 5 min).
    pub max_clock_skew: Duration,
    /// A cutoff earlier than the store's now minus `min_age` (never later: refused).
    pub earlier_cutoff: Option<DateTime<Utc>>,
}

impl Horizon {
    /// A horizon of `min_age`, within the policy floor, with the default skew bound.
    pub fn new(min_age: Duration) -> Self {
        Self { min_age, allow_below_policy: false, max_clock_skew: DEFAULT_MAX_CLOCK_SKEW, earlier_cutoff: None }
    }
}

/// The default number of listing streams ([`PlanSettings::list_streams`]).
pub const DEFAULT_LIST_STREAMS: usize = 8;

/// How planning reads the lake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSettings {
    /// Objects per listing request (1 to 1000 on S3).
    pub inventory_page_size: usize,
    /// Bytes of live keys, and of candidates, held in memory before they spill to sorted runs in
    /// the temporary folder.
    pub memory_budget: usize,
    /// Listing requests in flight on an S3 root: the managed prefix is listed as ranges of mint
    /// time, concurrently, in key order ([`crate::inventory::parallel`]); 1 lists it with one
    /// request at a time. The plan is the same whatever the number. A local root is always
    /// listed by one walk (the module documents why), and an inventory given to
    /// [`GarbageCollector::with_inventory`] is read as it is. Default [`DEFAULT_LIST_STREAMS`].
    pub list_streams: usize,
}

impl Default for PlanSettings {
    /// 1000 keys a listing request, half of the default memory budget, 8 listing streams.
    fn default() -> Self {
        Self {
            inventory_page_size: 1000,
            memory_budget: lake_engine::budget::share(lake_engine::budget::DEFAULT_MEMORY_BUDGET).1,
            list_streams: DEFAULT_LIST_STREAMS,
        }
    }
}

/// A plan and how it was made.
#[derive(Debug)]
pub struct Planned {
    /// The plan.
    pub plan: GcPlan,
    /// Planning counters.
    pub stats: PlanStats,
    /// The clock reading the cutoff came from.
    pub clock: ClockReading,
}

/// A sharded plan made by one process ([`GarbageCollector::plan_sharded`]) and how.
#[derive(Debug)]
pub struct PlannedShards {
    /// The manifest and the shards' plans.
    pub plan: ShardedPlan,
    /// Planning counters of the one lineage read and listing.
    pub stats: PlanStats,
    /// The clock reading the cutoff came from.
    pub clock: ClockReading,
}

/// Entries per page of the listing that finds the first managed key (the start of the shards'
/// time ranges).
const FIRST_KEY_PAGE: usize = 100;
/// Entries that listing reads at most before it gives up finding a managed key (then the plan
/// has one shard).
const FIRST_KEY_SCAN: usize = 1000;

/// Garbage collection of one lake (see the module documentation).
pub struct GarbageCollector<'e> {
    store: LakeStore,
    engine: &'e dyn Engine,
    policy: LakeDescriptor,
    clock: Box<dyn StoreClock>,
    inventory: Box<dyn ObjectInventory>,
    /// True once [`GarbageCollector::with_inventory`] replaced the store's own listing: a given
    /// inventory (an S3 Inventory report, say) is read as it is, never split into streams, and
    /// only by full plans.
    given_inventory: bool,
    /// The store's own listing, which incremental plans read (a given inventory covers every
    /// key, where an incremental plan lists only those minted since its state).
    own_inventory: Box<dyn ObjectInventory>,
    deleter: Box<dyn ObjectDeleter + 'e>,
}

impl std::fmt::Debug for GarbageCollector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GarbageCollector").field("root", &self.store.root().to_string()).finish()
    }
}

impl<'e> GarbageCollector<'e> {
    /// The collector of the lake in `store`, whose tables `engine` reads: the store's inventory
    /// and deleter, the store's clock.
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) when `engine` is bound to another lake; [`StoreError::NotALake`](lake_store::StoreError::NotALake)
    /// without a lake descriptor; storage errors.
    pub async fn open(store: LakeStore, engine: &'e dyn Engine) -> Result<Self, GcError> {
        if let Some(engine_root) = engine.lake_root() {
            if engine_root != store.root().to_string() {
                return Err(GcError::from(StoreError::Root {
                    root: store.display_root(),
                    message: format!(
                        "the engine reads the tables of another lake ({engine_root}); open the engine on the same store as the collector"
                    ),
                }));
            }
        }
        let policy = LakeDescriptor::load(&store).await?;
        Ok(Self {
            inventory: crate::inventory::for_store(&store),
            given_inventory: false,
            own_inventory: crate::inventory::for_store(&store),
            deleter: crate::deleter::for_store(&store),
            clock: Box::new(ProbeClock),
            policy,
            engine,
            store,
        })
    }

    /// The same collector judging age by `clock` instead of the store's probe.
    ///
    /// **Unsafe for production**: a clock ahead of the store's makes young objects candidates,
    /// and a writer may still publish them. For tests of age gates, which then need not sleep.
    pub fn with_unchecked_clock(mut self, clock: impl StoreClock + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// The same collector listing with `inventory` (another listing of the same store, such as
    /// an S3 Inventory report) for its full plans. An incremental plan lists only the keys
    /// minted since its GC state, with the store's own listing: it does not read `inventory`
    /// ([`GarbageCollector::plan_with`]).
    pub fn with_inventory(mut self, inventory: Box<dyn ObjectInventory>) -> Self {
        self.inventory = inventory;
        self.given_inventory = true;
        self
    }

    /// The same collector deleting through `deleter` (which must refuse non-collectable keys,
    /// as every deleter of [`crate::deleter`] does).
    pub fn with_deleter(mut self, deleter: Box<dyn ObjectDeleter + 'e>) -> Self {
        self.deleter = deleter;
        self
    }

    /// The lake's descriptor (its GC policy floor).
    pub fn policy(&self) -> &LakeDescriptor {
        &self.policy
    }

    /// The store.
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// The cutoff for `horizon` now: the store's clock minus `min_age` (or the horizon's earlier
    /// cutoff), after the policy and skew checks.
    ///
    /// # Errors
    /// [`GcError::Refused`] ([`ErrorKind::Horizon`], [`ErrorKind::PolicyFloor`], [`ErrorKind::ClockSkew`], [`ErrorKind::CutoffTooLate`]) for a horizon below 1 s or below the policy floor (without the
    /// override), a clock skew past the bound, or a requested cutoff later than allowed;
    /// storage errors of the clock probe.
    pub async fn cutoff(&self, horizon: &Horizon) -> Result<(DateTime<Utc>, ClockReading), GcError> {
        check_horizon(horizon.min_age, self.policy.min_age(), horizon.allow_below_policy)?;
        let reading = self.clock.read(&self.store).await?;
        let latest = gc_cutoff(&reading, horizon.min_age, horizon.max_clock_skew)?;
        let cutoff = match horizon.earlier_cutoff {
            Some(c) if c > latest => {
                return Err(GcError::refused(ErrorKind::CutoffTooLate, format!(
                    "the cutoff {} is later than the store's now minus min_age ({}); objects that young may still be published. Nothing was deleted",
                    format_time(c),
                    format_time(latest)
                )))
            }
            Some(c) => c,
            None => latest,
        };
        Ok((cutoff, reading))
    }

    /// A dry run: the full plan of what `horizon` allows deleting now (its mode record says it
    /// was asked for). Changes nothing under the lake root (the clock probe under `_lake/clock/`
    /// is written and removed). [`GarbageCollector::plan_with`] plans incrementally when a GC
    /// state allows; [`GarbageCollector::run`] does for every caller.
    ///
    /// # Errors
    /// As [`GarbageCollector::cutoff`]; engine and storage errors (nothing is planned from a
    /// partial read).
    pub async fn plan(&self, horizon: &Horizon, settings: &PlanSettings) -> Result<Planned, GcError> {
        self.plan_with(horizon, settings, &IncrementalPolicy::full()).await
    }

    /// A dry run under `policy`: an incremental plan from the latest GC state
    /// ([`crate::state`]) when `policy` allows it and the state passes every check (its seal and
    /// name, its lake, not from the future, the journal positions it names still there, its
    /// chain's last full plan younger than `policy.full_every`), else a full plan. The plan's
    /// [`GcPlan::mode`] says which, the state it started from, and why a plan is full. With an
    /// inventory given to [`GarbageCollector::with_inventory`] (an S3 Inventory report), a full
    /// plan reads it and an incremental plan does not: it lists the few keys minted since the
    /// state itself, so a report (a listing of every key, often older than the state) is not
    /// needed. Changes nothing under the lake root.
    ///
    /// # Errors
    /// As [`GarbageCollector::plan`].
    pub async fn plan_with(
        &self,
        horizon: &Horizon,
        settings: &PlanSettings,
        policy: &IncrementalPolicy,
    ) -> Result<Planned, GcError> {
        let (cutoff, clock) = self.cutoff(horizon).await?;
        let recorded = PlanTime::from_datetime(cutoff);
        let options = self.plan_options(horizon.min_age, recorded.datetime()).with_settings(settings);
        let at = Chooser {
            store: &self.store,
            lake_id: self.policy.identity(),
            cutoff: recorded.datetime(),
            store_now: clock.store_now,
        };
        let choice = choose(&at, policy).await?;
        let reason = match choice {
            Choice::Full(reason) => reason,
            Choice::Incremental { scope, state, full_cutoff } => {
                let listed_after = scope.listed_after.clone();
                let incremental = PlanOptions { incremental: Some(scope), ..options.clone() };
                if self.given_inventory {
                    tracing::info!("an incremental plan lists the keys minted since its state itself: the given inventory is not read");
                }
                match self.planning(&incremental, settings, Listing::Own).await? {
                    Planning::Done(plans, stats) => {
                        let record = PlanModeRecord {
                            mode: PlanMode::Incremental,
                            state: Some(state),
                            reason: None,
                            listed_after: Some(listed_after),
                            full_cutoff,
                            held: stats.held.clone(),
                            held_overflow: stats.held_overflow,
                        };
                        return Ok(Planned { plan: with_mode(plans, record)?, stats, clock });
                    }
                    Planning::Fallback(reason) => format!("the GC state {state} is not used: {reason}"),
                }
            }
        };
        tracing::info!(%reason, "a full plan");
        match self.planning(&options, settings, Listing::Given).await? {
            Planning::Done(plans, stats) => {
                let record = PlanModeRecord {
                    mode: PlanMode::Full,
                    state: None,
                    reason: Some(reason),
                    listed_after: None,
                    full_cutoff: recorded,
                    held: stats.held.clone(),
                    held_overflow: stats.held_overflow,
                };
                Ok(Planned { plan: with_mode(plans, record)?, stats, clock })
            }
            Planning::Fallback(reason) => Err(GcError::storage("the plan", reason)),
        }
    }

    /// Plans `options` with the store's own listing (in parallel streams on S3) or, for
    /// [`Listing::Given`], the given inventory when there is one.
    async fn planning(
        &self,
        options: &PlanOptions,
        settings: &PlanSettings,
        listing: Listing,
    ) -> Result<Planning, GcError> {
        let given = self.given_inventory && listing == Listing::Given;
        let inventory = if given { self.inventory.as_ref() } else { self.own_inventory.as_ref() };
        if settings.list_streams > 1 && self.store.s3().is_some() && !given {
            let streams = settings.list_streams;
            let pages = buffered_pages(settings.memory_budget, settings.inventory_page_size, streams);
            let mut parallel = ParallelInventory::new(inventory, streams).with_buffered_pages(pages);
            if options.incremental.is_some() {
                // The keys minted since the state are few and spread evenly over a short time:
                // one range per stream to start with (ranges split themselves when their first
                // page shows they are big), each range costing one request more than its pages.
                parallel = parallel.with_ranges_per_stream(1);
            }
            plan_incremental(self.engine, &parallel, options).await
        } else {
            plan_incremental(self.engine, inventory, options).await
        }
    }

    /// Records the GC state of `report`'s apply when it is complete and of a whole plan of this
    /// lake ([`GcState::of_apply`]); [`ApplyReport::state`] names it. A state that cannot be
    /// written is logged (the next run plans from the state before, or in full), never an error
    /// of an apply that deleted what it should.
    async fn record_state(&self, mut report: ApplyReport) -> ApplyReport {
        let Some(state) = GcState::of_apply(&report.plan, &report.checkpoint) else { return report };
        if state.lake_id != self.policy.identity() || state.root != self.store.root().to_string() {
            return report;
        }
        match state.record(&self.store).await {
            Ok(key) => report.state = Some(key),
            Err(e) => {
                tracing::warn!(error = %e, "the GC state of a complete apply could not be recorded; the next run plans from an earlier state, or in full")
            }
        }
        report
    }

    /// Applies `plan`, after checking the plan is this lake's, made with `horizon`'s `min_age`,
    /// with a cutoff no later than the store's clock allows now, and that `checkpoint` (and the
    /// plan document saved beside it) is outside the lake root by any route.
    ///
    /// What `checkpoint` already records decides what happens, never silently:
    /// - nothing: the plan is saved beside it, the checkpoint created, the apply runs;
    /// - an apply of this plan: it resumes (a finished one is reported, nothing more is done);
    /// - a finished apply of another plan (yesterday's run at a fixed checkpoint path): this
    ///   plan replaces it ([`ApplyReport::replaced`] names the old plan);
    /// - an unfinished apply of another plan: refused, naming both plans (digests, cutoffs,
    ///   progress); nothing is deleted. Finish it ([`GarbageCollector::resume`]) or use
    ///   another checkpoint path.
    ///
    /// # Errors
    /// [`GcError::Refused`] ([`ErrorKind::BoundToRoot`], [`ErrorKind::BoundToMinAge`], [`ErrorKind::CutoffTooLate`], [`ErrorKind::BoundToManifest`]) for a plan of another lake, horizon or a cutoff too late, or a shard;
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a checkpoint inside the lake; [`GcError::Checkpoint`] for
    /// a checkpoint of another, unfinished plan; as [`crate::apply`] otherwise.
    pub async fn apply(
        &self,
        plan: &GcPlan,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<ApplyReport, GcError> {
        refuse_shard(plan, "the plan")?;
        self.apply_bound(plan, horizon, checkpoint, options, "the plan").await
    }

    /// Applies `plan` after the checks every plan passes (lake, horizon, cutoff, checkpoint
    /// outside the lake).
    async fn apply_bound(
        &self,
        plan: &GcPlan,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
        what: &str,
    ) -> Result<ApplyReport, GcError> {
        self.check_plan(plan, horizon, what).await?;
        let held = checkpoint.hold(&self.store)?.own()?;
        let mut loaded = ApplyCheckpoint::load_held(&held).await?;
        if let Some(loaded) = loaded.as_mut() {
            loaded.other_lake = self.other_lake(&loaded.plan);
        }
        let report = apply_loaded(self.engine, self.deleter.as_ref(), &held, loaded, Some(plan), options).await?;
        Ok(self.record_state(report).await)
    }

    /// Resumes the apply recorded at `checkpoint`, after the checks of
    /// [`GarbageCollector::apply`] on its plan. `None` when there is no checkpoint there; a
    /// finished apply is reported as it is (nothing more is done).
    ///
    /// # Errors
    /// As [`GarbageCollector::apply`].
    pub async fn resume(
        &self,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<Option<ApplyReport>, GcError> {
        self.resume_bound(horizon, checkpoint, options, false, |loaded, what| {
            refuse_shard(&loaded.plan, what).map(|()| true)
        })
        .await
    }

    /// Resumes the apply recorded at `checkpoint` when it is not finished, as
    /// [`GarbageCollector::resume`]; `None` when there is no checkpoint or its apply is finished.
    /// A run with a fixed checkpoint path (a scheduled job) calls this first, and on `None`
    /// plans anew and applies the new plan ([`GarbageCollector::apply`] replaces the finished
    /// checkpoint): it never reports an old, finished apply as if it were today's run, and
    /// never starts a new plan over an unfinished one.
    ///
    /// # Errors
    /// As [`GarbageCollector::apply`].
    pub async fn resume_unfinished(
        &self,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<Option<ApplyReport>, GcError> {
        self.resume_bound(horizon, checkpoint, options, true, |loaded, what| {
            refuse_shard(&loaded.plan, what).map(|()| !loaded.checkpoint.complete)
        })
        .await
    }

    /// Resumes the apply at `checkpoint` after `check` of its loaded checkpoint (`false`: there
    /// is nothing to resume) and the checks every plan passes; `None` when there is no
    /// checkpoint, or nothing to resume. A checkpoint of another lake (one deleted and created
    /// again at this root, or a checkpoint copied from elsewhere) is nothing to resume when
    /// `other_lake_is_none` (a scheduled run then plans anew, and its apply replaces it);
    /// else it is refused, saying that a new plan's apply replaces it.
    async fn resume_bound(
        &self,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
        other_lake_is_none: bool,
        check: impl FnOnce(&LoadedCheckpoint, &str) -> Result<bool, GcError>,
    ) -> Result<Option<ApplyReport>, GcError> {
        let held = checkpoint.hold(&self.store)?.own()?;
        let Some(loaded) = ApplyCheckpoint::load_held(&held).await? else { return Ok(None) };
        let what = format!("checkpoint {}", checkpoint.display());
        if self.other_lake(&loaded.plan) {
            if other_lake_is_none {
                return Ok(None);
            }
            return Err(GcError::refused(ErrorKind::BoundToRoot, format!(
                "{what} records an apply for {}, not for the lake now at {} ({}): that lake was deleted and created again there, or the checkpoint was copied from another lake. There is nothing of this lake to resume, and nothing was deleted; make a new plan and apply it with this checkpoint path (the new apply replaces this record)",
                describe_lake(&loaded.plan),
                self.store.root(),
                self.policy.identity()
            )));
        }
        if !check(&loaded, &what)? {
            return Ok(None);
        }
        self.check_plan(&loaded.plan, horizon, &what).await?;
        let report = apply_loaded(self.engine, self.deleter.as_ref(), &held, Some(loaded), None, options).await?;
        Ok(Some(self.record_state(report).await))
    }

    /// The coordinator's step of a sharded plan: fixes the cutoff (the store's clock minus
    /// `min_age`, or the horizon's earlier cutoff, after the checks of
    /// [`GarbageCollector::cutoff`]) and splits the managed keys into at most `shards` ranges by
    /// ULID time, from the mint time of the first managed key listed (one short listing) to the
    /// cutoff. The last range also takes young keys, unmanaged keys sorting after the managed
    /// ones, and journal garbage (`tables/...`). Fewer ranges than asked when the keys span
    /// fewer milliseconds (one for an empty lake, or when no managed key is among the first
    /// 1000 listed). Hand the spec to [`GarbageCollector::plan_shard`], in any process.
    ///
    /// # Errors
    /// [`GcError::Refused`] ([`ErrorKind::ShardMismatch`]) for `shards` outside 1 to [`crate::shards::MAX_SHARDS`]; as
    /// [`GarbageCollector::cutoff`]; storage errors of the listing.
    pub async fn shard_ranges(&self, horizon: &Horizon, shards: usize) -> Result<ShardSpec, GcError> {
        self.shard_spec(horizon, shards, &IncrementalPolicy::full()).await.map(|(spec, _)| spec)
    }

    /// [`GarbageCollector::shard_ranges`] under `policy`: when `policy` allows an incremental
    /// plan and the lake's latest GC state passes the checks of
    /// [`GarbageCollector::plan_with`], the spec has one shard over every key and records the
    /// policy ([`ShardSpec::incremental`]): its worker plans incrementally (or in full, saying
    /// why, when the state fails a check by then). Else as [`GarbageCollector::shard_ranges`].
    ///
    /// # Errors
    /// As [`GarbageCollector::shard_ranges`]; storage errors reading the GC state.
    pub async fn shard_ranges_with(
        &self,
        horizon: &Horizon,
        shards: usize,
        policy: &IncrementalPolicy,
    ) -> Result<ShardSpec, GcError> {
        self.shard_spec(horizon, shards, policy).await.map(|(spec, _)| spec)
    }

    async fn shard_spec(
        &self,
        horizon: &Horizon,
        shards: usize,
        policy: &IncrementalPolicy,
    ) -> Result<(ShardSpec, ClockReading), GcError> {
        check_count(shards)?;
        let (cutoff, clock) = self.cutoff(horizon).await?;
        let recorded = PlanTime::from_datetime(cutoff);
        let cutoff = recorded.datetime();
        let mut spec = ShardSpec {
            root: self.store.root().to_string(),
            min_age_seconds: horizon.min_age.as_secs(),
            cutoff: recorded,
            ranges: vec![KeyRange::all()],
            incremental: None,
        };
        let at = Chooser { store: &self.store, lake_id: self.policy.identity(), cutoff, store_now: clock.store_now };
        let choice = match choose(&at, policy).await? {
            // The lineage checks the plan makes, made here too: a state that fails them gives
            // the shards asked for, not one shard planned in full.
            Choice::Incremental { scope, state, full_cutoff } => match lineage_fallback(self.engine, &scope).await? {
                Some(why) => Choice::Full(format!("the GC state {state} is not used: {why}")),
                None => Choice::Incremental { scope, state, full_cutoff },
            },
            full => full,
        };
        match choice {
            Choice::Incremental { .. } => spec.incremental = Some(ShardIncremental::of(policy)),
            Choice::Full(reason) => {
                tracing::info!(%reason, "a full sharded plan");
                if let Some(from) = self.first_minted(cutoff).await? {
                    spec.ranges = KeyRange::split_by_time(from, cutoff, shards);
                }
            }
        }
        Ok((spec, clock))
    }

    /// The mint time of the first managed key listed (an object or an empty managed folder),
    /// when it is among the first [`FIRST_KEY_SCAN`] entries and older than `cutoff`.
    async fn first_minted(&self, cutoff: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, GcError> {
        let mut pages = self.inventory.list_from(None, FIRST_KEY_PAGE);
        let mut seen = 0;
        while let Some(page) = futures::StreamExt::next(&mut pages).await {
            for entry in page?.entries {
                if let Some(minted) = lake_store::keys::minted_at(&entry.key) {
                    return Ok((minted < cutoff).then_some(minted));
                }
                seen += 1;
            }
            if seen >= FIRST_KEY_SCAN {
                tracing::warn!(seen, "no managed key among the first entries listed: the plan has one shard");
                break;
            }
        }
        Ok(None)
    }

    /// A worker's step of a sharded plan: the plan of shard `index` of `spec` (made by
    /// [`GarbageCollector::shard_ranges`], possibly in another process), at the spec's cutoff
    /// (the horizon's `earlier_cutoff` is not used). Reads the whole lineage and lists only the
    /// shard's range. Changes nothing under the lake root.
    ///
    /// # Errors
    /// [`GcError::Refused`] for a spec of another lake or `min_age`, an index out of the
    /// spec, ranges that are not a partition of the keys, or a cutoff later than the store's
    /// now minus `min_age` (the checks of [`GarbageCollector::cutoff`]); engine and storage
    /// errors.
    pub async fn plan_shard(
        &self,
        horizon: &Horizon,
        settings: &PlanSettings,
        spec: &ShardSpec,
        index: usize,
    ) -> Result<Planned, GcError> {
        spec.check()?;
        let range = spec.ranges.get(index).cloned().ok_or_else(|| {
            GcError::refused(
                ErrorKind::ShardMismatch,
                format!(
                    "shard {index} does not exist: the spec has {} shards (0 to {})",
                    spec.count(),
                    spec.count() - 1
                ),
            )
        })?;
        self.check_lake_and_horizon(&spec.root, spec.min_age_seconds, horizon, "the shard spec")?;
        let earlier = Horizon { earlier_cutoff: Some(spec.cutoff_time()), ..horizon.clone() };
        if let Some(incremental) = &spec.incremental {
            // One shard over every key (checked above): the plan `plan_with` makes, as a shard.
            let Planned { mut plan, stats, clock } = self.plan_with(&earlier, settings, &incremental.policy()).await?;
            plan.shard = Some(PlanShard { index: 0, count: 1, range });
            return Ok(Planned { plan, stats, clock });
        }
        let (cutoff, clock) = self.cutoff(&earlier).await?;
        let options = self.plan_options(horizon.min_age, cutoff).with_settings(settings).range(range.clone());
        let (mut plan, stats) = plan(self.engine, self.inventory.as_ref(), &options).await?;
        plan.shard = Some(PlanShard { index: index as u64, count: spec.count() as u64, range });
        Ok(Planned { plan, stats, clock })
    }

    /// Every shard of a sharded plan in this process (a dry run): the spec of
    /// [`GarbageCollector::shard_ranges`], then one read of the lineage and one listing whose
    /// candidates are split by range. Each shard's plan is identical to
    /// [`GarbageCollector::plan_shard`]'s at the same spec and lake state; the union of their
    /// candidates is an unsharded plan's at that cutoff.
    ///
    /// # Errors
    /// As [`GarbageCollector::shard_ranges`] and [`GarbageCollector::plan`].
    pub async fn plan_sharded(
        &self,
        horizon: &Horizon,
        settings: &PlanSettings,
        shards: usize,
    ) -> Result<PlannedShards, GcError> {
        self.plan_sharded_with(horizon, settings, shards, &IncrementalPolicy::full()).await
    }

    /// [`GarbageCollector::plan_sharded`] under `policy`: with the spec of
    /// [`GarbageCollector::shard_ranges_with`], an incremental sharded plan is one shard, the
    /// plan of [`GarbageCollector::plan_with`] (its [`GcPlan::mode`] says which mode, and why a
    /// plan is full); its complete apply records a GC state as a whole plan's does.
    ///
    /// # Errors
    /// As [`GarbageCollector::plan_sharded`].
    pub async fn plan_sharded_with(
        &self,
        horizon: &Horizon,
        settings: &PlanSettings,
        shards: usize,
        policy: &IncrementalPolicy,
    ) -> Result<PlannedShards, GcError> {
        let (spec, clock) = self.shard_spec(horizon, shards, policy).await?;
        if spec.incremental.is_some() {
            let Planned { plan, stats, clock } = self.plan_shard(horizon, settings, &spec, 0).await?;
            let manifest = ShardManifest::assemble(std::slice::from_ref(&plan))?;
            return Ok(PlannedShards { plan: ShardedPlan { manifest, plans: vec![plan] }, stats, clock });
        }
        let options = self.plan_options(horizon.min_age, spec.cutoff_time()).with_settings(settings);
        let (mut plans, stats) = plan_ranges(self.engine, self.inventory.as_ref(), &options, &spec.ranges).await?;
        let count = plans.len() as u64;
        for (index, (plan, range)) in plans.iter_mut().zip(&spec.ranges).enumerate() {
            plan.shard = Some(PlanShard { index: index as u64, count, range: range.clone() });
        }
        let manifest = ShardManifest::assemble(&plans)?;
        Ok(PlannedShards { plan: ShardedPlan { manifest, plans }, stats, clock })
    }

    /// Applies one shard of a sharded plan (or resumes the apply its checkpoint records, or
    /// replaces a finished apply of another plan there, as [`GarbageCollector::apply`] does):
    /// the checks of [`GarbageCollector::apply`], and `plan` must be bound to `manifest`
    /// ([`ShardManifest::check_shard`]: its index, range, digest, and every candidate inside
    /// its range) whose every shard was planned on complete lineage. Apply revalidates the
    /// shard like a whole plan, and deletes only keys of its range. To check every shard of a
    /// folder before any is applied, call [`ShardManifest::check_folder`] first.
    /// Shards are independent: apply them in any order, in any processes, each with its own
    /// checkpoint; a retry with the same checkpoint resumes where it stopped.
    ///
    /// # Errors
    /// [`GcError::Refused`] ([`ErrorKind::BoundToManifest`]) for a shard not bound to `manifest`, or as
    /// [`GarbageCollector::apply`]; [`GcError::PlanIncomplete`] when a shard of the
    /// manifest was planned on incomplete lineage.
    pub async fn apply_shard(
        &self,
        manifest: &ShardManifest,
        plan: &GcPlan,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<ApplyReport, GcError> {
        manifest.check_shard(plan)?;
        check_manifest_complete(manifest)?;
        self.apply_bound(plan, horizon, checkpoint, options, "the shard plan").await
    }

    /// Resumes the apply of a shard recorded at `checkpoint` (its plan read from beside it),
    /// after the checks of [`GarbageCollector::apply_shard`]. `None` when there is no
    /// checkpoint there, when it records a finished apply of a shard of another manifest (an
    /// earlier sharded plan at a fixed checkpoint folder: [`GarbageCollector::apply_shard`]
    /// replaces it), or an apply of another lake (replaced alike). An unfinished apply of a
    /// shard of another manifest of this lake is refused.
    ///
    /// # Errors
    /// As [`GarbageCollector::apply_shard`].
    pub async fn resume_shard(
        &self,
        manifest: &ShardManifest,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<Option<ApplyReport>, GcError> {
        self.resume_bound(horizon, checkpoint, options, true, |loaded, _| {
            // The load checked that the plan hashes to the digest the checkpoint records.
            match manifest.check_bound(&loaded.plan, &loaded.checkpoint.plan_digest) {
                Err(_) if loaded.checkpoint.complete => return Ok(false),
                bound => bound?,
            }
            check_manifest_complete(manifest).map(|()| true)
        })
        .await
    }

    fn check_lake_and_horizon(
        &self,
        root: &str,
        min_age_seconds: u64,
        horizon: &Horizon,
        what: &str,
    ) -> Result<(), GcError> {
        let lake = self.store.root().to_string();
        if root != lake {
            return Err(GcError::refused(
                ErrorKind::BoundToRoot,
                format!("{what} belongs to lake {root}, not {lake}; nothing was deleted"),
            ));
        }
        if min_age_seconds != horizon.min_age.as_secs() {
            return Err(GcError::refused(ErrorKind::BoundToMinAge, format!(
                "{what} was made with min_age {min_age_seconds}s, not {}s; apply it with the same min_age, or plan again; nothing was deleted",
                horizon.min_age.as_secs()
            )));
        }
        Ok(())
    }

    /// Options of a plan of this lake (its root and identity recorded in the plan).
    fn plan_options(&self, min_age: std::time::Duration, cutoff: DateTime<Utc>) -> PlanOptions {
        PlanOptions { lake_id: Some(self.policy.identity()), ..PlanOptions::new(self.store.root(), min_age, cutoff) }
    }

    /// Whether `plan` was made for another lake than this one: another root, or this root when
    /// another lake was there (its recorded identity differs). A plan of an earlier build
    /// records none: it is taken for this root's lake (a checkpoint of one, left unfinished by
    /// an upgrade, resumes as before; apply revalidates every candidate against the journal).
    fn other_lake(&self, plan: &GcPlan) -> bool {
        plan.root != self.store.root().to_string()
            || plan.lake_id.as_deref().is_some_and(|id| id != self.policy.identity())
    }

    async fn check_plan(&self, plan: &GcPlan, horizon: &Horizon, what: &str) -> Result<(), GcError> {
        self.check_lake_and_horizon(&plan.root, plan.min_age_seconds, horizon, what)?;
        let lake = self.policy.identity();
        if plan.lake_id.as_deref().is_some_and(|id| id != lake) {
            return Err(GcError::refused(ErrorKind::BoundToRoot, format!(
                "{what} was made for {}, not for the lake now at {} ({lake}): that lake was deleted and created again there. Plan again; nothing was deleted",
                describe_lake(plan),
                plan.root
            )));
        }
        let planned = plan.cutoff.datetime();
        let (now, _) = self.cutoff(&Horizon { earlier_cutoff: None, ..horizon.clone() }).await?;
        if planned > now {
            return Err(GcError::refused(ErrorKind::CutoffTooLate, format!(
                "{what} has the cutoff {}, later than the store's now minus min_age ({}): objects that young may still be published. Nothing was deleted",
                plan.cutoff,
                format_time(now)
            )));
        }
        Ok(())
    }
}

/// Which listing a plan reads ([`GarbageCollector::planning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    /// The store's own listing (an incremental plan's).
    Own,
    /// The inventory given to [`GarbageCollector::with_inventory`] when there is one, else the
    /// store's own (a full plan's).
    Given,
}

/// The one plan of a whole plan's planning, with its mode `record`.
fn with_mode(plans: Vec<GcPlan>, record: PlanModeRecord) -> Result<GcPlan, GcError> {
    let mut plan =
        plans.into_iter().next().ok_or_else(|| GcError::refused(ErrorKind::ShardMismatch, "no key range to plan"))?;
    plan.mode = Some(record);
    Ok(plan)
}

/// The lake a plan was made for, in words.
fn describe_lake(plan: &GcPlan) -> String {
    match &plan.lake_id {
        Some(id) => format!("lake {id} at {}", plan.root),
        None => format!("a lake at {} of unrecorded identity", plan.root),
    }
}

/// Refuses a shard of a sharded plan where a whole plan is expected: a shard is applied only
/// with its manifest.
fn refuse_shard(plan: &GcPlan, what: &str) -> Result<(), GcError> {
    match &plan.shard {
        Some(shard) => Err(GcError::refused(ErrorKind::BoundToManifest, format!(
            "{what} is shard {} of {} of a sharded plan; apply it with its shard manifest (a sharded apply); nothing was deleted",
            shard.index, shard.count
        ))),
        None => Ok(()),
    }
}

/// Refuses a manifest with a shard planned on incomplete lineage: a symbolic link one shard's
/// listing met may alias an object another shard would delete.
fn check_manifest_complete(manifest: &ShardManifest) -> Result<(), GcError> {
    let incomplete: Vec<PlanProblem> = manifest
        .shards
        .iter()
        .filter(|e| !e.lineage_complete)
        .map(|e| PlanProblem::new(PlanProblem::INCOMPLETE_SHARD, format!("shard {} of {} was planned on incomplete lineage (its plan names the problems); no shard of manifest {} is applied", e.index, manifest.count, manifest.digest())))
        .collect();
    if incomplete.is_empty() {
        Ok(())
    } else {
        Err(GcError::PlanIncomplete { problems: incomplete })
    }
}
