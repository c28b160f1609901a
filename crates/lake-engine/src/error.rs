//! [`EngineError`].

use crate::lineage::LineageProblem;
use lake_common::ErrorKind;
use thiserror::Error;

/// An error of any type, boxed. `lake-engine` is below the crates that implement [`crate::Engine`]
/// (it cannot name their error types without a dependency cycle), so it keeps their errors boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors of an [`crate::Engine`].
///
/// # Transient or permanent
///
/// [`EngineError::is_transient`] says whether retrying the same call can help. This crate cannot
/// classify an implementation's errors itself (it cannot name their types), so the variants that
/// carry one record the implementation's verdict when they are built: [`EngineError::Storage`]
/// in `transient`, [`EngineError::Backend`] as its [`ErrorKind`] (for `lake-lance`:
/// `LanceEngineError::kind`). Every other variant is permanent: a table that cannot be
/// operated on, incomplete lineage and refused input fail the same way until someone changes
/// the lake.
#[derive(Debug, Error)]
pub enum EngineError {
    /// Storage could not be read or written (after retries, where the backend retries). `source`
    /// is the store's error; `transient` whether retrying can help.
    #[error("storage error at {path}: {source}")]
    Storage {
        /// The key or URL that failed.
        path: String,
        /// The store's error (an `object_store::Error`, an I/O error, ...).
        #[source]
        source: BoxError,
        /// Whether retrying can help (the implementation's classification of `source`).
        transient: bool,
    },
    /// The table cannot be opened or operated on.
    #[error("table `{table}`: {message}")]
    Table {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What is wrong, one phrase (e.g. `no such table`).
        message: String,
    },
    /// The journal needed to answer is incomplete or inconsistent.
    #[error("lineage of table `{table}` is incomplete: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Lineage {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The problems found.
        problems: Vec<LineageProblem>,
    },
    /// Input refused before anything was written.
    #[error("{0}")]
    InvalidInput(String),
    /// The engine implementation failed with an error of its own, kept whole as the source:
    /// downcast it to the implementation's type (for example `lake_lance::LanceEngineError`).
    #[error("{source}")]
    Backend {
        /// The implementation's error.
        #[source]
        source: BoxError,
        /// The implementation's kind of `source` (its `kind()`), which [`EngineError::kind`]
        /// gives and which decides whether retrying can help.
        kind: ErrorKind,
    },
}

impl EngineError {
    /// The error's kind ([`ErrorKind`]): [`ErrorKind::Unavailable`] or [`ErrorKind::Storage`]
    /// for [`EngineError::Storage`] (as `transient` says), [`ErrorKind::Table`],
    /// [`ErrorKind::LineageIncomplete`], [`ErrorKind::InvalidInput`], or the implementation's
    /// own for [`EngineError::Backend`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::Storage { transient, .. } => ErrorKind::store_failure(*transient),
            EngineError::Table { .. } => ErrorKind::Table,
            EngineError::Lineage { .. } => ErrorKind::LineageIncomplete,
            EngineError::InvalidInput(_) => ErrorKind::InvalidInput,
            EngineError::Backend { kind, .. } => *kind,
        }
    }

    /// Whether retrying the failed call can help, as its kind says ([`ErrorKind::is_transient`]):
    /// a [`EngineError::Storage`] its implementation classified as transient, or a
    /// [`EngineError::Backend`] of a transient kind.
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }

    /// An [`EngineError::Backend`] keeping `source` whole, with the implementation's kind of it.
    pub fn backend(source: impl std::error::Error + Send + Sync + 'static, kind: ErrorKind) -> Self {
        EngineError::Backend { source: Box::new(source), kind }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[derive(Debug, Error)]
    #[error("backend said no")]
    struct Inner;

    #[test]
    fn storage_and_backend_carry_their_verdict_and_source() {
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "read timed out");
        let e = EngineError::Storage { path: "s3://b/k".into(), source: Box::new(timeout), transient: true };
        assert!(e.is_transient());
        assert_eq!(e.to_string(), "storage error at s3://b/k: read timed out");
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the I/O error is the source");
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);

        let denied = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "403");
        let e = EngineError::Storage { path: "k".into(), source: Box::new(denied), transient: false };
        assert!(!e.is_transient());

        let e = EngineError::backend(Inner, ErrorKind::Corrupt);
        assert!(!e.is_transient());
        assert_eq!(e.kind(), ErrorKind::Corrupt, "the implementation names its error");
        assert_eq!(e.to_string(), "backend said no");
        assert!(e.source().is_some_and(|s| s.is::<Inner>()), "the backend's error is the source");
        assert!(EngineError::backend(Inner, ErrorKind::Conflict).is_transient());
    }

    #[test]
    fn refusals_and_lineage_are_permanent() {
        assert!(!EngineError::Table { table: "t".into(), message: "no such table".into() }.is_transient());
        assert!(!EngineError::Lineage { table: "t".into(), problems: Vec::new() }.is_transient());
        assert!(!EngineError::InvalidInput("bad".into()).is_transient());
    }
}
