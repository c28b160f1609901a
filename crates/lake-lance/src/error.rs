//! [`LanceEngineError`].

use lake_common::LocationError;
use lake_engine::EngineError;
use lake_objects::ObjectsError;
use thiserror::Error;

/// Errors of the Lance engine. Each names the table and what to do.
#[derive(Debug, Error)]
pub enum LanceEngineError {
    /// Lance refused or failed.
    #[error("table `{table}`: Lance {action} failed: {source}")]
    Lance { table: String, action: &'static str, source: lance::Error },
    /// A batch's references are invalid; nothing was committed.
    #[error("table `{table}`: invalid reference, nothing was committed: {source}")]
    Location { table: String, source: LocationError },
    /// Storage, registry or descriptor failure.
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    /// The table does not exist.
    #[error("table `{table}` does not exist in this lake (no dataset at {uri}); ingest into it first")]
    NoSuchTable { table: String, uri: String },
    /// The sidecar of a committed version could not be written; the registry was not advanced.
    #[error("table `{table}` version {version} was committed but its reference sidecar could not be written ({message}); GC refuses to apply until `lake refs repair` rebuilds it")]
    SidecarWrite { table: String, version: u64, message: String },
    /// The reference log of a streamed write could not be written; nothing was committed.
    #[error("table `{table}`: the write's reference log could not be written, nothing was committed: {message}")]
    JournalLog { table: String, message: String },
    /// A different sidecar already exists for the version.
    #[error("table `{table}` version {version} already has a different reference sidecar; refusing to overwrite the journal")]
    SidecarConflict { table: String, version: u64 },
    /// Another writer created the table while this write was creating it; nothing was committed.
    #[error("table `{table}` was created by another writer at the same time; nothing was committed. Retry the write: it will append")]
    ConcurrentCreate { table: String },
    /// The publication guard refused a reference (nothing was committed).
    #[error("table `{table}`: {source}")]
    Guard { table: String, source: lake_objects::guard::GuardError },
    /// Bad input refused before anything was written.
    #[error("{0}")]
    InvalidInput(String),
}

impl From<LanceEngineError> for EngineError {
    fn from(e: LanceEngineError) -> Self {
        match e {
            LanceEngineError::Objects(ObjectsError::Storage { path, message }) => {
                EngineError::Storage { path, message }
            }
            LanceEngineError::Lance { table, action, source } => {
                EngineError::Table { table, message: format!("Lance {action}: {source}") }
            }
            LanceEngineError::NoSuchTable { table, uri } => {
                EngineError::Table { table, message: format!("no dataset at {uri}") }
            }
            other => EngineError::InvalidInput(other.to_string()),
        }
    }
}
