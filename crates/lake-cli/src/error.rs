//! [`CliError`] and exit codes.

use lake::collect::GcError;
use lake::common::ErrorKind;
use lake::lance::LanceEngineError;
use thiserror::Error;

/// Everything a command can fail with.
///
/// Each error has one [`ErrorKind`] ([`CliError::kind`]): the library errors answer for
/// themselves, a local file error is a store failure classified like the store's
/// ([`lake::collect::error::is_transient_error`]), bad flags and the CLI's own refusals of input are
/// [`ErrorKind::InvalidInput`], and a result that calls for a non-zero exit carries its kind.
/// The exit code and the `--json` error are tables over that kind ([`exit_code`]).
#[derive(Debug, Error)]
pub(crate) enum CliError {
    /// Refused before doing anything: bad flags or values.
    #[error("{0}")]
    Usage(String),
    /// Refused by a rule of the CLI (a destination, a combination of inputs).
    #[error("{0}")]
    Refused(String),
    /// GC's errors, and the store's under the same kinds ([`GcError`]'s `From<StoreError>`).
    #[error(transparent)]
    Gc(#[from] GcError),
    #[error(transparent)]
    Engine(#[from] LanceEngineError),
    #[error(transparent)]
    Lake(#[from] lake::engine::EngineError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The command ran, reported its result, and that result is a failure of kind `kind`
    /// (already reported).
    #[error("{message}")]
    Exit { kind: ErrorKind, message: String },
}

/// A store error is reported as GC's error of the same kind.
impl From<lake::store::StoreError> for CliError {
    fn from(e: lake::store::StoreError) -> Self {
        CliError::Gc(e.into())
    }
}

/// The process exit code of a failure of kind `kind` (docs/errors.md):
/// - 3: [`ErrorKind::LineageIncomplete`] and [`ErrorKind::PlanIncomplete`]: the journal cannot
///   account for a table's versions; repair, then plan again;
/// - 4: [`ErrorKind::JournalPending`] and [`ErrorKind::Incomplete`]: work is left (a writer
///   between its commit and its journal entry, failed deletes, a page limit reached, write
///   intents still pending); run the same command again;
/// - 1: every other kind.
pub(crate) const fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::LineageIncomplete | ErrorKind::PlanIncomplete => 3,
        ErrorKind::JournalPending | ErrorKind::Incomplete => 4,
        _ => 1,
    }
}

impl CliError {
    /// The error's kind ([`ErrorKind`]; its name is `--json`'s `kind`).
    pub(crate) fn kind(&self) -> ErrorKind {
        match self {
            CliError::Usage(_) | CliError::Refused(_) => ErrorKind::InvalidInput,
            CliError::Gc(e) => e.kind(),
            CliError::Engine(e) => e.kind(),
            CliError::Lake(e) => e.kind(),
            CliError::Io { source, .. } => ErrorKind::store_failure(lake::collect::error::is_transient_error(source)),
            CliError::Exit { kind, .. } => *kind,
        }
    }

    /// Whether running the command again can help, as its kind says.
    pub(crate) fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }

    /// The error as one JSON object, for `--json`: `{"error": {"kind", "message", "transient"}}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "kind": self.kind().as_str(),
                "message": self.to_string(),
                "transient": self.is_transient(),
                "hints": crate::remedy::hints(&self.to_string()),
            }
        })
    }

    /// The process exit code: [`exit_code`] of the error's kind.
    pub(crate) fn exit_code(&self) -> u8 {
        exit_code(self.kind())
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
        let engine =
            lake::engine::EngineError::Storage { path: "k".into(), source: Box::new(reset()), transient: true };
        assert!(CliError::Lake(engine).is_transient());
        assert!(!CliError::Gc(GcError::refused(ErrorKind::Horizon, "no")).is_transient());
        assert!(!CliError::Usage("bad flag".into()).is_transient());
        assert!(!CliError::Refused("no".into()).is_transient());
        assert!(!CliError::Exit { kind: ErrorKind::LineageIncomplete, message: "incomplete".into() }.is_transient());
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "missing");
        assert!(!CliError::Io { path: "p".into(), source: missing }.is_transient());
    }

    /// The verified reads' errors (`lake cat`, `lake get`) keep the store's kinds, whichever
    /// library error carries them.
    #[test]
    fn object_errors_keep_their_kinds() {
        use lake::store::StoreError;
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
            assert_eq!(error.kind().as_str(), kind, "{error}");
            assert_eq!(error.to_json()["error"]["kind"], kind);
            assert!(!error.is_transient() && error.exit_code() == 1, "{error}");
        }
    }

    /// docs/errors.md lists every kind once, in the enum's order, with whether it is transient
    /// and its exit code (the Python classes are checked against the same table by Python's
    /// `test_errors.py`).
    #[test]
    fn docs_list_every_kind() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/errors.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<Vec<String>> = text
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| l.split('|').map(|c| c.trim().trim_matches('`').to_string()).collect())
            .collect();
        let listed: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
        let kinds: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(listed, kinds, "docs/errors.md lists the kinds of ErrorKind::ALL, in order");
        for (row, kind) in rows.iter().zip(ErrorKind::ALL) {
            let transient = if kind.is_transient() { "yes" } else { "no" };
            assert_eq!(row[2], transient, "{kind}: transient");
            assert_eq!(row[3], exit_code(kind).to_string(), "{kind}: exit code");
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
