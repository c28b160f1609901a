//! [`GcError`]: every refusal of garbage collection, each naming what was wrong and what to do.
//!
//! The store's errors arrive whole as [`GcError::Store`]; GC's safety rules refuse with
//! [`GcError::Refused`], whose kind names the rule. [`GcError::kind`] maps every error to its
//! [`ErrorKind`] once. Errors keep what they came from (a storage error's source is the store's
//! error), and [`is_transient_error`] classifies any error chain as transient or permanent,
//! GC's errors included at any depth.

use lake_common::ErrorKind;
use lake_engine::{EngineError, LineageProblem};
use lake_store::error::{transient_verdict, StoreError};
use std::error::Error as StdError;
use thiserror::Error;

pub use lake_engine::error::BoxError;

/// Errors of planning and apply; the store's errors arrive whole as [`GcError::Store`].
///
/// # Transient or permanent
///
/// [`GcError::is_transient`] says whether retrying the same operation can help:
/// - [`GcError::Store`]: as [`StoreError::is_transient`] (storage and local file errors as
///   their source says, a registry race is transient, refusals are permanent).
/// - [`GcError::Engine`]: as [`EngineError::is_transient`].
/// - [`GcError::JournalPending`]: transient (a writer is between its commit and its entry).
/// - Everything else is permanent: lineage problems, checkpoints, outputs and inventory reports
///   fail the same way until someone changes the lake or the request.
#[derive(Debug, Error)]
pub enum GcError {
    /// The store refused or failed: storage and local file errors, a root or destination GC may
    /// not use, a corrupt document, ...
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A GC safety rule refused the request; nothing was deleted or written. `kind` names the
    /// rule (one of the kinds [`ErrorKind::is_refusal`] accepts), `message` says what was
    /// wrong and what to do.
    #[error("{message}")]
    Refused {
        /// Which rule.
        kind: ErrorKind,
        /// What was wrong, and what to do.
        message: String,
    },
    /// Lineage is incomplete: apply refuses.
    #[error("lineage is incomplete; nothing was deleted. Problems:\n  - {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n  - "))]
    LineageIncomplete {
        /// Every problem found, across the tables checked.
        problems: Vec<LineageProblem>,
    },
    /// The plan was made on incomplete lineage: apply refuses it.
    #[error("the plan was made on incomplete lineage and cannot be applied; nothing was deleted. Fix these, then plan again:\n  - {}", problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("\n  - "))]
    PlanIncomplete {
        /// The problems, as the plan (or shard manifest) records them.
        problems: Vec<crate::plan::PlanProblem>,
    },
    /// The checkpoint belongs to another plan or another format.
    #[error("checkpoint `{path}`: {message}")]
    Checkpoint {
        /// The checkpoint's location as shown: a local path, or the URL the operator wrote.
        path: String,
        /// What is wrong, and what to do.
        message: String,
    },
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A document lake writes for an operator (a plan, a sharded plan's folder, a metrics
    /// file) may not be written there: over a file of another kind, a folder, a device, or in a
    /// folder that does not exist ([`crate::output`]; a destination inside the lake root is a
    /// [`StoreError::Root`]). Nothing was written.
    #[error("`{path}`: {message}")]
    Output {
        /// What is at fault, as shown: the destination's path, a flag and its value, or a document's lake root.
        path: String,
        /// Why it may not be written there, and what to do.
        message: String,
    },
    /// Apply met a version committed since its plan whose journal entry is not there: most
    /// likely a writer between its Lance commit and its journal entry (which it writes right
    /// after), else a writer that crashed there. Nothing more was deleted; the checkpoint
    /// records the progress. Transient: the same command, run again once the writer finished,
    /// resumes ([`crate::apply`]).
    #[error("{}", journal_pending_message(pending))]
    JournalPending {
        /// The tables and versions without a journal entry, each committed since the plan.
        pending: Vec<(String, u64)>,
    },
    /// An S3 Inventory report was refused ([`crate::inventory::report`]); nothing was planned
    /// from it.
    #[error("S3 Inventory report `{manifest}` refused; nothing was planned: {problem}")]
    InventoryReport {
        /// The manifest's URL, `s3://bucket/.../manifest.json`.
        manifest: String,
        /// What was wrong, and what to do (boxed: the error stays small).
        problem: Box<crate::inventory::report::ReportProblem>,
    },
}

/// What [`GcError::JournalPending`] says: the versions, and what to do in each case, without
/// advising a repair that would race a live writer.
fn journal_pending_message(pending: &[(String, u64)]) -> String {
    let versions: Vec<String> = pending.iter().map(|(t, v)| format!("table `{t}` version {v}")).collect();
    let repairs: Vec<String> =
        pending.iter().map(|(t, v)| format!("`refs repair` (table `{t}`, version {v})")).collect();
    format!(
        "apply stopped: {} was committed since the plan and has no journal entry yet; nothing more was deleted (the checkpoint records the progress). If a writer is running on that table, it is between its Lance commit and its journal entry, which it writes next: run the same command again once it has finished, and the apply resumes (do not repair: a repair now would race the writer). Only if no writer is running (one crashed after its commit, or the version was written around the engine) repair it with {}, then run the same command again",
        versions.join(", "),
        repairs.join(", ")
    )
}

/// A spill folder (the temporary folder of an external sort) that failed is a local file error.
impl From<lake_engine::spill::SpillError> for GcError {
    fn from(e: lake_engine::spill::SpillError) -> Self {
        GcError::Store(StoreError::Io { path: e.path, source: e.source })
    }
}

impl GcError {
    /// A refusal by the rule `kind` (one [`ErrorKind::is_refusal`] accepts) saying `message`.
    pub fn refused(kind: ErrorKind, message: impl Into<String>) -> Self {
        debug_assert!(kind.is_refusal(), "{kind} is not a refusal");
        Self::Refused { kind, message: message.into() }
    }

    /// The error's kind ([`ErrorKind`]), mapped once here: the store's for
    /// [`GcError::Store`] (a storage or local file error's source judged by
    /// [`is_transient_error`], which sees GC's errors too), the engine's for
    /// [`GcError::Engine`], the rule's for [`GcError::Refused`], else the variant's own.
    pub fn kind(&self) -> ErrorKind {
        match self {
            GcError::Store(e) => Self::kind_of_store(e),
            GcError::Refused { kind, .. } => *kind,
            GcError::Engine(e) => e.kind(),
            GcError::LineageIncomplete { .. } => ErrorKind::LineageIncomplete,
            GcError::PlanIncomplete { .. } => ErrorKind::PlanIncomplete,
            GcError::Checkpoint { .. } => ErrorKind::Checkpoint,
            GcError::Output { .. } => ErrorKind::Output,
            GcError::JournalPending { .. } => ErrorKind::JournalPending,
            GcError::InventoryReport { .. } => ErrorKind::InventoryReport,
        }
    }

    /// A storage error for `path`, keeping `e` as its source: an error (`object_store::Error`,
    /// `std::io::Error`, ...) or a message (`&str`, `String`) where no error caused it.
    pub fn storage(path: impl Into<String>, e: impl Into<BoxError>) -> Self {
        Self::Store(StoreError::storage(path, e))
    }

    /// The refusal of the S3 Inventory report at `manifest` (its URL) for `problem`.
    pub fn report(manifest: impl Into<String>, problem: crate::inventory::report::ReportProblem) -> Self {
        Self::InventoryReport { manifest: manifest.into(), problem: Box::new(problem) }
    }

    /// Why an S3 Inventory report was refused, for an [`GcError::InventoryReport`].
    pub fn report_problem(&self) -> Option<&crate::inventory::report::ReportProblem> {
        match self {
            Self::InventoryReport { problem, .. } => Some(problem),
            _ => None,
        }
    }

    /// Whether retrying the failed operation can help, as its kind says (the rule is on
    /// [`GcError`]).
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }
}

impl GcError {
    /// The kind of a store error seen from GC: as [`GcError::kind`] of [`GcError::Store`].
    fn kind_of_store(e: &StoreError) -> ErrorKind {
        match e {
            StoreError::Storage { source, .. } => ErrorKind::store_failure(is_transient_error(source.as_ref())),
            StoreError::Io { source, .. } => ErrorKind::store_failure(is_transient_error(source)),
            other => other.kind(),
        }
    }
}

/// Whether retrying can help with `error`, judged by the first error in its source chain (itself
/// first) whose type decides: [`GcError`] by [`GcError::is_transient`], a [`StoreError`] by the
/// store's rule with its source judged here again, every other type by the store's rules
/// ([`lake_store::error::is_transient_error`]).
pub fn is_transient_error(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        let verdict = if let Some(gc) = e.downcast_ref::<GcError>() {
            Some(gc.is_transient())
        } else if let Some(store) = e.downcast_ref::<StoreError>() {
            Some(GcError::kind_of_store(store).is_transient())
        } else {
            transient_verdict(e)
        };
        if let Some(verdict) = verdict {
            return verdict;
        }
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind as IoKind;

    fn io(kind: IoKind) -> std::io::Error {
        std::io::Error::new(kind, format!("{kind:?}"))
    }

    #[test]
    fn store_errors_keep_their_kind_and_class() {
        let e: GcError = StoreError::storage("objects/k", io(IoKind::ConnectionReset)).into();
        assert!(e.kind() == ErrorKind::Unavailable && e.is_transient());
        let e: GcError = StoreError::Registry { table: "t".into(), message: "lost".into() }.into();
        assert!(e.kind() == ErrorKind::Conflict && e.is_transient());
        let e: GcError = StoreError::NotALake { root: "r".into(), key: "k".into() }.into();
        assert!(e.kind() == ErrorKind::NotALake && !e.is_transient());
        for kind in ErrorKind::ALL.into_iter().filter(|k| k.is_refusal()) {
            let gc = GcError::refused(kind, "m");
            assert!(gc.kind() == kind && !gc.is_transient());
        }
    }

    #[test]
    fn lake_errors_by_class() {
        assert!(GcError::JournalPending { pending: vec![("t".into(), 3)] }.is_transient());
        let storage =
            EngineError::Storage { path: "k".into(), source: Box::new(io(IoKind::TimedOut)), transient: true };
        assert!(GcError::Engine(storage).is_transient());
        let permanent = [
            GcError::refused(ErrorKind::PolicyFloor, "below the floor"),
            GcError::LineageIncomplete { problems: Vec::new() },
            GcError::PlanIncomplete { problems: vec![crate::plan::PlanProblem::new("p", "p")] },
            GcError::Checkpoint { path: "c".into(), message: "m".into() },
            GcError::Output { path: "o".into(), message: "m".into() },
            GcError::Engine(EngineError::Lineage { table: "t".into(), problems: Vec::new() }),
            GcError::Engine(EngineError::InvalidInput("bad".into())),
        ];
        for e in permanent {
            assert!(!e.is_transient(), "{e}");
        }
        // Nested: a GcError boxed as another error's source decides for it.
        let nested = GcError::storage("k", GcError::JournalPending { pending: vec![("t".into(), 3)] });
        assert!(nested.is_transient());
        let nested = GcError::storage("k", GcError::refused(ErrorKind::Horizon, "no"));
        assert!(!nested.is_transient());
        // At any depth, under the store's errors too.
        let pending = GcError::JournalPending { pending: vec![("t".into(), 3)] };
        assert!(GcError::storage("k", StoreError::storage("k2", pending)).is_transient());
        let refusal = GcError::refused(ErrorKind::Horizon, "no");
        assert!(!GcError::storage("k", StoreError::storage("k2", refusal)).is_transient());
    }
}
