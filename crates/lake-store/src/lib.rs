//! The lake on its store: what every writer and reader of a lake needs, and what garbage
//! collection (`lake-gc`) builds on. It knows nothing of Lance (the engine, `lake-lance`, uses
//! it) and nothing of GC (no import goes from here to `lake-gc`).
//!
//! Where each rule lives:
//! - [`store`]: opening a lake root (`file://`, a local path, `s3://`) as an object store, with
//!   its resolved S3 settings; [`s3_requests`]: raw signed S3 requests (exact listings,
//!   incomplete multipart uploads, bulk deletes) configured from the same settings.
//! - [`layout`]: the keys of a lake (`_lake/`, `tables/`, `objects/`) and table-name rules.
//! - [`keys`]: the managed key grammar `objects/<ULID>/<name>` and its time order.
//! - [`descriptor`]: the lake descriptor and its GC policy floor (`min_age`).
//! - [`registry`]: the table registry, advanced by compare-and-swap on create-only documents.
//! - [`intents`]: write intents, the records of commits that may still land (GC keeps their
//!   references).
//! - [`writer`]: the managed object writer (streaming upload, SHA-256 while writing);
//!   [`reader`]: the verified object reader (whole objects and streams checked against their
//!   reference's size and SHA-256; unverified ranged reads).
//! - [`guard`]: the writer-side publication guard (refuse references to objects GC may delete).
//! - [`clock`]: "now" read from the store's clock.
//! - [`outside`]: where lake writes files that are not the lake's own (plans, checkpoints,
//!   metrics, copied-out objects): outside the root by any route, judged through a held folder
//!   handle at every write.
//! - [`failpoint`]: failure injection points for crash tests (test builds only).
//! - [`error`]: [`StoreError`] and the transient-or-permanent rule of any error chain;

pub mod clock;
pub mod descriptor;
pub mod error;
pub mod failpoint;
pub mod guard;
pub mod intents;
pub mod keys;
pub mod layout;
mod mount_table;
pub mod outside;
pub mod reader;
pub mod registry;
pub mod s3_requests;
pub mod store;
pub mod writer;

pub use error::StoreError;
pub use reader::{ObjectReader, ReadMany, VerifiedStream};
pub use store::LakeStore;
