//! [`EngineError`].

use crate::lineage::LineageProblem;
use thiserror::Error;

/// Errors of an [`crate::Engine`].
#[derive(Debug, Error)]
pub enum EngineError {
    /// Storage could not be read or written (after retries, where the backend retries).
    #[error("storage error at {path}: {message}")]
    Storage { path: String, message: String },
    /// The table cannot be opened or operated on.
    #[error("table `{table}`: {message}")]
    Table { table: String, message: String },
    /// The journal needed to answer is incomplete or inconsistent.
    #[error("lineage of table `{table}` is incomplete: {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("; "))]
    Lineage { table: String, problems: Vec<LineageProblem> },
    /// Input refused before anything was written.
    #[error("{0}")]
    InvalidInput(String),
}
