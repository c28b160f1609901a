//! The Lance engine of lake: every version-producing operation journals its references.
//!
//! - [`commit`]: **the write protocol**, written once: every version-producing operation hands
//!   it a change and it runs resolution, the intent, the guard, revocation, Lance's commit (the
//!   one `CommitBuilder`, the one commit handler, the marker), the journal entry, the registry
//!   and the end of the intent; `lake refs recover` (docs/protocol.md).
//! - [`binding`]: journal entries bound to their Lance versions (transaction UUID, manifest
//!   size and e-tag), and [`binding::transaction_uuid`], the one reader of a version's UUID.
//! - [`branch`]: Lance branches as lineages of their own (`table@branch`), journaled and
//!   registered like tables.
//! - [`columns`]: schema evolution (add columns from a stream, drop, rename), journaled from
//!   the two manifests.
//! - [`engine`]: [`LanceEngine`] (opening datasets, versions) and the [`lake_engine::Engine`]
//!   implementation (lineage from `Dataset::versions()` and the journal).
//! - Operations, each a change for [`commit`]: `write` (append, overwrite, create), `delete`,
//!   `maintenance` (compaction, cleanup), [`upsert`], [`update`], [`columns`], [`index`],
//!   [`history`] (restore), [`branch`], [`two_phase`], [`settings`] (config).
//! - [`foreign`]: versions whose Lance transaction proves them content-preserving (implied
//!   empty journal entries, no repair needed).
//! - [`history`]: restore (a snapshot from the journal, source protected by a tag, stale tags of
//!   killed restores removed) and tags of one lineage.
//! - [`index`]: index creation and removal (content-preserving versions).
//! - [`ingest`]: folder ingest (walk, streamed uploads, one append of a row per file).
//! - `journal_garbage`: reference logs of writes that never committed (GC's own garbage).
//! - `lineage`: a table's lineage, stamp and structural problems (branches, base paths).
//! - `live`: the live references of a table for planning, streamed in bounded memory.
//! - `log_upload`: sorted and row reference logs streamed to the store in parts (large entries).
//! - [`refs`]: `lake refs verify` (journal vs full scans) and `lake refs repair`.
//! - [`refs_checkpoint`]: the reference checkpoint that lets replay start past version 1.
//! - [`rows`]: reading rows back ([`LanceEngine::read_rows`], [`LanceEngine::read_rows_stream`]:
//!   row offsets, a predicate or every row of the latest version, with chosen columns).
//! - [`journaling`]: the stream wrapper that counts references per batch as Lance consumes it.
//! - [`sidecar`]: reading and create-only writing of `_lake/object_refs/<version>.json`.
//! - [`scan`]: reference counts of a version by scanning its DataLocation columns.
//! - [`settings`]: table settings that let Lance remove versions on its own (auto-cleanup): a
//!   named lineage problem, and the engine's command that unsets them.
//! - [`sql`]: the rule that a predicate or an assigned expression is exactly one SQL expression.
//! - [`uncommitted`]: what a write that never committed leaves, removed by the write itself
//!   when it is refused, or by `lake cleanup` when it was killed.
//! - [`two_phase`]: journaled two-phase writes (workers prepare pieces, one commit of them
//!   all: Lance's distributed write).
//! - [`update`]: `UPDATE ... SET ... WHERE` journaled as a delta of the reference columns set.
//! - [`upsert`]: merge insert keyed on columns, journaled from the two manifests.
//! - `version_diff`: a version's journal entry from the fragments that differ from the previous version's.
//! - [`verify`]: read back every object a retained version references (SHA-256 and size).
//! - [`verify_refs`]: `lake refs verify` in bounded memory (journal vs full scans, object HEADs).
//! - [`error`]: the engine's typed errors, [`LanceEngineError`].

pub mod binding;
pub mod branch;
pub mod columns;
pub mod commit;
mod delete;
pub mod engine;
pub mod error;
pub mod foreign;
pub mod history;
pub mod index;
pub mod ingest;
mod journal_garbage;
pub mod journaling;
mod lineage;
mod live;
mod log_upload;
mod maintenance;
pub mod refs;
pub mod refs_checkpoint;
mod removals;
pub mod rows;
pub mod scan;
pub mod settings;
pub mod sidecar;
pub mod sql;
pub mod two_phase;
pub mod uncommitted;
pub mod update;
pub mod upsert;
pub mod verify;
pub mod verify_refs;
mod version_diff;
mod write;

pub use engine::{CleanupOutcome, CommitOutcome, LanceEngine, VersionInfo};
pub use error::LanceEngineError;
pub use rows::RowSelection;
pub use two_phase::{PieceMode, PreparedPiece};
