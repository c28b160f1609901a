//! [`ErrorKind`]: the one vocabulary every error of lake's libraries is named by.
//!
//! Each library keeps its own error type, with the data its callers need (the table, the
//! version, the key). Each maps itself to one [`ErrorKind`] once, in its `kind()` method, and
//! answers `is_transient()` from that kind. Callers act on the kind alone: the CLI's exit
//! codes and its `--json` errors, and the Python package's exception classes, are tables over
//! it (docs/errors.md lists them, and a test keeps that list equal to [`ErrorKind::ALL`]).
//!
//! The kind decides whether retrying can help: only [`ErrorKind::Unavailable`],
//! [`ErrorKind::Conflict`] and [`ErrorKind::JournalPending`] are transient. A store failure is
//! one of two kinds, [`ErrorKind::Unavailable`] or [`ErrorKind::Storage`], as the library that
//! met it classifies its cause (timeouts, throttling and dropped connections are transient;
//! a denied permission or a missing bucket is not).

use std::fmt;

/// What went wrong, in one closed list. Its [`ErrorKind::as_str`] names are stable: scripts
/// match `lake --json`'s `{"error": {"kind"}}` and Python's `LakeError.kind` against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorKind {
    // Transient: the same call may succeed later.
    /// The store (or a local file) failed in a way retrying can help: a timeout, throttling
    /// (S3 `SlowDown`, HTTP 429 or 5xx), a dropped or refused connection.
    Unavailable,
    /// Another writer won a race this call took part in (a table created twice at once, a
    /// registry update, a write attempt revoked by recovery, a retryable Lance commit
    /// conflict); nothing of this call was published. Retry it.
    Conflict,
    /// GC apply met a version committed since its plan whose journal entry is not written
    /// yet (a writer between its Lance commit and its journal entry); nothing more was
    /// deleted. Run the same apply again once the writer has finished.
    JournalPending,

    // What the caller gave.
    /// A value the caller gave is unusable (a reference column of another layout, a URI, an
    /// Arrow stream, a count or duration out of range, a path, a document given as a plan);
    /// nothing was written.
    InvalidInput,
    /// A table name breaks the naming rule (1 to 64 characters of A-Z, a-z, 0-9, `_` and
    /// `-`; `<table>@<branch>` for a branch); nothing was written.
    TableName,
    /// A piece of a distributed write was refused at its commit (tampered, of another table
    /// or lake, missing a fragment); nothing was committed.
    PieceRefused,
    /// A piece of a distributed write is committed already (a data file of it is in the
    /// table's latest version: a retry after a commit that landed); nothing more was committed,
    /// and committing it again would add its rows twice.
    PieceCommitted,
    /// The publication guard refused a reference to a managed object too old to publish
    /// (GC may be collecting it); nothing was committed. Copy the object to a fresh key or
    /// upload it again.
    Guard,
    /// A reference names an object lake will not read: outside the lake root's store, or a
    /// local path through a symbolic link or outside the root.
    ObjectUnreachable,

    // Objects.
    /// An object a reference names does not exist (deleted, or never written).
    ObjectMissing,
    /// An object's bytes differ from its reference's size or SHA-256 (rewritten, truncated
    /// or corrupted outside lake); a verified read returns no bytes of it.
    ObjectMismatch,

    // The lake's state.
    /// The root holds no lake (no `_lake/lake.json`); create one first.
    NotALake,
    /// The table is not in the lake's registry.
    NoSuchTable,
    /// A document of the lake (its descriptor, a journal entry, a registry, an intent, a
    /// checkpoint) fails its seal or cannot be parsed: it was edited or damaged.
    Corrupt,
    /// The journal cannot account for a table's versions (a version another Lance client
    /// wrote, a missing or edited journal entry, a table that went backwards, or a write that
    /// committed and then failed to publish its version): GC plans nothing from that table and
    /// apply deletes nothing until it is journaled or repaired. A write failing so says which
    /// version it committed: do not retry it.
    LineageIncomplete,
    /// A plan was made on incomplete lineage; apply refuses it. Repair, then plan again.
    PlanIncomplete,
    /// A version's reference columns (or a table) cannot be read as lake must read them to
    /// journal it.
    Unreadable,
    /// A commit's outcome is not known (the store did not answer whether the manifest
    /// landed), or was lost (the versions that could tell were cleaned up since): read the
    /// table before writing again, a blind retry could commit twice. While the outcome is
    /// unknown, a write's intent keeps what it references from GC.
    CommitUncertain,
    /// A version was committed by a path that skipped one of lake's checks (another Lance
    /// client, or a failure between Lance's commit and lake's check): it is journaled from
    /// its manifests, and the error names it.
    CommittedUnchecked,
    /// The table's files could not be operated on for a reason no other kind names (a
    /// corrupt or unsupported Lance file, a schema Lance refuses).
    Table,
    /// A GC checkpoint belongs to another plan, lake or format, or another apply owns it.
    Checkpoint,
    /// An S3 Inventory report was refused (incomplete, of another bucket or prefix, too
    /// old); nothing was planned from it.
    InventoryReport,

    // GC's safety rules: each refuses before anything is deleted.
    /// The horizon (`min_age`) is not positive or too large, or shorter than the guard
    /// window allows.
    Horizon,
    /// The horizon is below the lake's policy floor (its recorded `min_age`).
    PolicyFloor,
    /// This host's clock differs from the store's by more than the bound.
    ClockSkew,
    /// A shard's cutoff lies after the store's time minus the horizon (a spec from the
    /// future, or edited).
    CutoffTooLate,
    /// A plan, shard or checkpoint belongs to another lake root or another lake.
    BoundToRoot,
    /// A plan was made with another horizon than the one it is applied with.
    BoundToMinAge,
    /// A shard plan is not one of its manifest's shards.
    BoundToManifest,
    /// A shard's number or key range is not the spec's.
    ShardMismatch,
    /// The store overwrites on a create-only write (S3 `If-None-Match: *`, a local
    /// `O_EXCL` create), so the write protocol's proofs do not hold on it.
    StoreCapability,
    /// A destination GC or a read would write to lies inside the lake root (by any route:
    /// a symbolic link, a bind or overlay mount), or a root lake may not use.
    Root,
    /// A document may not be written at that destination (a folder, a device, a file of
    /// another kind, a folder that does not exist).
    Output,

    // Everything else.
    /// The store (or a local file) failed and retrying will not help: a denied permission,
    /// a missing bucket, a full disk, an unsupported operation.
    Storage,
    /// The operation ran, reported its result, and that result is a failure (an apply that
    /// left candidates, a journal that does not match its tables).
    Incomplete,
    /// A failure that is a bug of lake (a task that panicked) or a test's injected failure.
    Internal,
}

impl ErrorKind {
    /// Every kind, in declaration order (the order of the table in docs/errors.md).
    pub const ALL: [ErrorKind; 36] = [
        ErrorKind::Unavailable,
        ErrorKind::Conflict,
        ErrorKind::JournalPending,
        ErrorKind::InvalidInput,
        ErrorKind::TableName,
        ErrorKind::PieceRefused,
        ErrorKind::PieceCommitted,
        ErrorKind::Guard,
        ErrorKind::ObjectUnreachable,
        ErrorKind::ObjectMissing,
        ErrorKind::ObjectMismatch,
        ErrorKind::NotALake,
        ErrorKind::NoSuchTable,
        ErrorKind::Corrupt,
        ErrorKind::LineageIncomplete,
        ErrorKind::PlanIncomplete,
        ErrorKind::Unreadable,
        ErrorKind::CommitUncertain,
        ErrorKind::CommittedUnchecked,
        ErrorKind::Table,
        ErrorKind::Checkpoint,
        ErrorKind::InventoryReport,
        ErrorKind::Horizon,
        ErrorKind::PolicyFloor,
        ErrorKind::ClockSkew,
        ErrorKind::CutoffTooLate,
        ErrorKind::BoundToRoot,
        ErrorKind::BoundToMinAge,
        ErrorKind::BoundToManifest,
        ErrorKind::ShardMismatch,
        ErrorKind::StoreCapability,
        ErrorKind::Root,
        ErrorKind::Output,
        ErrorKind::Storage,
        ErrorKind::Incomplete,
        ErrorKind::Internal,
    ];

    /// The kind's stable snake_case name (`unavailable`, `policy_floor`, ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Conflict => "conflict",
            ErrorKind::JournalPending => "journal_pending",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::TableName => "table_name",
            ErrorKind::PieceRefused => "piece_refused",
            ErrorKind::PieceCommitted => "piece_committed",
            ErrorKind::Guard => "guard",
            ErrorKind::ObjectUnreachable => "object_unreachable",
            ErrorKind::ObjectMissing => "object_missing",
            ErrorKind::ObjectMismatch => "object_mismatch",
            ErrorKind::NotALake => "not_a_lake",
            ErrorKind::NoSuchTable => "no_such_table",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::LineageIncomplete => "lineage_incomplete",
            ErrorKind::PlanIncomplete => "plan_incomplete",
            ErrorKind::Unreadable => "unreadable",
            ErrorKind::CommitUncertain => "commit_uncertain",
            ErrorKind::CommittedUnchecked => "committed_unchecked",
            ErrorKind::Table => "table",
            ErrorKind::Checkpoint => "checkpoint",
            ErrorKind::InventoryReport => "inventory_report",
            ErrorKind::Horizon => "horizon",
            ErrorKind::PolicyFloor => "policy_floor",
            ErrorKind::ClockSkew => "clock_skew",
            ErrorKind::CutoffTooLate => "cutoff_too_late",
            ErrorKind::BoundToRoot => "bound_to_root",
            ErrorKind::BoundToMinAge => "bound_to_min_age",
            ErrorKind::BoundToManifest => "bound_to_manifest",
            ErrorKind::ShardMismatch => "shard_mismatch",
            ErrorKind::StoreCapability => "store_capability",
            ErrorKind::Root => "root",
            ErrorKind::Output => "output",
            ErrorKind::Storage => "storage",
            ErrorKind::Incomplete => "incomplete",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind named `name` ([`ErrorKind::as_str`]), or `None`.
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// Whether retrying the same call can help: true for [`ErrorKind::Unavailable`],
    /// [`ErrorKind::Conflict`] and [`ErrorKind::JournalPending`] only.
    pub const fn is_transient(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Conflict | ErrorKind::JournalPending)
    }

    /// Whether this is one of GC's safety rules refusing a request (from
    /// [`ErrorKind::Horizon`] to [`ErrorKind::Output`] in [`ErrorKind::ALL`]).
    pub const fn is_refusal(self) -> bool {
        matches!(
            self,
            ErrorKind::Horizon
                | ErrorKind::PolicyFloor
                | ErrorKind::ClockSkew
                | ErrorKind::CutoffTooLate
                | ErrorKind::BoundToRoot
                | ErrorKind::BoundToMinAge
                | ErrorKind::BoundToManifest
                | ErrorKind::ShardMismatch
                | ErrorKind::StoreCapability
                | ErrorKind::Root
                | ErrorKind::Output
        )
    }

    /// A store failure's kind: [`ErrorKind::Unavailable`] when retrying can help, else
    /// [`ErrorKind::Storage`].
    pub const fn store_failure(transient: bool) -> ErrorKind {
        if transient {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Storage
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<&str> = ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        for kind in ErrorKind::ALL {
            assert_eq!(ErrorKind::from_name(kind.as_str()), Some(kind));
            assert!(kind.as_str().bytes().all(|b| b.is_ascii_lowercase() || b == b'_'), "{kind}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorKind::ALL.len());
        assert_eq!(ErrorKind::from_name("nope"), None);
    }

    #[test]
    fn only_three_kinds_are_transient() {
        let transient: Vec<ErrorKind> = ErrorKind::ALL.into_iter().filter(|k| k.is_transient()).collect();
        assert_eq!(transient, [ErrorKind::Unavailable, ErrorKind::Conflict, ErrorKind::JournalPending]);
        assert_eq!(ErrorKind::store_failure(true), ErrorKind::Unavailable);
        assert_eq!(ErrorKind::store_failure(false), ErrorKind::Storage);
    }
}
