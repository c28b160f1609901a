//! [`CliError`] and exit codes.

use lake_gc::GcError;
use lake_lance::LanceEngineError;
use thiserror::Error;

/// Everything a command can fail with.
///
/// [`CliError::is_transient`] says whether running the command again can help: the library
/// errors answer for themselves ([`GcError::is_transient`],
/// [`LanceEngineError::is_transient`], [`lake_engine::EngineError::is_transient`]), a local
/// file error as [`lake_gc::error::is_transient_error`] classifies it (timeouts,
/// interruptions, dropped connections), and usage errors, refusals and exits are permanent.
#[derive(Debug, Error)]
pub(crate) enum CliError {
    /// Refused before doing anything: bad flags or values.
    #[error("{0}")]
    Usage(String),
    /// Refused by a safety rule.
    #[error("{0}")]
    Refused(String),
    /// GC's errors, and the store's under the same kinds ([`GcError`]'s `From<StoreError>`).
    #[error(transparent)]
    Gc(#[from] GcError),
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

/// A store error is reported as GC's error of the same kind.
impl From<lake_store::StoreError> for CliError {
    fn from(e: lake_store::StoreError) -> Self {
        CliError::Gc(e.into())
    }
}

impl CliError {
    /// Whether running the command again can help (the rule is on [`CliError`]).
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            CliError::Gc(e) => e.is_transient(),
            CliError::Engine(e) => e.is_transient(),
            CliError::Lake(e) => e.is_transient(),
            CliError::Io { source, .. } => lake_gc::error::is_transient_error(source),
            CliError::Usage(_) | CliError::Refused(_) | CliError::Exit { .. } => false,
        }
    }

    /// The error's kind, a stable snake_case name (docs/gc.md, "Errors as JSON"): a refusal's
    /// kind ([`lake_store::Refusal`]) or the library error's ([`GcError::kind`]: the store's
    /// kinds, `object_missing`, `object_mismatch` and `object_unreachable` among them,
    /// [`LanceEngineError::kind`], [`lake_engine::EngineError::kind`]); `usage` for bad flags,
    /// `refused` for the CLI's own refusals of input, `io` for a local file, `exit` for a result
    /// that calls for a non-zero exit.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            CliError::Usage(_) => "usage",
            CliError::Refused(_) => "refused",
            CliError::Gc(e) => e.kind(),
            CliError::Engine(e) => e.kind(),
            CliError::Lake(e) => e.kind(),
            CliError::Io { .. } => "io",
            CliError::Exit { .. } => "exit",
        }
    }

    /// The error as one JSON object, for `--json`: `{"error": {"kind", "message", "transient"}}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": { "kind": self.kind(), "message": self.to_string(), "transient": self.is_transient() }
        })
    }

    /// The process exit code: 4 when an apply stopped because a version committed since its
    /// plan has no journal entry yet (a writer between its commit and its journal entry: work
    /// left, run the same command again), 1 for every other failure.
    pub(crate) fn exit_code(&self) -> u8 {
        match self {
            CliError::Exit { code, .. } => *code,
            CliError::Gc(GcError::JournalPending { .. }) => 4,
            _ => 1,
        }
    }
}

/// Checks a numeric flag's value against the range it may take, naming the flag and why.
///
/// # Errors
/// [`CliError::Usage`].
pub(crate) fn check_range(
    flag: &str,
    value: u64,
    range: std::ops::RangeInclusive<u64>,
    why: &str,
) -> Result<(), CliError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(CliError::Usage(format!(
        "{flag} {value} must be between {} and {} ({why}); nothing was done",
        range.start(),
        range.end()
    )))
}

/// The largest memory budget a command accepts, in MiB (1 TiB): past the machine's memory a
/// budget no longer bounds anything, it only delays the spill until the process is killed.
pub(crate) const MAX_MEMORY_BUDGET_MIB: u64 = 1 << 20;

/// A memory budget flag (`--memory-budget-mib`) in bytes, checked: at least 1 MiB (0 would
/// spill every key to a file of its own), at most [`MAX_MEMORY_BUDGET_MIB`].
///
/// # Errors
/// [`CliError::Usage`].
pub(crate) fn memory_budget_bytes(mib: usize) -> Result<usize, CliError> {
    check_range(
        "--memory-budget-mib",
        mib as u64,
        1..=MAX_MEMORY_BUDGET_MIB,
        "MiB of sorted-run buffers held before spilling to TMPDIR; 0 would spill every key alone",
    )?;
    Ok(mib.saturating_mul(1024 * 1024))
}

/// Parses a humantime duration flag and checks it against `min..=max`.
///
/// # Errors
/// [`CliError::Usage`].
pub(crate) fn parse_duration_within(
    flag: &str,
    text: &str,
    min: std::time::Duration,
    max: std::time::Duration,
    why: &str,
) -> Result<std::time::Duration, CliError> {
    let d = parse_duration(flag, text)?;
    if d < min || d > max {
        return Err(CliError::Usage(format!(
            "{flag} {text} must be between {} and {} ({why}); nothing was done",
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(d)
}

/// Parses a humantime duration, naming the flag on error.
///
/// # Errors
/// [`CliError::Usage`].
pub(crate) fn parse_duration(flag: &str, text: &str) -> Result<std::time::Duration, CliError> {
    humantime::parse_duration(text.trim())
        .map_err(|e| CliError::Usage(format!("{flag} `{text}` is not a duration ({e}); write it like 7d, 90m or 1s")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_transient_delegates() {
        let reset = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert!(CliError::Gc(GcError::storage("k", reset())).is_transient());
        assert!(CliError::Engine(LanceEngineError::ConcurrentCreate { table: "t".into() }).is_transient());
        assert!(CliError::Io { path: "p".into(), source: reset() }.is_transient());
        let engine = lake_engine::EngineError::Storage { path: "k".into(), source: Box::new(reset()), transient: true };
        assert!(CliError::Lake(engine).is_transient());
        assert!(!CliError::Gc(GcError::refused(lake_store::Refusal::Horizon, "no")).is_transient());
        assert!(!CliError::Usage("bad flag".into()).is_transient());
        assert!(!CliError::Refused("no".into()).is_transient());
        assert!(!CliError::Exit { code: 3, message: "incomplete".into() }.is_transient());
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "missing");
        assert!(!CliError::Io { path: "p".into(), source: missing }.is_transient());
    }

    /// The verified reads' errors (`lake cat`, `lake get`) keep the store's kinds, whichever
    /// library error carries them.
    #[test]
    fn object_errors_keep_their_kinds() {
        use lake_store::StoreError;
        let mismatch = || StoreError::ObjectMismatch {
            key: "objects/k/a".into(),
            expected_size: 1,
            actual_size: 2,
            expected_sha256: [0; 32],
            actual_sha256: None,
        };
        let unreachable = || StoreError::ObjectUnreachable { uri: "https://h/x".into(), reason: "outside".into() };
        for (error, kind) in [
            (CliError::from(StoreError::ObjectMissing { key: "objects/k/a".into() }), "object_missing"),
            (CliError::from(mismatch()), "object_mismatch"),
            (CliError::from(unreachable()), "object_unreachable"),
            (CliError::Engine(LanceEngineError::Objects(mismatch())), "object_mismatch"),
            (CliError::Engine(LanceEngineError::Objects(unreachable())), "object_unreachable"),
        ] {
            assert_eq!(error.kind(), kind, "{error}");
            assert_eq!(error.to_json()["error"]["kind"], kind);
            assert!(!error.is_transient() && error.exit_code() == 1, "{error}");
        }
    }

    #[test]
    fn numeric_flags_are_bounded() {
        assert!(check_range("--x", 0, 1..=4, "why").is_err());
        assert!(check_range("--x", 5, 1..=4, "why").is_err());
        assert!(check_range("--x", 4, 1..=4, "why").is_ok());
        assert!(memory_budget_bytes(0).is_err());
        assert!(memory_budget_bytes(usize::MAX).is_err());
        assert_eq!(memory_budget_bytes(2).unwrap(), 2 << 20);
        let s = std::time::Duration::from_secs;
        assert!(parse_duration_within("--d", "0s", s(1), s(9), "why").is_err());
        assert!(parse_duration_within("--d", "10s", s(1), s(9), "why").is_err());
        assert_eq!(parse_duration_within("--d", "9s", s(1), s(9), "why").unwrap(), s(9));
        let pending = CliError::Gc(GcError::JournalPending { pending: vec![("t".into(), 3)] });
        assert_eq!(pending.exit_code(), 4);
        assert!(pending.is_transient());
    }
}
