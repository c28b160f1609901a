//! [`ObjectsError`]: every refusal of this crate, each naming what was wrong and what to do.

use lake_engine::{EngineError, LineageProblem};
use thiserror::Error;

/// Errors of storage, planning and apply.
#[derive(Debug, Error)]
pub enum ObjectsError {
    /// A storage request failed.
    #[error("storage error at `{path}`: {message}")]
    Storage { path: String, message: String },
    /// The lake root is unusable.
    #[error("lake root `{root}`: {message}")]
    Root { root: String, message: String },
    /// No lake descriptor at the root.
    #[error("no lake at `{root}` (missing {key}); create one with `lake init {root}`")]
    NotALake { root: String, key: String },
    /// A document (descriptor, registry entry, plan, checkpoint) failed to decode.
    #[error("`{path}` is not a valid {what}: {message}")]
    Corrupt { path: String, what: &'static str, message: String },
    /// The GC policy refused the request.
    #[error("{0}")]
    Policy(String),
    /// A table name breaks the naming rule.
    #[error("invalid table name `{0}`: use 1 to 64 characters of A-Z, a-z, 0-9, `_` and `-`")]
    TableName(String),
    /// The registry could not be advanced.
    #[error("registry of table `{table}`: {message}")]
    Registry { table: String, message: String },
    /// Lineage is incomplete: apply refuses.
    #[error("lineage is incomplete; nothing was deleted. Problems:\n  - {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n  - "))]
    LineageIncomplete { problems: Vec<LineageProblem> },
    /// The plan was made on incomplete lineage: apply refuses it.
    #[error("the plan was made on incomplete lineage and cannot be applied; nothing was deleted. Fix these, then plan again:\n  - {}", problems.join("\n  - "))]
    PlanIncomplete { problems: Vec<String> },
    /// The checkpoint belongs to another plan or another format.
    #[error("checkpoint `{path}`: {message}")]
    Checkpoint { path: String, message: String },
    /// A failure injected by a crash test (never in production builds).
    #[error("injected failure at `{0}` (a simulated crash)")]
    Injected(&'static str),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// A spill folder (the temporary folder of an external sort) that failed is a local file error.
impl From<lake_engine::spill::SpillError> for ObjectsError {
    fn from(e: lake_engine::spill::SpillError) -> Self {
        ObjectsError::Io { path: e.path, source: e.source }
    }
}

impl ObjectsError {
    /// A storage error for `path`.
    pub fn storage(path: impl Into<String>, e: impl std::fmt::Display) -> Self {
        Self::Storage { path: path.into(), message: e.to_string() }
    }
}
