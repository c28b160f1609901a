//! [`CliError`] and exit codes.

use lake_lance::LanceEngineError;
use lake_objects::ObjectsError;
use thiserror::Error;

/// Everything a command can fail with.
#[derive(Debug, Error)]
pub enum CliError {
    /// Refused before doing anything: bad flags or values.
    #[error("{0}")]
    Usage(String),
    /// Refused by a safety rule.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Objects(#[from] ObjectsError),
    #[error(transparent)]
    Engine(#[from] LanceEngineError),
    #[error(transparent)]
    Lake(#[from] lake_engine::EngineError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The command ran but its result calls for a non-zero exit (already reported).
    #[error("{message}")]
    Exit { code: u8, message: String },
}

impl CliError {
    /// The process exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Exit { code, .. } => *code,
            _ => 1,
        }
    }
}

/// Parses a humantime duration, naming the flag on error.
///
/// # Errors
/// [`CliError::Usage`].
pub fn parse_duration(flag: &str, text: &str) -> Result<std::time::Duration, CliError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| CliError::Usage(format!("{flag} `{text}` is not a duration ({e}); write it like 7d, 90m or 1s")))
}
