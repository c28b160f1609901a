//! The engine seam of lake: what GC needs to know about tables, and nothing about Lance.
//!
//! - [`Engine`]: the trait every table engine implements (the Lance one lives in `lake-lance`).
//!   It has no default methods: every backend must define its own fail-closed lineage.
//! - [`lineage`]: [`TableLineage`] and the named [`LineageProblem`]s that make GC refuse.
//! - [`replay`]: journal replay: reference counts per version and the exact live set
//!   (an object is live if its count is above zero in at least one retained version).
//! - [`spilled_replay`]: the same live set in bounded memory, identity by identity over
//!   journal events sorted on local disk ([`spill`]).
//! - [`stamp`]: a table's lineage at one moment ([`LineageStamp`]) and how it may move on
//!   between a plan and its apply ([`LineageBasis`]).
//! - [`journal`]: the shared answers from decoded sidecars (live set, pages, additions).
//! - [`memory`]: [`memory::MemoryEngine`], an in-memory test double with the same rules.

pub mod error;
pub mod journal;
pub mod lineage;
pub mod memory;
pub mod replay;
pub mod spill;
pub mod spilled_replay;
pub mod stamp;

use async_trait::async_trait;
use lake_common::ObjectIdentity;

pub use error::EngineError;
pub use lineage::{check_chain, check_chain_by, LineageProblem, TableLineage};
pub use replay::{live_set, Replay, ReplayError};
pub use spilled_replay::{spilled_live_set, LiveIdentities, SpilledJournal, SpilledReplayError};
pub use stamp::{LineageBasis, LineageStamp};

/// Where a table lives: its name in the registry and the URI of its dataset.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableLocation {
    /// Table name as registered (`[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    /// Dataset URI, e.g. `file:///lake/tables/episodes.lance` or `s3://b/p/tables/episodes.lance`.
    pub uri: String,
}

/// The tables of a lake as the engine found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableSet {
    /// Registered tables, sorted by name.
    pub tables: Vec<TableLocation>,
    /// Problems found while enumerating (for example a dataset the registry does not know).
    pub problems: Vec<LineageProblem>,
}

/// The versions of one table whose references must be kept: every version that still exists
/// (latest, tagged, not yet cleaned up). Sorted ascending, no duplicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetainedRoots {
    versions: Vec<u64>,
}

impl RetainedRoots {
    /// Sorts and deduplicates `versions`.
    pub fn new(mut versions: Vec<u64>) -> Self {
        versions.sort_unstable();
        versions.dedup();
        Self { versions }
    }

    /// The retained versions, ascending.
    pub fn versions(&self) -> &[u64] {
        &self.versions
    }
}

/// One page request of [`Engine::retained_object_references`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// Return identities strictly greater than this one (`None`: from the start).
    pub after: Option<ObjectIdentity>,
    /// Maximum identities in the page (at least 1).
    pub limit: usize,
}

/// A bounded page of the live references of one table, in ascending identity order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferencePage {
    /// At most `limit` identities, strictly ascending.
    pub identities: Vec<ObjectIdentity>,
    /// The token for the next page (the last identity), or `None` when this was the last page.
    pub next: Option<ObjectIdentity>,
}

/// A file of a table's journal that no journal entry names: the reference log (or a staged
/// upload of one) of a write that never committed. GC's own garbage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreferencedFile {
    /// Key relative to the lake root (for an S3 multipart upload, `<log key>#upload=<id>`).
    pub key: String,
    /// Size in bytes (0 for an upload).
    pub size: u64,
    /// When it was last written (an upload: when it began), milliseconds since the Unix epoch.
    pub last_modified_ms: i64,
}

/// The engine trait: tables, lineage and the references of retained versions.
///
/// Implementations must be deterministic (the same storage state gives the same answers) and
/// fail closed: an unreadable journal is a [`LineageProblem`] or an [`EngineError`], never an
/// empty answer.
#[async_trait]
pub trait Engine: Send + Sync {
    /// Every registered table, plus problems such as unregistered datasets.
    ///
    /// # Errors
    /// [`EngineError::Storage`] when the registry cannot be read.
    async fn tables(&self) -> Result<TableSet, EngineError>;

    /// The retained versions of `location` and every problem with its journal.
    ///
    /// # Errors
    /// [`EngineError::Storage`] / [`EngineError::Table`] when the table cannot be read at all.
    async fn lineage(&self, location: &TableLocation) -> Result<TableLineage, EngineError>;

    /// The identities referenced (count above zero) by at least one of `roots`, as bounded,
    /// deterministic pages in ascending identity order, computed from the journal.
    ///
    /// # Errors
    /// [`EngineError::Lineage`] when the journal needed for `roots` is incomplete or
    /// inconsistent; the caller must not treat that as "no references".
    async fn retained_object_references(
        &self,
        location: &TableLocation,
        roots: &RetainedRoots,
        page: &PageRequest,
    ) -> Result<ReferencePage, EngineError>;

    /// The lineage of `location` as its listings show it now (versions, registry pin, journal
    /// files), without reading any journal entry: what apply compares with a plan's basis before
    /// every group of deletes.
    ///
    /// # Errors
    /// [`EngineError::Storage`] / [`EngineError::Table`] when the table cannot be listed.
    async fn lineage_stamp(&self, location: &TableLocation) -> Result<stamp::LineageStamp, EngineError>;

    /// Identities that the versions in `(after, upto]` added (net additions of each version's
    /// journal entry; a snapshot counts all of its references as added). Used by apply to
    /// revalidate a plan against the versions committed since its basis.
    ///
    /// # Errors
    /// [`EngineError::Lineage`] when a version in the range has no journal entry or an
    /// undecodable one.
    async fn references_added_between(
        &self,
        location: &TableLocation,
        after: u64,
        upto: u64,
    ) -> Result<Vec<ObjectIdentity>, EngineError>;

    /// The files of `location`'s journal that no journal entry names and that were last written
    /// before `cutoff_ms` (milliseconds since the Unix epoch): reference logs, and staged
    /// uploads of them, left by writes that never committed.
    ///
    /// # Errors
    /// [`EngineError::Storage`] when the journal cannot be listed or read.
    async fn unreferenced_journal_files(
        &self,
        location: &TableLocation,
        cutoff_ms: i64,
    ) -> Result<Vec<UnreferencedFile>, EngineError>;
}
