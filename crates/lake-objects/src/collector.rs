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
//!   ([`crate::checkpoint`]); apply revalidates every key ([`crate::apply`]).
//!
//! Time is the store's, through the [`StoreClock`] trait: tests of age gates inject a fixed
//! clock with [`GarbageCollector::with_unchecked_clock`], a name that says what it does, rather
//! than sleeping. No CLI flag reaches it.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! use lake_objects::apply::ApplyOptions;
//! use lake_objects::checkpoint::CheckpointLocation;
//! use lake_objects::collector::{GarbageCollector, Horizon, PlanSettings};
//! use lake_objects::descriptor::LakeDescriptor;
//! use lake_objects::writer::ManagedObjectWriter;
//! use lake_objects::LakeStore;
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

use crate::apply::{apply_loaded, ApplyOptions, ApplyReport};
use crate::checkpoint::{ApplyCheckpoint, CheckpointLocation};
use crate::clock::{gc_cutoff, ClockReading, ProbeClock, StoreClock};
use crate::deleter::ObjectDeleter;
use crate::descriptor::LakeDescriptor;
use crate::error::ObjectsError;
use crate::inventory::parallel::{buffered_pages, ParallelInventory};
use crate::inventory::ObjectInventory;
use crate::plan::GcPlan;
use crate::planner::{format_time, plan, PlanOptions, PlanStats};
use crate::store::LakeStore;
use chrono::{DateTime, Utc};
use lake_engine::Engine;
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
    /// listed by one walk (the module documents why). Default [`DEFAULT_LIST_STREAMS`].
    pub list_streams: usize,
}

impl Default for PlanSettings {
    /// 1000 keys a listing request, half of the default memory budget, 8 listing streams.
    fn default() -> Self {
        Self {
            inventory_page_size: 1000,
            memory_budget: crate::spill::share(crate::spill::DEFAULT_MEMORY_BUDGET).1,
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

/// Garbage collection of one lake (see the module documentation).
pub struct GarbageCollector<'e> {
    store: LakeStore,
    engine: &'e dyn Engine,
    policy: LakeDescriptor,
    clock: Box<dyn StoreClock>,
    inventory: Box<dyn ObjectInventory>,
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
    /// [`ObjectsError::Root`] when `engine` is bound to another lake; [`ObjectsError::NotALake`]
    /// without a lake descriptor; storage errors.
    pub async fn open(store: LakeStore, engine: &'e dyn Engine) -> Result<Self, ObjectsError> {
        if let Some(engine_root) = engine.lake_root() {
            if engine_root != store.root().to_string() {
                return Err(ObjectsError::Root {
                    root: store.display_root(),
                    message: format!(
                        "the engine reads the tables of another lake ({engine_root}); open the engine on the same store as the collector"
                    ),
                });
            }
        }
        let policy = LakeDescriptor::load(&store).await?;
        Ok(Self {
            inventory: crate::inventory::for_store(&store),
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

    /// The same collector listing with `inventory` (another listing of the same store).
    pub fn with_inventory(mut self, inventory: Box<dyn ObjectInventory>) -> Self {
        self.inventory = inventory;
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
    /// [`ObjectsError::Policy`] for a horizon below 1 s or below the policy floor (without the
    /// override), a clock skew past the bound, or a requested cutoff later than allowed;
    /// storage errors of the clock probe.
    pub async fn cutoff(&self, horizon: &Horizon) -> Result<(DateTime<Utc>, ClockReading), ObjectsError> {
        if horizon.min_age < Duration::from_secs(1) {
            return Err(ObjectsError::Policy(format!(
                "min_age {} must be at least 1s: a shorter horizon would race writers that are still publishing; nothing was deleted",
                humantime::format_duration(horizon.min_age)
            )));
        }
        if horizon.min_age < self.policy.min_age() && !horizon.allow_below_policy {
            return Err(ObjectsError::Policy(format!(
                "min_age {} is below this lake's policy floor of {}; nothing was deleted. Use a larger min_age, or allow it below the policy (--allow-below-policy) if you are sure no writer is still publishing objects that old",
                humantime::format_duration(horizon.min_age),
                humantime::format_duration(self.policy.min_age())
            )));
        }
        let reading = self.clock.read(&self.store).await?;
        let latest = gc_cutoff(&reading, horizon.min_age, horizon.max_clock_skew)?;
        let cutoff = match horizon.earlier_cutoff {
            Some(c) if c > latest => {
                return Err(ObjectsError::Policy(format!(
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

    /// A dry run: the plan of what `horizon` allows deleting now. Changes nothing under the
    /// lake root (the clock probe under `_lake/clock/` is written and removed).
    ///
    /// # Errors
    /// As [`GarbageCollector::cutoff`]; engine and storage errors (nothing is planned from a
    /// partial read).
    pub async fn plan(&self, horizon: &Horizon, settings: &PlanSettings) -> Result<Planned, ObjectsError> {
        let (cutoff, clock) = self.cutoff(horizon).await?;
        let options = PlanOptions::new(self.store.root(), horizon.min_age, cutoff).with_settings(settings);
        let inventory = self.inventory.as_ref();
        let (plan, stats) = if settings.list_streams > 1 && self.store.s3().is_some() {
            let streams = settings.list_streams;
            let pages = buffered_pages(settings.memory_budget, settings.inventory_page_size, streams);
            let parallel = ParallelInventory::new(inventory, streams).with_buffered_pages(pages);
            plan(self.engine, &parallel, &options).await?
        } else {
            plan(self.engine, inventory, &options).await?
        };
        Ok(Planned { plan, stats, clock })
    }

    /// Applies `plan` (or resumes the apply recorded at `checkpoint`, which must be of the same
    /// plan), after checking the plan is this lake's, made with `horizon`'s `min_age`, with a
    /// cutoff no later than the store's clock allows now, and that `checkpoint` is outside the
    /// lake root.
    ///
    /// # Errors
    /// [`ObjectsError::Policy`] for a plan of another lake, horizon or a cutoff too late;
    /// [`ObjectsError::Root`] for a checkpoint inside the lake; as [`crate::apply`] otherwise.
    pub async fn apply(
        &self,
        plan: &GcPlan,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<ApplyReport, ObjectsError> {
        self.check_plan(plan, horizon, "the plan").await?;
        checkpoint.check_outside(&self.store)?;
        let loaded = ApplyCheckpoint::load(checkpoint).await?;
        apply_loaded(self.engine, self.deleter.as_ref(), checkpoint, loaded, Some(plan), options).await
    }

    /// Resumes the apply recorded at `checkpoint`, after the checks of
    /// [`GarbageCollector::apply`] on its plan. `None` when there is no checkpoint there.
    ///
    /// # Errors
    /// As [`GarbageCollector::apply`].
    pub async fn resume(
        &self,
        horizon: &Horizon,
        checkpoint: &CheckpointLocation,
        options: &ApplyOptions,
    ) -> Result<Option<ApplyReport>, ObjectsError> {
        checkpoint.check_outside(&self.store)?;
        let Some(loaded) = ApplyCheckpoint::load(checkpoint).await? else { return Ok(None) };
        self.check_plan(&loaded.plan, horizon, &format!("checkpoint {}", checkpoint.display())).await?;
        apply_loaded(self.engine, self.deleter.as_ref(), checkpoint, Some(loaded), None, options).await.map(Some)
    }

    async fn check_plan(&self, plan: &GcPlan, horizon: &Horizon, what: &str) -> Result<(), ObjectsError> {
        let root = self.store.root().to_string();
        if plan.root != root {
            return Err(ObjectsError::Policy(format!(
                "{what} belongs to lake {}, not {root}; nothing was deleted",
                plan.root
            )));
        }
        if plan.min_age_seconds != horizon.min_age.as_secs() {
            return Err(ObjectsError::Policy(format!(
                "{what} was made with min_age {}s, not {}s; pass the same min_age (--min-age), or plan again; nothing was deleted",
                plan.min_age_seconds,
                horizon.min_age.as_secs()
            )));
        }
        let planned = DateTime::parse_from_rfc3339(&plan.cutoff)
            .map_err(|e| ObjectsError::Policy(format!("{what} has an unreadable cutoff `{}`: {e}", plan.cutoff)))?
            .with_timezone(&Utc);
        let (now, _) = self.cutoff(&Horizon { earlier_cutoff: None, ..horizon.clone() }).await?;
        if planned > now {
            return Err(ObjectsError::Policy(format!(
                "{what} has the cutoff {}, later than the store's now minus min_age ({}): objects that young may still be published. Nothing was deleted",
                plan.cutoff,
                format_time(now)
            )));
        }
        Ok(())
    }
}
