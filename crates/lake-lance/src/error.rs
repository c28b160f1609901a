//! [`LanceEngineError`].

use lake_common::{ErrorKind, LocationError};
use lake_engine::EngineError;
use lake_store::error::is_transient_error;
use lake_store::StoreError;
use std::error::Error as StdError;
use thiserror::Error;

/// Errors of the Lance engine. Each names the table and what to do.
///
/// # Transient or permanent
///
/// [`LanceEngineError::kind`] maps each error to its [`ErrorKind`] once, and
/// [`LanceEngineError::is_transient`] answers from it whether retrying the same operation can
/// help:
/// - [`LanceEngineError::Lance`]: as [`lance_kind`] classifies the `lance::Error`:
///   Lance's own timeouts, retryable commit conflicts, write contention and backpressure, and
///   I/O failures whose store error is transient (throttling, timeouts, dropped connections:
///   see [`lake_store::error::is_transient_error`]).
/// - [`LanceEngineError::Objects`]: as [`StoreError::is_transient`].
/// - [`LanceEngineError::ConcurrentCreate`]: transient (the retry appends to the table the other
///   writer created).
/// - [`LanceEngineError::NotCommitted`]: as the failure it carries (the commit is proven not to
///   land, so a retry commits once).
/// - Everything else is permanent: invalid references, a missing table, a journal conflict, a
///   guard refusal, bad input. So are [`LanceEngineError::SidecarWrite`],
///   [`LanceEngineError::Unjournaled`] and [`LanceEngineError::CommittedUnchecked`]: the version
///   is committed, and retrying the write would commit another one. So is
///   [`LanceEngineError::CommitUncertain`]: the version may still land, and a blind retry could
///   commit the rows twice; `lake refs recover` tells.
///
/// # Committed or not
///
/// Every variant whose message says "nothing was committed" is returned only before the write's
/// Lance commit (or, for [`LanceEngineError::NotCommitted`], once it is proven that it can no
/// longer land). [`LanceEngineError::SidecarWrite`], [`LanceEngineError::Unjournaled`] and
/// [`LanceEngineError::CommittedUnchecked`] say which version was committed
/// ([`LanceEngineError::committed_version`]).
#[derive(Debug, Error)]
pub enum LanceEngineError {
    /// Lance refused or failed.
    #[error("table `{table}`: Lance {action} failed: {source}")]
    Lance {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What lake asked Lance to do (e.g. `create index`, `fence`).
        action: &'static str,
        /// Lance's error.
        source: lance::Error,
    },
    /// A batch's references are invalid, refused before the commit: nothing was committed.
    /// Only writes return it, and only before they commit.
    #[error("table `{table}`: invalid reference, nothing was committed: {source}")]
    Location {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What is wrong with the references.
        source: LocationError,
    },
    /// A version's columns or values cannot be read with certainty (a scan, a repair, a
    /// verification, the journal entry of a version): what was read, not a write's refusal.
    #[error("table `{table}`: {source}")]
    Unreadable {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What cannot be read with certainty.
        source: LocationError,
    },
    /// A write refused before its commit because the schema of the version it starts from, or
    /// of the version it would produce, has a column lake cannot read references from: the
    /// version it would commit could not be journaled. Nothing was committed.
    #[error("table `{table}` version {version}: {source}. Refusing to write to it (nothing was committed): lake could not journal the version this write would commit, and GC refuses this table until the column is fixed. Drop the column `{column}`, restore a version without it, or overwrite the table", column = crate::scan::top_level_column(source))]
    UnreadableTable {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version the write starts from (Lance's version number).
        version: u64,
        /// Why lake cannot read references from a column (it names the column).
        source: Box<LocationError>,
    },
    /// Lance committed `version`, then its journal entry could not be computed: the version
    /// exists without a journal entry (GC reports it and refuses to apply until it is journaled).
    #[error("table `{table}` version {version} was committed, but its journal entry could not be computed: {reason}. GC reports version {version} as a version without a journal entry and refuses to apply until it is journaled: `refs repair` (table `{table}`, version {version}) once its rows can be read")]
    Unjournaled {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version committed (Lance's version number).
        version: u64,
        /// Why its journal entry could not be computed (the underlying error's message).
        reason: String,
    },
    /// Lance committed `version` and the engine journaled it exactly, but the version references
    /// what the checks before the commit did not see (an expression that evaluated differently
    /// at the commit): `reason` says what and what to do.
    #[error("table `{table}` version {version} was committed and journaled (GC keeps what it references live), but {reason}")]
    CommittedUnchecked {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version committed and journaled (Lance's version number).
        version: u64,
        /// What the version references that the checks did not see, and what to do.
        reason: String,
    },
    /// The version was committed, but publishing it (its binding, its journal entry, the
    /// registry) failed. The write's intent stays, so GC keeps what it references; the next
    /// write to the table, or `refs recover`, journals the version. Never transient: retrying
    /// the write would commit its rows again.
    #[error("table `{table}` version {version} was committed, but publishing it failed ({source}); do not retry the write (it would commit its rows again): the next write to the table or `refs recover` journals the version (unless the failure above says the table or branch is gone), and its write intent keeps what it references from GC until then")]
    Unpublished {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version committed (Lance's version number).
        version: u64,
        /// Why publishing failed.
        source: Box<LanceEngineError>,
    },
    /// A change that adds no references (a delete, a compaction, a setting) failed after its
    /// manifest write was issued: it may have landed. Never transient: read the table's versions
    /// before doing it again; a version that landed is journaled by the next write or
    /// `refs recover`.
    #[error("table `{table}`: the change may have been committed ({source}); read the table's versions before doing it again (a blind retry could apply it twice); a version that landed is journaled by the next write or `refs recover`")]
    OutcomeUnknown {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What the commit reported.
        source: Box<LanceEngineError>,
    },
    /// Storage, registry or descriptor failure.
    #[error(transparent)]
    Objects(#[from] StoreError),
    /// The table does not exist.
    #[error("table `{table}` does not exist in this lake (no dataset at {uri}); ingest into it first")]
    NoSuchTable {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The URI where its dataset would be.
        uri: String,
    },
    /// The sidecar of a committed version could not be written; the registry was not advanced.
    #[error("table `{table}` version {version} was committed but its reference sidecar could not be written ({source}); GC refuses to apply until `refs repair` rebuilds it")]
    SidecarWrite {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version committed (Lance's version number).
        version: u64,
        /// The store's error writing the sidecar.
        source: StoreError,
    },
    /// The reference log of a streamed write could not be written; nothing was committed.
    #[error("table `{table}`: the write's reference log could not be written, nothing was committed: {message}")]
    JournalLog {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What failed, one sentence.
        message: String,
    },
    /// A different sidecar already exists for the version.
    #[error("table `{table}` version {version} already has a different reference sidecar; refusing to overwrite the journal")]
    SidecarConflict {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version whose sidecar differs (Lance's version number).
        version: u64,
    },
    /// Another writer created the table while this write was creating it; nothing was committed.
    #[error("table `{table}` was created by another writer at the same time; nothing was committed. Retry the write: it will append")]
    ConcurrentCreate {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
    },
    /// The publication guard refused a reference (nothing was committed).
    #[error("table `{table}`: {source}")]
    Guard {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The guard's refusal.
        source: lake_store::guard::GuardError,
    },
    /// Bad input refused before anything was written.
    #[error("{0}")]
    InvalidInput(String),
    /// A two-phase commit refused a prepared piece ([`crate::two_phase`]): one of another
    /// table, another lake or another schema, a piece given twice, or one whose counts do not
    /// match its fragments. Nothing was committed; the pieces' data files stay uncommitted.
    #[error("table `{table}`: prepared piece {piece} refused, nothing was committed: {reason}")]
    PieceRefused {
        /// The table the commit was for (lineage name: `t` or `t@b`).
        table: String,
        /// The piece's position in the list given to the commit (0-based).
        piece: usize,
        /// Why, one sentence.
        reason: String,
    },
    /// A two-phase commit was given a piece that is committed already: a data file of it is in
    /// a fragment of the table's latest version (a driver's retry after a commit that landed).
    /// Nothing more was committed; committing it again would add its rows twice.
    #[error("table `{table}`: prepared piece {piece} is committed already, nothing more was committed: its data file {data_file} is in a fragment of version {version}; committing it again would add its rows twice (a retry after a commit that landed: check the table's versions, and `refs recover` after an uncertain commit)")]
    PieceCommitted {
        /// The table the commit was for (lineage name: `t` or `t@b`).
        table: String,
        /// The piece's position in the list given to the commit (0-based).
        piece: usize,
        /// A data file of the piece (relative to the table's data folder).
        data_file: String,
        /// The table's latest version, which holds it.
        version: u64,
    },
    /// The write's intent was revoked by a resolver (its deadline had passed, or its lineage is
    /// being deleted) or is gone, so its gate published no manifest from then on. Nothing of this
    /// attempt was published; whether an earlier attempt landed is settled by the protocol
    /// (docs/protocol.md, "Revocation").
    #[error("table `{table}`: the write may no longer publish: its write intent {intent} was {} by a resolver (its deadline had passed, or its branch is being deleted); nothing was committed by this attempt. Retry the write", if *gone { "resolved" } else { "revoked" })]
    Revoked {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The intent's key, relative to the lake root.
        intent: String,
        /// True when the intent was gone (resolved), false when it was revoked.
        gone: bool,
    },
    /// A commit failed after it issued a manifest write, and resolution proved it can no longer
    /// land: nothing of the write is in the table (its write intent and reference log are
    /// removed).
    #[error("table `{table}`: the write was not committed ({source}); it was revoked, and version {proof}, committed after that, is not this write's, nor is any version before it, so it can no longer land. Retry the write")]
    NotCommitted {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version that proves it (Lance's version number): no version up to it is the write's.
        proof: u64,
        /// The failure the commit reported.
        source: Box<LanceEngineError>,
    },
    /// A commit failed after it issued a manifest write; it can no longer land, but whether it
    /// landed cannot be told: versions it may have landed as were cleaned up since (its rows, if
    /// it landed, are in the versions built on it).
    #[error("table `{table}`: the commit's outcome is lost ({source}): it can no longer land (it was revoked and version {proof} was committed after that), but version(s) {versions:?}, one of which may have been this write's, were cleaned up since. Check the table's rows before retrying: a retry could add them twice")]
    OutcomeLost {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version written after the revocation (Lance's version number).
        proof: u64,
        /// The versions that no longer exist.
        versions: Vec<u64>,
        /// The failure the commit reported.
        source: Box<LanceEngineError>,
    },
    /// A commit failed after it issued a manifest write and its outcome is not known yet: the
    /// version may still land. Its objects stay protected from GC by the write intent `intent`
    /// until it is resolved.
    #[error("table `{table}`: the commit's outcome is unknown ({source}): the version may still land. Its objects stay protected from garbage collection by the write intent {intent} until it is resolved ({reason}). Run `refs recover` for table `{table}` of the lake at `{root}` once the writer has stopped: it journals the version if it landed, or proves it never will; retrying the write before that may commit the rows twice")]
    CommitUncertain {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The write intent's key, relative to the lake root.
        intent: String,
        /// The lake root as shown to the operator, for the `lake refs recover` command.
        root: String,
        /// Why the outcome is not decided yet, one phrase.
        reason: String,
        /// The failure the commit reported.
        source: Box<LanceEngineError>,
    },
}

impl LanceEngineError {
    /// The version the failed write committed before it failed, when it did (see "Committed or
    /// not" on [`LanceEngineError`]).
    pub fn committed_version(&self) -> Option<u64> {
        match self {
            LanceEngineError::SidecarWrite { version, .. }
            | LanceEngineError::Unjournaled { version, .. }
            | LanceEngineError::Unpublished { version, .. }
            | LanceEngineError::CommittedUnchecked { version, .. } => Some(*version),
            _ => None,
        }
    }

    /// The error's kind ([`ErrorKind`]), mapped once here: the store's for
    /// [`LanceEngineError::Objects`], the failure's for [`LanceEngineError::NotCommitted`],
    /// Lance's error classified by [`lance_kind`] for [`LanceEngineError::Lance`], else the
    /// variant's. A version committed whose journal entry is missing or in conflict
    /// ([`LanceEngineError::SidecarWrite`], [`LanceEngineError::Unjournaled`],
    /// [`LanceEngineError::SidecarConflict`]) is [`ErrorKind::LineageIncomplete`], never a
    /// transient kind: retrying the write would commit another version.
    pub fn kind(&self) -> ErrorKind {
        match self {
            LanceEngineError::Objects(e) => e.kind(),
            LanceEngineError::NotCommitted { source, .. } => source.kind(),
            LanceEngineError::Lance { source, .. } => lance_kind(source),
            LanceEngineError::Location { .. } | LanceEngineError::InvalidInput(_) => ErrorKind::InvalidInput,
            LanceEngineError::Unreadable { .. } | LanceEngineError::UnreadableTable { .. } => ErrorKind::Unreadable,
            LanceEngineError::Unjournaled { .. }
            | LanceEngineError::SidecarWrite { .. }
            | LanceEngineError::Unpublished { .. }
            | LanceEngineError::SidecarConflict { .. } => ErrorKind::LineageIncomplete,
            LanceEngineError::CommittedUnchecked { .. } => ErrorKind::CommittedUnchecked,
            LanceEngineError::NoSuchTable { .. } => ErrorKind::NoSuchTable,
            LanceEngineError::JournalLog { .. } => ErrorKind::Storage,
            LanceEngineError::ConcurrentCreate { .. } | LanceEngineError::Revoked { .. } => ErrorKind::Conflict,
            LanceEngineError::Guard { .. } => ErrorKind::Guard,
            LanceEngineError::PieceRefused { .. } => ErrorKind::PieceRefused,
            LanceEngineError::PieceCommitted { .. } => ErrorKind::PieceCommitted,
            LanceEngineError::CommitUncertain { .. }
            | LanceEngineError::OutcomeLost { .. }
            | LanceEngineError::OutcomeUnknown { .. } => ErrorKind::CommitUncertain,
        }
    }

    /// Whether retrying the failed operation can help, as its kind says (the rule is on
    /// [`LanceEngineError`]).
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }
}

/// The kind of a Lance error:
/// - a commit whose outcome is unknown: [`ErrorKind::CommitUncertain`] (a blind retry could
///   commit twice: read the table first);
/// - Lance's own "try again" errors: `Timeout`, `TooMuchWriteContention` and `Backpressure`
///   are [`ErrorKind::Unavailable`], `RetryableCommitConflict` is [`ErrorKind::Conflict`];
/// - `IO`, `Wrapped`, `External` and `Namespace`: the kind of the error they carry (an
///   `object_store` error, an I/O error, an Arrow error of the caller's stream, or lake's own
///   error handed to Lance by a reader), by [`cause_kind`];
/// - input Lance refuses (invalid input, a schema mismatch, a missing field, version or
///   reference, a reference conflict, an Arrow error): [`ErrorKind::InvalidInput`];
/// - every other variant (not found, a corrupt file, a plain commit conflict, ...):
///   [`ErrorKind::Table`].
pub fn lance_kind(e: &lance::Error) -> ErrorKind {
    use lance::Error as L;
    if e.is_commit_status_unknown() {
        return ErrorKind::CommitUncertain;
    }
    match e.find_root() {
        L::Timeout { .. } | L::TooMuchWriteContention { .. } | L::Backpressure { .. } => ErrorKind::Unavailable,
        L::RetryableCommitConflict { .. } => ErrorKind::Conflict,
        L::IO { source, .. } | L::External { source } | L::Namespace { source, .. } => cause_kind(source.as_ref()),
        L::Wrapped { error, .. } => cause_kind(error.as_ref()),
        L::InvalidInput { .. }
        | L::SchemaMismatch { .. }
        | L::Schema { .. }
        | L::FieldNotFound { .. }
        | L::VersionNotFound { .. }
        | L::InvalidRef { .. }
        | L::RefNotFound { .. }
        | L::RefConflict { .. }
        | L::Arrow { .. } => ErrorKind::InvalidInput,
        _ => ErrorKind::Table,
    }
}

/// The kind of an error Lance carries: lake's own errors (this crate's, the store's, the
/// engine's, the guard's, a reference's) and Lance's by their own kind; an Arrow error by what
/// it wraps (a failed read) or as [`ErrorKind::InvalidInput`] (a stream that cannot be read);
/// anything else (an `object_store` error, an I/O error) as a store failure, transient as
/// [`is_transient_error`] classifies it.
fn cause_kind(e: &(dyn StdError + 'static)) -> ErrorKind {
    if let Some(e) = e.downcast_ref::<LanceEngineError>() {
        return e.kind();
    }
    if let Some(e) = e.downcast_ref::<lance::Error>() {
        return lance_kind(e);
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return e.kind();
    }
    if let Some(e) = e.downcast_ref::<EngineError>() {
        return e.kind();
    }
    if e.is::<lake_store::guard::GuardError>() {
        return ErrorKind::Guard;
    }
    if e.is::<LocationError>() || e.is::<lake_common::UriError>() {
        return ErrorKind::InvalidInput;
    }
    if let Some(arrow) = e.downcast_ref::<arrow_schema::ArrowError>() {
        return match arrow {
            arrow_schema::ArrowError::ExternalError(inner) => cause_kind(inner.as_ref()),
            arrow_schema::ArrowError::IoError(..) => ErrorKind::store_failure(is_transient_error(e)),
            _ => ErrorKind::InvalidInput,
        };
    }
    ErrorKind::store_failure(is_transient_error(e))
}

/// The engine's error as an [`EngineError`]: a storage failure stays [`EngineError::Storage`]
/// (with the store's error as its source), a missing table [`EngineError::Table`], an error the
/// engine ([`lake_store`]) already produced stays itself, input refused stays
/// [`EngineError::InvalidInput`]; every other error is kept whole as the source of an
/// [`EngineError::Backend`] (downcast it to [`LanceEngineError`]). The verdict of
/// [`LanceEngineError::is_transient`] goes with it.
impl From<LanceEngineError> for EngineError {
    fn from(e: LanceEngineError) -> Self {
        let kind = e.kind();
        match e {
            LanceEngineError::Objects(StoreError::Storage { path, source }) => {
                EngineError::Storage { path, source, transient: kind.is_transient() }
            }
            LanceEngineError::Objects(StoreError::Engine(inner)) => inner,
            LanceEngineError::NoSuchTable { table, uri } => {
                EngineError::Table { table, message: format!("no dataset at {uri}") }
            }
            LanceEngineError::InvalidInput(message) => EngineError::InvalidInput(message),
            other => EngineError::Backend { source: Box::new(other), kind },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn lance(source: lance::Error) -> LanceEngineError {
        LanceEngineError::Lance { table: "t".into(), action: "append", source }
    }

    fn io(kind: ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, format!("{kind:?}"))
    }

    fn http(kind: object_store::client::HttpErrorKind) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: Box::new(object_store::client::HttpError::new(kind, io(ErrorKind::Other))),
        }
    }

    #[test]
    fn lance_errors_by_class() {
        use object_store::client::HttpErrorKind;
        let transient = [
            lance::Error::timeout("commit"),
            lance::Error::too_much_write_contention("10 writers"),
            lance::Error::backpressure("flush queue full"),
            lance::Error::retryable_commit_conflict_source(3, "raced".into()),
            // A store error through Lance's `From<object_store::Error>` (an `IO` error).
            lance::Error::from(http(HttpErrorKind::Timeout)),
            lance::Error::from(http(HttpErrorKind::Connect)),
            lance::Error::from(io(ErrorKind::ConnectionReset)),
            // Lake's own error handed to Lance by a reader.
            lance::Error::external(Box::new(StoreError::storage("k", io(ErrorKind::TimedOut)))),
        ];
        for e in transient {
            let text = e.to_string();
            assert!(lance(e).is_transient(), "{text}");
        }
        let permanent = [
            lance::Error::invalid_input("bad"),
            lance::Error::not_found("tables/t.lance"),
            lance::Error::corrupt_file("f".into(), "bad magic"),
            lance::Error::schema_mismatch("column a"),
            lance::Error::commit_conflict_source(3, "conflict".into()),
            lance::Error::commit_status_unknown_source(3, Box::new(io(ErrorKind::TimedOut))),
            lance::Error::from(object_store::Error::PermissionDenied { path: "k".into(), source: "403".into() }),
            lance::Error::from(http(HttpErrorKind::Decode)),
            lance::Error::from(io(ErrorKind::NotFound)),
            lance::Error::io("plain message"),
            lance::Error::external(Box::new(StoreError::InvalidInput("no".into()))),
        ];
        for e in permanent {
            let text = e.to_string();
            assert!(!lance(e).is_transient(), "{text}");
        }
    }

    #[test]
    fn lake_lance_errors_by_class() {
        assert!(LanceEngineError::ConcurrentCreate { table: "t".into() }.is_transient());
        assert!(LanceEngineError::Objects(StoreError::storage("k", io(ErrorKind::ConnectionReset))).is_transient());
        let permanent = [
            LanceEngineError::Location {
                table: "t".into(),
                source: LocationError::MissingColumn { column: "c".into() },
            },
            LanceEngineError::Objects(StoreError::Capability { message: "no create-only writes".into() }),
            LanceEngineError::NoSuchTable { table: "t".into(), uri: "u".into() },
            LanceEngineError::SidecarWrite {
                table: "t".into(),
                version: 2,
                source: StoreError::storage("k", io(ErrorKind::TimedOut)),
            },
            LanceEngineError::JournalLog { table: "t".into(), message: "m".into() },
            LanceEngineError::SidecarConflict { table: "t".into(), version: 2 },
            LanceEngineError::InvalidInput("bad".into()),
            LanceEngineError::Unreadable {
                table: "t".into(),
                source: LocationError::MissingColumn { column: "c".into() },
            },
            LanceEngineError::UnreadableTable {
                table: "t".into(),
                version: 2,
                source: Box::new(LocationError::MissingColumn { column: "c".into() }),
            },
            LanceEngineError::Unjournaled { table: "t".into(), version: 3, reason: "r".into() },
            LanceEngineError::CommittedUnchecked { table: "t".into(), version: 3, reason: "r".into() },
            LanceEngineError::PieceRefused { table: "t".into(), piece: 1, reason: "r".into() },
        ];
        for e in permanent {
            assert!(!e.is_transient(), "{e}");
        }
    }

    /// "Nothing was committed" is said only by errors returned before a commit; the others name
    /// the committed version.
    #[test]
    fn only_errors_before_a_commit_say_nothing_was_committed() {
        let location = || LocationError::MissingColumn { column: "c".into() };
        let before = [
            LanceEngineError::Location { table: "t".into(), source: location() },
            LanceEngineError::UnreadableTable { table: "t".into(), version: 2, source: Box::new(location()) },
            LanceEngineError::JournalLog { table: "t".into(), message: "m".into() },
            LanceEngineError::ConcurrentCreate { table: "t".into() },
            LanceEngineError::PieceRefused { table: "t".into(), piece: 1, reason: "r".into() },
        ];
        for e in before {
            assert!(e.to_string().contains("nothing was committed") && e.committed_version().is_none(), "{e}");
        }
        let after = [
            LanceEngineError::SidecarWrite {
                table: "t".into(),
                version: 3,
                source: StoreError::storage("k", io(ErrorKind::TimedOut)),
            },
            LanceEngineError::Unjournaled { table: "t".into(), version: 3, reason: "r".into() },
            LanceEngineError::CommittedUnchecked { table: "t".into(), version: 3, reason: "r".into() },
        ];
        for e in after {
            let text = e.to_string();
            assert!(!text.to_lowercase().contains("nothing was committed") && text.contains("version 3"), "{text}");
            assert_eq!(e.committed_version(), Some(3));
        }
        // A read's error says what was read, not what a write did.
        let read = LanceEngineError::Unreadable { table: "t".into(), source: location() };
        assert!(!read.to_string().contains("committed"), "{read}");
    }

    #[test]
    fn engine_errors_keep_the_source_and_the_verdict() {
        use std::error::Error as _;
        // Storage: the store's error is the source; the message is as before.
        let e: EngineError = LanceEngineError::Objects(StoreError::storage("k", io(ErrorKind::TimedOut))).into();
        assert!(matches!(e, EngineError::Storage { .. }));
        assert!(e.is_transient());
        assert_eq!(e.to_string(), "storage error at k: TimedOut");
        assert!(e.source().is_some_and(|s| s.is::<std::io::Error>()));

        // Lance: the LanceEngineError is the source, whole (its lance::Error below it).
        let e: EngineError = lance(lance::Error::timeout("slow")).into();
        assert!(e.is_transient());
        let source = e.source().and_then(|s| s.downcast_ref::<LanceEngineError>()).expect("the engine's error is kept");
        assert!(matches!(source, LanceEngineError::Lance { .. }));
        assert!(source.source().is_some_and(|s| s.is::<lance::Error>()));
        assert!(e.to_string().starts_with("table `t`: Lance append failed: "), "{e}");

        let e: EngineError = LanceEngineError::SidecarConflict { table: "t".into(), version: 2 }.into();
        assert!(!e.is_transient());
        assert_eq!(e.to_string(), LanceEngineError::SidecarConflict { table: "t".into(), version: 2 }.to_string());
        assert_eq!(e.kind(), lake_common::ErrorKind::LineageIncomplete, "the kind crosses the engine trait");
        let e: EngineError = LanceEngineError::ConcurrentCreate { table: "t".into() }.into();
        assert!(e.is_transient());

        // An engine error that went through lake-store is itself again.
        let lineage = EngineError::Lineage { table: "t".into(), problems: Vec::new() };
        let e: EngineError = LanceEngineError::Objects(StoreError::Engine(lineage)).into();
        assert!(matches!(e, EngineError::Lineage { .. }));

        let e: EngineError = LanceEngineError::InvalidInput("bad".into()).into();
        assert!(matches!(&e, EngineError::InvalidInput(m) if m == "bad"));
        assert!(!e.is_transient());
    }
}
