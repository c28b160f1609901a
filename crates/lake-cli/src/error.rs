//! [`CliError`] and exit codes.

use lake_lance::LanceEngineError;
use lake_objects::ObjectsError;
use thiserror::Error;

/// Everything a command can fail with.
///
/// [`CliError::is_transient`] says whether running the command again can help: the library
/// errors answer for themselves ([`ObjectsError::is_transient`],
/// [`LanceEngineError::is_transient`], [`lake_engine::EngineError::is_transient`]), a local
/// file error as [`lake_objects::error::is_transient_error`] classifies it (timeouts,
/// interruptions, dropped connections), and usage errors, refusals and exits are permanent.
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
    /// Whether running the command again can help (the rule is on [`CliError`]).
    #[cfg_attr(not(test), allow(dead_code, reason = "the binary does not act on it yet; its tests check it"))]
    pub fn is_transient(&self) -> bool {
        match self {
            CliError::Objects(e) => e.is_transient(),
            CliError::Engine(e) => e.is_transient(),
            CliError::Lake(e) => e.is_transient(),
            CliError::Io { source, .. } => lake_objects::error::is_transient_error(source),
            CliError::Usage(_) | CliError::Refused(_) | CliError::Exit { .. } => false,
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_transient_delegates() {
        let reset = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(CliError::Objects(ObjectsError::storage("k", reset())).is_transient());
        assert!(CliError::Engine(LanceEngineError::ConcurrentCreate { table: "t".into() }).is_transient());
        assert!(CliError::Io { path: "p".into(), source: reset() }.is_transient());
        let engine = lake_engine::EngineError::Storage { path: "k".into(), source: Box::new(reset()), transient: true };
        assert!(CliError::Lake(engine).is_transient());
        assert!(!CliError::Objects(ObjectsError::Policy("no".into())).is_transient());
        assert!(!CliError::Usage("bad flag".into()).is_transient());
        assert!(!CliError::Refused("no".into()).is_transient());
        assert!(!CliError::Exit { code: 3, message: "incomplete".into() }.is_transient());
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "missing");
        assert!(!CliError::Io { path: "p".into(), source: missing }.is_transient());
    }
}
