//! The engine seam of lake: what GC needs to know about tables, and nothing about Lance.
//!
//! - [`Engine`]: the trait every table engine implements (the Lance one lives in `lake-lance`).
//!   It has no default methods: every backend must define its own fail-closed lineage. It holds
//!   no state between calls: a table's state is a value it returns ([`TableSnapshot`]), whose
//!   live identities are a stream ([`IdentityStream`]).
//! - [`lineage`]: [`TableLineage`] and the named [`LineageProblem`]s that make GC refuse.
//! - [`replay`]: journal replay: reference counts per version and the exact live set
//!   (an object is live if its count is above zero in at least one retained version).
//! - [`spilled_replay`]: the same live set in bounded memory, identity by identity over
//!   journal events sorted on local disk ([`spill`]).
//! - [`stamp`]: a table's lineage at one moment ([`LineageStamp`]) and how it may move on
//!   between a plan and its apply ([`LineageBasis`]).
//! - [`journal`]: the shared answers from decoded sidecars (live set, pages, additions).
//! - [`memory`]: [`memory::MemoryEngine`], an in-memory test double with the same rules.

pub mod allocator;
pub mod budget;
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

/// A table's state as one read of its lineage and journal saw it: what the planner and apply
/// pass around instead of asking the engine again. Reading it is the work (the journal from the
/// replay's start, held in sorted runs spilled past the engine's memory budget); its live
/// identities are a stream read from it, once.
pub trait TableSnapshot: Send + std::fmt::Debug {
    /// The retained versions, the replay base and every problem of the table's journal.
    fn lineage(&self) -> &TableLineage;

    /// The identities referenced (count above zero) by at least one of `roots`, in ascending
    /// order, computed from this snapshot's journal; consumes the snapshot.
    ///
    /// # Errors
    /// [`EngineError::Lineage`] when the journal needed for `roots` is incomplete or
    /// inconsistent (the caller must not treat that as "no references"); storage errors of a
    /// spill folder.
    fn live(self: Box<Self>, roots: &RetainedRoots) -> Result<Box<dyn IdentityStream>, EngineError>;
}

/// The part of the key space one plan covers (a shard's range): identities whose `uri` `u`
/// has `after < u <= until` in byte order (`None`: unbounded on that side), the order of lake
/// keys and of S3 listings. A reader of a table's journal for such a plan may skip references
/// outside it, except those that concern every range (a reference inside the lake root that is
/// no managed key, which GC refuses: [`UriRange::concerns`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UriRange {
    /// Identities whose `uri` is strictly greater than this.
    pub after: Option<String>,
    /// Identities whose `uri` is at most this.
    pub until: Option<String>,
}

impl UriRange {
    /// The whole key space.
    pub fn all() -> Self {
        Self::default()
    }

    /// True for the whole key space.
    pub fn is_all(&self) -> bool {
        self.after.is_none() && self.until.is_none()
    }

    /// True when `uri` lies in the range.
    pub fn contains(&self, uri: &str) -> bool {
        self.after.as_deref().is_none_or(|a| uri > a) && self.until.as_deref().is_none_or(|u| uri <= u)
    }

    /// True when some `uri` in `[first, last]` may lie in the range.
    pub fn overlaps(&self, first: &str, last: &str) -> bool {
        self.after.as_deref().is_none_or(|a| last > a) && self.until.as_deref().is_none_or(|u| first <= u)
    }

    /// True when a plan of this range needs the reference `uri`: it lies in the range, or it is
    /// inside the lake root but no managed key (a problem for every plan). External URIs
    /// (`scheme://...`) are never objects of the lake.
    pub fn concerns(&self, uri: &str) -> bool {
        if lake_common::is_external_identity(uri) {
            return false;
        }
        self.contains(uri) || !lake_common::is_managed_key(uri)
    }
}

/// A stream of identities in strictly ascending order.
pub trait IdentityStream: Send {
    /// The next identity; `None` at the end.
    ///
    /// # Errors
    /// [`EngineError::Lineage`] when the journal turns out inconsistent; storage errors.
    fn next_identity(&mut self) -> Result<Option<ObjectIdentity>, EngineError>;
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

/// A write intent as GC sees it: a write whose commit may still land and whose references GC
/// keeps until the intent is resolved (`lake_common::intent`; `docs/safety.md`, "Commits that
/// land late").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IntentInfo {
    /// Key of the intent document relative to the lake root
    /// (`_lake/intents/<table>/<write_id>.json`).
    pub key: String,
    /// The lineage written (`t` or `t@b`).
    pub table: String,
    /// The operation (`append`, `update`, ...).
    pub operation: String,
    /// When the store last wrote the document, milliseconds since the Unix epoch (UTC).
    pub last_modified_ms: i64,
    /// The writer's deadline, milliseconds after a moment taken before the document was written.
    pub deadline_ms: u64,
    /// References the intent names (rows of its log, or its inline identities).
    pub references: u64,
}

/// The write intents of a lake, read once by a plan after its cutoff is fixed and before any
/// lineage ([`Engine::write_intents`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteIntents {
    /// Every intent read, sorted by key.
    pub intents: Vec<IntentInfo>,
    /// Intents (or the reference logs they name) that could not be read or did not match their
    /// seal: GC cannot know what they protect, so a plan with any is incomplete.
    pub problems: Vec<String>,
}

/// What reading the identities that a range of a lineage's journal entries removed came to
/// ([`Engine::references_removed_between`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removals {
    /// Every entry of the range was read and every identity the `removed` list of a delta entry
    /// names was handed over.
    Read {
        /// The range's start (exclusive): the `after` asked for, or the lineage's first entry.
        after: u64,
        /// The versions of the range whose entry is a snapshot, ascending: it lists what its
        /// version references, not what it removed (an overwrite, a restore and a repair write
        /// one), so what it released is what the version before it referenced.
        snapshots: Vec<u64>,
    },
    /// The entry of `version` cannot be read: `reason` says why (no entry, an undecodable one,
    /// or a lineage whose first entry is neither version 1 nor a snapshot).
    Unreadable {
        /// The version at fault.
        version: u64,
        /// Why, one phrase.
        reason: String,
    },
}

/// The engine trait: tables, their snapshots (lineage and live references), their stamps, and
/// what versions added.
///
/// Implementations must be deterministic (the same storage state gives the same answers) and
/// fail closed: an unreadable journal is a [`LineageProblem`] or an [`EngineError`], never an
/// empty answer.
#[async_trait]
pub trait Engine: Send + Sync {
    /// The normalised root of the lake whose tables this engine reads (the string form of
    /// `lake_common::LakeRootUri`), or `None` for an engine bound to no store (a test double).
    /// A garbage collector refuses an engine bound to another lake than its store's.
    fn lake_root(&self) -> Option<String>;

    /// Every registered table, plus problems such as unregistered datasets.
    ///
    /// # Errors
    /// [`EngineError::Storage`] when the registry cannot be read.
    async fn tables(&self) -> Result<TableSet, EngineError>;

    /// Reads `location`'s lineage and its journal into a [`TableSnapshot`]: the one read of a
    /// table's journal a plan (or an apply's check of its candidates) makes.
    ///
    /// # Errors
    /// [`EngineError::Storage`] / [`EngineError::Table`] when the table cannot be read at all
    /// (problems with its journal are in the snapshot's lineage, not errors).
    async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError>;

    /// As [`Engine::snapshot`] for a plan of `range` only: the snapshot's live identities may
    /// leave out those the range does not concern ([`UriRange::concerns`]), so an engine reads
    /// only its part of a large journal (a shard of a sharded plan). The default reads the whole
    /// journal.
    ///
    /// # Errors
    /// As [`Engine::snapshot`].
    async fn snapshot_in(
        &self,
        location: &TableLocation,
        range: &UriRange,
    ) -> Result<Box<dyn TableSnapshot>, EngineError> {
        let _ = range;
        self.snapshot(location).await
    }

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

    /// Hands `visit` every identity that the journal entries of `location`'s versions in
    /// `(after, upto]` remove (each entry's `removed` list, in version order, an identity as
    /// often as entries name it), skipping those `range` does not concern; with `after` `None`,
    /// the versions after the lineage's first journal entry (version 1, or the snapshot a
    /// branch starts with). Entries of versions a cleanup removed are read too: the journal
    /// outlives its versions. An identity whose count fell to zero in one of those versions is
    /// among them, unless that version's entry is a snapshot (its removals are implicit: the
    /// answer names it) or an entry cannot be read ([`Removals::Unreadable`]). Reads only the
    /// entries of the range (GC's incremental plans: the keys released since a state).
    ///
    /// # Errors
    /// [`EngineError::Storage`] / [`EngineError::Table`] when the journal cannot be read at
    /// all; whatever `visit` returns.
    async fn references_removed_between(
        &self,
        location: &TableLocation,
        after: Option<u64>,
        upto: u64,
        range: &UriRange,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<Removals, EngineError>;

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

    /// Every write intent of the lake: hands each reference an intent names to `visit`
    /// (unsorted; a reference log's are read one record batch at a time) and returns the intents
    /// and the problems met. GC calls it after fixing its cutoff and before reading any lineage,
    /// and keeps what `visit` receives live (`docs/safety.md`, "Commits that land late").
    ///
    /// # Errors
    /// [`EngineError::Storage`] when the intents cannot be listed or read (never an empty
    /// answer); whatever `visit` returns.
    async fn write_intents(
        &self,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<WriteIntents, EngineError>;
}
