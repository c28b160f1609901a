//! Objects and garbage collection of lake. This crate plans over journals (through the
//! [`lake_engine::Engine`] trait) and inventories; it knows nothing of Lance.
//!
//! Where each rule lives:
//! - [`store`]: opening a lake root (`file://`, a local path, `s3://`) as an object store.
//! - [`layout`]: the keys of a lake (`_lake/`, `tables/`, `objects/`) and table-name rules.
//! - [`keys`]: the managed key grammar `objects/<ULID>/<name>` and its time order.
//! - [`descriptor`]: the lake descriptor and its GC policy floor (`min_age`).
//! - [`registry`]: the table registry, advanced by compare-and-swap on create-only documents.
//! - [`failpoint`]: failure injection points for crash tests (test builds only).
//! - [`guard`]: the writer-side publication guard (refuse references to objects GC may delete).
//! - [`writer`]: the managed object writer (streaming upload, SHA-256 while writing).
//! - [`clock`]: "now" read from the store's clock.
//! - [`inventory`]: key-ordered, paginated listings of the managed prefix.
//! - [`planner`]: live set x inventory x age gate -> [`plan::GcPlan`].
//! - [`spill`]: sorted runs on local disk and their merge (bounded-memory live sets).
//! - [`plan`]: the deterministic plan and its digest.
//! - [`candidates`]: a plan's candidate list, spilled to a temporary file past a budget.
//! - [`deleter`]: bulk deletes with per-key outcomes, one module per backend; `no_follow`:
//!   local file-system access that never goes through a symbolic link.
//! - [`checkpoint`]: the versioned apply checkpoint bound to a plan digest.
//! - [`apply`]: page-by-page, resumable deletion; `revalidation`: the lineage checked before
//!   every group of deletes.
//! - [`s3_requests`]: raw signed S3 requests (exact listings, incomplete multipart uploads).

pub mod apply;
pub mod candidates;
pub mod checkpoint;
pub mod clock;
pub mod deleter;
pub mod descriptor;
pub mod error;
pub mod failpoint;
pub mod guard;
pub mod inventory;
pub mod keys;
pub mod layout;
mod live_keys;
mod no_follow;
pub mod plan;
pub mod planner;
pub mod registry;
mod revalidation;
pub mod s3_requests;
pub mod spill;
pub mod store;
pub mod writer;

pub use error::ObjectsError;
pub use store::LakeStore;
