//! Garbage collection of lake's objects. This crate plans over journals (through the
//! [`lake_engine::Engine`] trait) and inventories of the store (`lake_store`); it knows nothing
//! of Lance. The store side (the root, key grammar, descriptor, registry, intents, the managed
//! writer and its guard, the store's clock) is `lake_store`, which never imports from here.
//!
//! The entry to garbage collection is [`collector::GarbageCollector`]: it enforces the horizon,
//! the store's clock and the binding of plans and checkpoints for every caller, and
//! [`run`] decides for every caller whether a run resumes, replaces or plans anew.
//! [`cutoff`] holds the horizon's rules (at least 1 s, the policy floor) and the cutoff by the
//! store's clock.
//!
//! Where each rule lives:
//! - [`key_range`]: ranges of keys (`after < key <= until`) and their split by ULID time, for
//!   parallel listings and sharded plans.
//! - [`inventory`]: key-ordered, paginated listings of the managed prefix; `inventory::parallel`
//!   lists ranges of mint time concurrently, in key order; `inventory::report`: the same from an
//!   S3 Inventory report (checked, merged with a live listing of the keys minted after it), and a
//!   writer of such reports.
//! - [`planner`]: live set x inventory x age gate -> [`plan::GcPlan`].
//! - [`spill`]: sorted runs of keys on local disk and their merge (bounded-memory live sets);
//!   the memory budget and its split with the engine are `lake_engine::budget`.
//! - [`plan`]: the deterministic plan and its digest.
//! - [`candidates`]: a plan's candidate list, spilled to a temporary file past a budget.
//! - [`deleter`]: bulk deletes with per-key outcomes, one module per backend; `no_follow`:
//!   local file-system access that never goes through a symbolic link (the local inventory and
//!   deleter's).
//! - [`shards`]: sharded plans (N shards over disjoint key ranges) and their manifest.
//! - [`checkpoint`]: the versioned apply checkpoint bound to a plan digest.
//! - [`state`]: the GC state a complete apply records under the root, from which the next run
//!   plans incrementally.
//! - [`output`]: where documents written for an operator (plans, sharded plans, metrics,
//!   checkpoints) may go: outside the lake by any route, over a document of the same kind,
//!   atomically.
//! - [`error`]: [`GcError`], which carries the store's errors whole ([`GcError::Store`]).
//! - [`apply`]: page-by-page, resumable deletion; `revalidation`: the lineage checked before
//!   every group of deletes.

pub mod apply;
pub mod candidates;
pub mod checkpoint;
pub mod collector;
pub mod cutoff;
pub mod deleter;
pub mod error;
pub mod inventory;
pub mod key_range;
mod live_keys;
mod no_follow;
pub mod output;
pub mod plan;
pub mod plan_time;
pub mod planner;
mod revalidation;
pub mod run;
pub mod shards;
pub mod spill;
pub mod state;

/// GC without [`collector::GarbageCollector`]'s checks, for tests and benchmarks that need an
/// exact cutoff. **Unsafe**: a cutoff later than the store's clock minus `min_age` plans (and
/// applies) objects a writer may still publish, and nothing binds a plan to its lake or horizon.
/// Compiled only with the `unchecked` feature, which only test and benchmark builds enable; no
/// CLI flag reaches it.
#[cfg(feature = "unchecked")]
pub mod unchecked {
    use crate::apply::{ApplyOptions, ApplyReport};
    use crate::checkpoint::CheckpointLocation;
    use crate::deleter::ObjectDeleter;
    use crate::inventory::ObjectInventory;
    use crate::plan::GcPlan;
    pub use crate::planner::PlanOptions;
    use crate::planner::PlanStats;
    use crate::GcError;
    use lake_engine::Engine;

    /// Plans at `options.cutoff`, whatever it is (see the module documentation).
    ///
    /// # Errors
    /// As [`crate::collector::GarbageCollector::plan`], without its policy and clock checks.
    pub async fn plan_with_unchecked_cutoff(
        engine: &dyn Engine,
        inventory: &dyn ObjectInventory,
        options: &PlanOptions,
    ) -> Result<(GcPlan, PlanStats), GcError> {
        crate::planner::plan(engine, inventory, options).await
    }

    /// A deleter cut half-way through its first page, as a process killed during the request
    /// leaves things: the first half of the page's keys are deleted by `inner`, no outcome
    /// comes back ([`StoreError::Injected`](lake_store::StoreError::Injected) naming
    /// [`CutHalfWay::POINT`]), and every later request of the same apply fails unsent (the
    /// process is gone). For crash tests of apply (no failure point does part of a delete).
    pub struct CutHalfWay<'a> {
        inner: &'a dyn ObjectDeleter,
        cut: std::sync::atomic::AtomicBool,
    }

    impl<'a> CutHalfWay<'a> {
        /// The name its failures carry.
        pub const POINT: &'static str = "test.delete_cut_half_way";

        /// Cuts `inner`'s first request half-way.
        pub fn new(inner: &'a dyn ObjectDeleter) -> Self {
            Self { inner, cut: std::sync::atomic::AtomicBool::new(false) }
        }
    }

    #[async_trait::async_trait]
    impl ObjectDeleter for CutHalfWay<'_> {
        async fn delete_batch(&self, keys: &[String]) -> Result<Vec<crate::deleter::DeleteOutcome>, GcError> {
            if !self.cut.swap(true, std::sync::atomic::Ordering::SeqCst) {
                self.inner.delete_batch(&keys[..keys.len() / 2]).await?;
            }
            Err(lake_store::StoreError::Injected(Self::POINT).into())
        }
    }

    /// Applies `plan` (or resumes the apply at `checkpoint`) without checking that it belongs to
    /// the lake or horizon (apply's own revalidation still runs).
    ///
    /// # Errors
    /// As [`crate::collector::GarbageCollector::apply`], without its binding checks.
    pub async fn apply_unchecked(
        engine: &dyn Engine,
        deleter: &dyn ObjectDeleter,
        checkpoint: &CheckpointLocation,
        plan: Option<&GcPlan>,
        options: &ApplyOptions,
    ) -> Result<ApplyReport, GcError> {
        // Held to read only: no lake root to judge it against (test and benchmark builds).
        let held = checkpoint.to_read()?;
        let loaded = crate::checkpoint::ApplyCheckpoint::load_held(&held).await?;
        crate::apply::apply_loaded(engine, deleter, &held, loaded, plan, options).await
    }
}

pub use error::GcError;
