//! What an operation hands to the protocol: a [`Change`] says how its version is made, which
//! references it may add, and how its journal entry is computed. Operations build one and call
//! [`crate::LanceEngine::commit`]; they hold no protocol code.

use crate::error::LanceEngineError;
use arrow_schema::SchemaRef;
use futures::future::BoxFuture;
use lake_common::intent::IntentOperation;
use lake_common::{DeltaKind, LogRef, LogTotals, ObjectIdentity, ReferenceCounts};
use lake_store::store::LakeStore;
use lance::dataset::transaction::Transaction;
use lance::Dataset;
use std::sync::Arc;

/// One version-producing operation, as the protocol sees it.
pub(crate) struct Change {
    /// The lineage written (`t`, or `t@b` for a branch).
    pub table: String,
    /// The operation's name: the marker's `lake.operation` (`crate::commit::marker`) and the
    /// name in messages (`append`, `delete`, `fence`, ...).
    pub operation: &'static str,
    /// How Lance makes the version.
    pub make: Make,
    /// The references the version may add, when it may add any: the write intent names them and
    /// the publication guard checks them (`None`: a delete, a dropped or renamed column, a
    /// content-preserving operation).
    pub adds: Option<Adds>,
    /// How the version's journal entry is computed.
    pub journal: Journal,
    /// Files the operation wrote before its commit: removed when nothing of it can land.
    pub staged: Staged,
    /// Whether the protocol resolves what earlier writes left before this commit (every
    /// operation but a resolver's own fence).
    pub resolve_first: bool,
    /// Whether this commit creates the lineage's registry entry (a create, a branch's first
    /// version): a branch lineage is otherwise never registered by a commit.
    pub registers: bool,
    /// What else must still hold right before each manifest write (checked by the gate after
    /// the intent's liveness).
    pub precondition: Option<Precondition>,
}

impl Change {
    /// A change committing `transaction`, staged on `base` (by the lineage's URI when `None`),
    /// journaled by `journal`; no references added, resolution first, not registering.
    pub(crate) fn staged(
        table: &str,
        operation: &'static str,
        transaction: Transaction,
        base: Option<Arc<Dataset>>,
        journal: Journal,
    ) -> Self {
        let make = Make::Transaction { transaction: Box::new(transaction), base, creating: false, affected_rows: None };
        Self::new(table, operation, make, journal)
    }

    /// A change made by Lance's own call `run` on lineage `open` at `version` (its latest when
    /// `None`), journaled by `journal`.
    pub(crate) fn in_lance(
        table: &str,
        operation: &'static str,
        open: &str,
        version: Option<u64>,
        journal: Journal,
        run: InLanceCall,
    ) -> Self {
        Self::new(table, operation, Make::InLance { open: open.into(), version, run }, journal)
    }

    fn new(table: &str, operation: &'static str, make: Make, journal: Journal) -> Self {
        Self {
            table: table.into(),
            operation,
            make,
            adds: None,
            journal,
            staged: Staged::default(),
            resolve_first: true,
            registers: false,
            precondition: None,
        }
    }

    /// The same change adding `adds`.
    pub(crate) fn adding(mut self, adds: Adds) -> Self {
        self.adds = Some(adds);
        self
    }

    /// The same change, a create of its lineage (published as version 1 only, one attempt; it
    /// registers the lineage), having written `data_files`.
    pub(crate) fn creating(mut self, data_files: Vec<String>) -> Self {
        if let Make::Transaction { creating, .. } = &mut self.make {
            *creating = true;
        }
        self.staged = Staged { data_files, creating: true };
        self.registers = true;
        self
    }

    /// The same change having written `data_files` before its commit.
    pub(crate) fn staging(mut self, data_files: Vec<String>) -> Self {
        self.staged.data_files = data_files;
        self
    }

    /// The same change registering its (branch) lineage.
    pub(crate) fn registering(mut self) -> Self {
        self.registers = true;
        self
    }

    /// The same change without resolution first (a resolver's own fence).
    pub(crate) fn without_resolution(mut self) -> Self {
        self.resolve_first = false;
        self
    }

    /// The same change with Lance's conflict check of `rows` (a delete's).
    pub(crate) fn affecting(mut self, rows: Option<lance_select::RowAddrTreeMap>) -> Self {
        if let Make::Transaction { affected_rows, .. } = &mut self.make {
            *affected_rows = rows;
        }
        self
    }

    /// The same change with `precondition`.
    pub(crate) fn requiring(mut self, precondition: Precondition) -> Self {
        self.precondition = Some(precondition);
        self
    }
}

impl Adds {
    /// A version that may add the references of the write's own reference log.
    pub(crate) fn log(operation: IntentOperation, read_version: u64, log: &crate::journaling::JournalLog) -> Self {
        let named =
            Named::Log { write_id: log.write_id.clone(), totals: log.totals.clone(), oldest: log.oldest.clone() };
        Self::of(operation, read_version, named)
    }

    /// A version that may add `named`, of which the guard checks `guarded`.
    pub(crate) fn identities(
        operation: IntentOperation,
        read_version: u64,
        named: Vec<ObjectIdentity>,
        guarded: Vec<ObjectIdentity>,
    ) -> Self {
        Self::of(operation, read_version, Named::Identities { named, guarded })
    }

    pub(crate) fn of(operation: IntentOperation, read_version: u64, named: Named) -> Self {
        Self { operation, read_version, named, restored_version: None, schema: None, expected: None }
    }

    /// The same, re-adding the references of `version` (a restore, a branch).
    pub(crate) fn restoring(mut self, version: u64) -> Self {
        self.restored_version = Some(version);
        self
    }

    /// The same, recording a create's `schema`.
    pub(crate) fn with_schema(mut self, schema: SchemaRef) -> Self {
        self.schema = Some(schema);
        self
    }

    /// The same, expecting the version to add `expected` (checked after the commit).
    pub(crate) fn expecting(mut self, expected: Vec<ObjectIdentity>) -> Self {
        self.expected = Some(expected);
        self
    }
}

/// A condition the store must confirm right before each manifest write of a change. Whoever
/// makes it false commits a version afterwards (a fence) before relying on it: a manifest write
/// that saw it true targets a slot no later than that version (docs/protocol.md).
#[derive(Debug, Clone)]
pub(crate) enum Precondition {
    /// A restore: its tag still names the version it restores (`lake cleanup` removes a stale
    /// restore tag, then fences, before it removes the version: `crate::history`).
    Tagged {
        /// The tag's file, relative to the lake root (`tables/<t>.lance/_refs/tags/<name>.json`).
        key: String,
        /// The tag's name.
        name: String,
        /// The version it must name.
        version: u64,
    },
}

/// How Lance makes the version.
pub(crate) enum Make {
    /// A transaction the operation staged (Lance's `execute_uncommitted`, or one it built),
    /// committed by the protocol's one `CommitBuilder`.
    Transaction {
        /// The staged transaction; the protocol sets the marker on it.
        transaction: Box<Transaction>,
        /// The dataset it was staged on (a commit then starts from it), or `None` to commit by
        /// the lineage's URI (a create, a streamed write).
        base: Option<Arc<Dataset>>,
        /// A create: published only as version 1 (`gate`), with one attempt.
        creating: bool,
        /// Rows the transaction changes (Lance's conflict check of a delete or merge insert).
        affected_rows: Option<lance_select::RowAddrTreeMap>,
    },
    /// Lance's own call, which commits inside itself: `run` gets the dataset `open` (a lineage
    /// name) at `version` (its latest when `None`), opened with the protocol's commit handler,
    /// so every manifest write of the call goes through the gate.
    InLance {
        /// The lineage to open (a branch is made from its table's main line).
        open: String,
        /// The version to open.
        version: Option<u64>,
        /// Lance's call.
        run: InLanceCall,
    },
}

/// Lance's call of a [`Make::InLance`] operation.
pub(crate) type InLanceCall = Box<dyn FnOnce(Dataset) -> BoxFuture<'static, Result<Made, LanceEngineError>> + Send>;

/// What Lance's own call made.
pub(crate) struct Made {
    /// The dataset at the version the call committed (its last one, when it committed two).
    pub dataset: Dataset,
    /// Rows it changed (an update's), else 0.
    pub rows: u64,
}

/// The references a version may add.
pub(crate) struct Adds {
    /// The intent's operation.
    pub operation: IntentOperation,
    /// The version the write read (0 for a create): a landed commit is a version above it.
    pub read_version: u64,
    /// What the intent names, and what the guard checks.
    pub named: Named,
    /// The version a restore or a branch re-adds the references of.
    pub restored_version: Option<u64>,
    /// A create's schema: a resolver fences a create that never landed by creating an empty
    /// version 1 with it.
    pub schema: Option<SchemaRef>,
    /// For a change whose entry is computed from the manifests: every identity the operation
    /// expects the version to add (what it checked before its commit, and what the rows it
    /// rewrites held already). One the version adds beyond them (an expression that did not
    /// evaluate the same way twice) is checked after the commit: the rule for new references and
    /// the guard (`LanceEngineError::CommittedUnchecked`). `None`: not checked.
    pub expected: Option<Vec<ObjectIdentity>>,
}

/// What an intent names.
pub(crate) enum Named {
    /// A reference log the write wrote (a streamed write's, an upsert's source, the row log read
    /// from two-phase pieces), under the write's id; the guard checks its oldest managed key.
    Log {
        /// The log's write id: the write's id.
        write_id: String,
        /// Its totals (rows, bytes, SHA-256).
        totals: LogTotals,
        /// The managed reference minted earliest in it.
        oldest: Option<ObjectIdentity>,
    },
    /// Identities in memory (an update's, new columns', a restore's, a branch's).
    Identities {
        /// Every reference the version may add.
        named: Vec<ObjectIdentity>,
        /// Those the guard checks: the references new to the rows that get them (an update's
        /// rows may already hold some of what they get; a restore re-adds what a retained
        /// version holds: none).
        guarded: Vec<ObjectIdentity>,
    },
}

impl Named {
    /// The write id a log fixes, if any.
    pub(crate) fn write_id(&self) -> Option<&str> {
        match self {
            Named::Log { write_id, .. } => Some(write_id),
            Named::Identities { .. } => None,
        }
    }

    /// What the publication guard checks.
    pub(crate) fn guarded(&self) -> Vec<ObjectIdentity> {
        match self {
            Named::Log { oldest, .. } => oldest.iter().cloned().collect(),
            Named::Identities { guarded, .. } => guarded.clone(),
        }
    }
}

/// How a version's journal entry is computed.
pub(crate) enum Journal {
    /// A head naming the write's own reference log: a `Delta` for an append, a `Snapshot` for
    /// an overwrite or a create. An append Lance rebased over a schema change
    /// (`version_diff::schema_moved` since `read_version`) is journaled from the manifests
    /// instead.
    Log {
        /// The log.
        log: LogRef,
        /// Delta or snapshot.
        kind: DeltaKind,
        /// The version the write read.
        read_version: u64,
    },
    /// From the two manifests (`version_diff::committed_entry`).
    Manifests,
    /// A merge insert: a head naming its source's log as its additions when the manifests show
    /// every source row written once and the log is large (`version_diff::logged_entry`), else
    /// from the manifests.
    Upsert {
        /// The source's log.
        log: crate::journaling::JournalLog,
        /// The key columns.
        on: Vec<String>,
    },
    /// A snapshot of these counts (a restore's, a branch's: replayed from the journal).
    Snapshot(ReferenceCounts),
    /// A snapshot of the committed version from a scan of it (a drop that removes columns lake
    /// could not read: the previous version cannot be diffed).
    Scan,
    /// Empty entries for every content-preserving version after the one the operation started
    /// from (a compaction commits two); a concurrent writer's version is left to it.
    ContentPreserving,
}

/// Files an operation wrote before its commit, removed when nothing of it can land: a refused
/// write's data files (and, for a first write on a local root, the folders it left empty).
/// The write's reference log is the protocol's to keep or remove (it is named by the intent).
#[derive(Debug, Default)]
pub(crate) struct Staged {
    /// Keys of the data files (`crate::uncommitted::data_file_keys`).
    pub data_files: Vec<String>,
    /// A first write: empty dataset folders go too.
    pub creating: bool,
}

impl Staged {
    /// Removes the staged files (best effort: a file that stays is an uncommitted file, never
    /// read, removed by Lance's cleanup).
    pub(crate) async fn discard(self, store: &LakeStore, table: &str) {
        crate::uncommitted::discard_refused_write(store, table, &self.data_files, self.creating).await;
    }
}

/// What the protocol committed.
#[derive(Debug)]
pub(crate) struct Committed {
    /// The version.
    pub version: u64,
    /// Rows Lance's own call reported ([`Made::rows`]), else 0.
    pub rows: u64,
    /// References the entry adds (sum of counts).
    pub added: u64,
    /// References the entry removes (sum of counts).
    pub removed: u64,
    /// Whether Lance rebased the commit onto versions committed concurrently.
    pub rebased: bool,
    /// Lance's own call committed nothing (a compaction with nothing to compact): `version` is
    /// the version it started from, and nothing was journaled.
    pub unchanged: bool,
}

impl Committed {
    /// The outcome a caller reports: `rows` written or changed (the operation's own count).
    pub(crate) fn outcome(&self, table: &str, rows: u64) -> crate::engine::CommitOutcome {
        crate::engine::CommitOutcome {
            table: table.into(),
            version: self.version,
            rows,
            references_added: self.added,
            references_removed: self.removed,
            rebased: self.rebased,
        }
    }
}
