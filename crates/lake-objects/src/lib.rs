//! Objects and garbage collection of lake. This crate plans over journals (through the
//! [`lake_engine::Engine`] trait) and inventories; it knows nothing of Lance.
//!
//! The entry to garbage collection is [`collector::GarbageCollector`]: it enforces the horizon,
//! the store's clock and the binding of plans and checkpoints for every caller.
//!
//! Where each rule lives:
//! - [`store`]: opening a lake root (`file://`, a local path, `s3://`) as an object store.
//! - [`layout`]: the keys of a lake (`_lake/`, `tables/`, `objects/`) and table-name rules.
//! - [`keys`]: the managed key grammar `objects/<ULID>/<name>` and its time order.
//! - [`key_range`]: ranges of keys (`after < key <= until`) and their split by ULID time, for
//!   parallel listings and sharded plans.
//! - [`descriptor`]: the lake descriptor and its GC policy floor (`min_age`).
//! - [`registry`]: the table registry, advanced by compare-and-swap on create-only documents.
//! - [`failpoint`]: failure injection points for crash tests (test builds only).
//! - [`guard`]: the writer-side publication guard (refuse references to objects GC may delete).
//! - [`intents`]: write intents, the records of commits that may still land (GC keeps their
//!   references).
//! - [`writer`]: the managed object writer (streaming upload, SHA-256 while writing).
//! - [`clock`]: "now" read from the store's clock.
//! - [`inventory`]: key-ordered, paginated listings of the managed prefix; `inventory::parallel`
//!   lists ranges of mint time concurrently, in key order; `inventory::report`: the same from an
//!   S3 Inventory report (checked, merged with a live listing of the keys minted after it), and a
//!   writer of such reports.
//! - [`planner`]: live set x inventory x age gate -> [`plan::GcPlan`].
//! - [`spill`]: sorted runs on local disk and their merge (bounded-memory live sets).
//! - [`plan`]: the deterministic plan and its digest.
//! - [`candidates`]: a plan's candidate list, spilled to a temporary file past a budget.
//! - [`deleter`]: bulk deletes with per-key outcomes, one module per backend; `no_follow`:
//!   local file-system access that never goes through a symbolic link.
//! - [`shards`]: sharded plans (N shards over disjoint key ranges) and their manifest.
//! - [`checkpoint`]: the versioned apply checkpoint bound to a plan digest.
//! - [`output`]: where documents written for an operator (plans, sharded plans, metrics,
//!   checkpoints) may go: outside the lake by any route, over a document of the same kind,
//!   atomically.
//! - [`apply`]: page-by-page, resumable deletion; `revalidation`: the lineage checked before
//!   every group of deletes.
//! - [`s3_requests`]: raw signed S3 requests (exact listings, incomplete multipart uploads).

pub mod apply;
pub mod candidates;
pub mod checkpoint;
pub mod clock;
pub mod collector;
pub mod deleter;
pub mod descriptor;
pub mod error;
pub mod failpoint;
pub mod guard;
pub mod intents;
pub mod inventory;
pub mod key_range;
pub mod keys;
pub mod layout;
mod live_keys;
mod mount_table;
mod no_follow;
pub mod output;
pub mod plan;
pub mod planner;
pub mod registry;
mod revalidation;
pub mod s3_requests;
pub mod shards;
pub mod spill;
pub mod store;
pub mod writer;

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
    use crate::ObjectsError;
    use lake_engine::Engine;

    /// Plans at `options.cutoff`, whatever it is (see the module documentation).
    ///
    /// # Errors
    /// As [`crate::collector::GarbageCollector::plan`], without its policy and clock checks.
    pub async fn plan_with_unchecked_cutoff(
        engine: &dyn Engine,
        inventory: &dyn ObjectInventory,
        options: &PlanOptions,
    ) -> Result<(GcPlan, PlanStats), ObjectsError> {
        crate::planner::plan(engine, inventory, options).await
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
    ) -> Result<ApplyReport, ObjectsError> {
        let loaded = crate::checkpoint::ApplyCheckpoint::load(checkpoint).await?;
        crate::apply::apply_loaded(engine, deleter, checkpoint, loaded, plan, options).await
    }
}

pub use error::ObjectsError;
pub use store::LakeStore;
