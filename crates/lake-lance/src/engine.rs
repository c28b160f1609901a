//! [`LanceEngine`]: the Lance engine of one lake: opening its datasets, their versions, and the
//! [`lake_engine::Engine`] implementation GC reads lineage through (from `Dataset::versions()`
//! and the journal).
//!
//! Every version-producing operation lives in a module of its own and goes through the one
//! write protocol (`crate::commit`, docs/protocol.md).

use crate::error::LanceEngineError;
use crate::scan::count_references;
use crate::sidecar;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lake_common::{DeltaKind, ObjectIdentity, ReferenceCounts};
use lake_engine::journal::{added_between, Sidecars};
use lake_engine::{Engine, EngineError, LineageStamp, TableLocation, TableSet, TableSnapshot, UnreferencedFile};
use lake_store::clock::{ProbeClock, StoreClock};
use lake_store::guard::{SystemClock, WriterClock};
use lake_store::layout::{dataset_key, validate_table_name, DATASET_SUFFIX, TABLES_PREFIX};
use lake_store::registry;
use lake_store::store::LakeStore;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::{WriteMode, WriteParams};
use lance::io::{ObjectStoreParams, StorageOptionsAccessor, WrappingObjectStore};
use lance::Dataset;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// A version committed through the engine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CommitOutcome {
    /// Table name.
    pub table: String,
    /// The version Lance committed.
    pub version: u64,
    /// Rows written (append) or deleted (delete).
    pub rows: u64,
    /// References added (sum of counts), net of removals; a large upsert journaled from its
    /// own row log (`version_diff::logged_entry`) counts every reference of the rows it wrote,
    /// not netted against those of the rows it replaced.
    pub references_added: u64,
    /// References removed (sum of counts), net of additions (not netted for a large upsert, as
    /// above).
    pub references_removed: u64,
    /// True when Lance rebased the commit onto versions committed concurrently (its read
    /// version was older than `version - 1`).
    pub rebased: bool,
}

/// What a version cleanup removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupOutcome {
    /// Versions removed.
    pub old_versions: u64,
    /// Bytes of Lance files removed.
    pub bytes_removed: u64,
    /// Stale restore tags removed first (restores killed after tagging their source; see
    /// [`crate::history`]).
    pub stale_restore_tags: Vec<crate::history::RestoreTag>,
}

/// One version of a table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionInfo {
    /// Version number.
    pub version: u64,
    /// Commit time, RFC 3339 UTC.
    pub timestamp: String,
    /// Tags of this lineage pointing at it (a tag of another lineage of the table, a branch's
    /// tag on the main line's version of the same number say, is not listed).
    pub tags: Vec<String>,
    /// The restore tags among `tags` (`lake-restore-*`): a restore in progress, or killed after
    /// tagging its source when stale ([`crate::history::restore_tag_stale_after`]).
    pub restore_tags: Vec<crate::history::RestoreTag>,
    /// Whether its reference sidecar exists.
    pub journaled: bool,
}

/// The Lance engine of one lake.
///
/// Planning memory: the journal of the table being replayed is held in sorted-run buffers of at
/// most [`LanceEngine::memory_budget`] bytes and spills to the temporary folder past it
/// (`crate::live`).
pub struct LanceEngine {
    store: LakeStore,
    memory_budget: usize,
    /// Sorted runs the journal replays of this engine spilled, in total (a counter for
    /// reports; no state a call depends on).
    journal_runs: std::sync::atomic::AtomicU64,
    /// Bytes of journal entries (documents and reference logs) its plans read, in total (a
    /// counter for reports and benchmarks).
    journal_bytes: std::sync::atomic::AtomicU64,
    /// The clock the publication guard reads (the system's, or a test's).
    writer_clock: Arc<dyn WriterClock>,
    /// The store's clock, as resolution reads it to judge an intent's deadline (a probe of the
    /// store, or a test's).
    store_clock: Arc<dyn StoreClock>,
    /// The commit deadline of every write with an intent, when set (else
    /// `crate::commit::default_commit_deadline`).
    commit_deadline: Option<Duration>,
    /// Wraps the object store of every dataset the engine opens or writes, when set.
    store_wrapper: Option<Arc<dyn WrappingObjectStore>>,
}

impl std::fmt::Debug for LanceEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LanceEngine").field("root", &self.store.root().to_string()).finish()
    }
}

impl LanceEngine {
    /// The engine of the lake in `store`.
    pub fn new(store: LakeStore) -> Self {
        Self {
            store,
            memory_budget: lake_engine::budget::share(lake_engine::budget::DEFAULT_MEMORY_BUDGET).0,
            journal_runs: std::sync::atomic::AtomicU64::new(0),
            journal_bytes: std::sync::atomic::AtomicU64::new(0),
            writer_clock: Arc::new(SystemClock),
            store_clock: Arc::new(ProbeClock),
            commit_deadline: None,
            store_wrapper: None,
        }
    }

    /// The same engine with the publication guard reading `clock` instead of the system's
    /// (tests of the guard and of age gates inject a [`lake_store::guard::FixedWriterClock`]
    /// rather than sleeping).
    pub fn with_writer_clock(mut self, clock: Arc<dyn WriterClock>) -> Self {
        self.writer_clock = clock;
        self
    }

    /// The same engine reading the store's clock from `clock` when it judges whether a write
    /// intent is past its deadline (a test injects a [`lake_store::clock::FixedClock`] to step
    /// the clock instead of sleeping). Safety never depends on it (docs/protocol.md, "Clocks").
    pub fn with_store_clock(mut self, clock: Arc<dyn StoreClock>) -> Self {
        self.store_clock = clock;
        self
    }

    /// The store's clock resolution reads.
    pub(crate) fn store_clock(&self) -> &Arc<dyn StoreClock> {
        &self.store_clock
    }

    /// The same engine giving every write with an intent the commit deadline `deadline`: how
    /// long after its intent's store time a resolver may revoke it, and how long the writer
    /// waits for Lance's commit (default: the guard's margin between 30 s and 5 min,
    /// [`crate::commit::default_commit_deadline`]). A fence waits at most this long too. Safety
    /// does not depend on it (docs/protocol.md, "Clocks").
    pub fn with_commit_deadline(mut self, deadline: Duration) -> Self {
        self.commit_deadline = Some(deadline.max(Duration::from_millis(1)));
        self
    }

    /// The same engine wrapping the object store of every Lance dataset it opens or writes
    /// with `wrapper` (Lance's `ObjectStoreParams::object_store_wrapper`): tracing, or a fault
    /// injected by a test (a manifest write held back).
    pub fn with_object_store_wrapper(mut self, wrapper: Arc<dyn WrappingObjectStore>) -> Self {
        self.store_wrapper = Some(wrapper);
        self
    }

    /// The commit deadline override, if any.
    pub(crate) fn commit_deadline_override(&self) -> Option<Duration> {
        self.commit_deadline
    }

    /// How long a resolver's fence may take to commit.
    pub(crate) fn fence_timeout(&self) -> Duration {
        self.commit_deadline.unwrap_or(crate::commit::MIN_COMMIT_DEADLINE)
    }

    /// Now by the writer's clock (what the publication guard judges age against).
    pub(crate) fn writer_now(&self) -> DateTime<Utc> {
        self.writer_clock.now()
    }

    /// The writer's clock.
    pub(crate) fn writer_clock(&self) -> Arc<dyn WriterClock> {
        self.writer_clock.clone()
    }

    /// The same engine replaying journals with at most `bytes` of sorted-run buffers in memory
    /// (default: half of [`lake_engine::budget::DEFAULT_MEMORY_BUDGET`]); the rest spills to the
    /// temporary folder.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        self.memory_budget = bytes;
        self
    }

    /// The replay's memory budget in bytes.
    pub fn memory_budget(&self) -> usize {
        self.memory_budget
    }

    /// Sorted runs this engine's journal replays spilled to the temporary folder so far (0 when
    /// every journal fit the memory budget).
    pub fn journal_runs_spilled(&self) -> u64 {
        self.journal_runs.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_spilled_runs(&self, runs: usize) {
        self.journal_runs.fetch_add(runs as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bytes of journal entries (sidecar documents and the reference logs, or the blocks of
    /// them, that were read) this engine's plans read so far: what a shard's share of a
    /// sharded plan costs in reads.
    pub fn journal_bytes_read(&self) -> u64 {
        self.journal_bytes.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn count_journal_bytes(&self, bytes: u64) {
        self.journal_bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// The lake's store.
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// The dataset URI of `table`.
    pub fn dataset_uri(&self, table: &str) -> String {
        self.store.uri_of(&dataset_key(table))
    }

    pub(crate) fn write_params(&self, mode: WriteMode) -> WriteParams {
        WriteParams { mode, skip_auto_cleanup: true, store_params: self.store_params(), ..Default::default() }
    }

    /// The object store parameters of every dataset the engine opens or writes: the store's
    /// options and the engine's wrapper (none when there are neither).
    pub(crate) fn store_params(&self) -> Option<ObjectStoreParams> {
        if self.store.storage_options().is_empty() && self.store_wrapper.is_none() {
            return None;
        }
        let accessor = (!self.store.storage_options().is_empty())
            .then(|| Arc::new(StorageOptionsAccessor::with_static_options(self.store.storage_options().clone())));
        Some(ObjectStoreParams {
            storage_options_accessor: accessor,
            object_store_wrapper: self.store_wrapper.clone(),
            ..Default::default()
        })
    }

    /// A builder of `table`'s dataset with the engine's store parameters.
    pub(crate) fn dataset_builder(&self, table: &str) -> DatasetBuilder {
        let builder = DatasetBuilder::from_uri(self.dataset_uri(table));
        match self.store_params() {
            Some(params) => builder.with_store_params(params),
            None => builder,
        }
    }

    /// True when `table` has a dataset (a `_versions` folder).
    ///
    /// # Errors
    /// Storage errors.
    pub async fn table_exists(&self, table: &str) -> Result<bool, LanceEngineError> {
        let (_, objects) = self.store.list_dir(&format!("{}/_versions", dataset_key(table))).await?;
        Ok(!objects.is_empty())
    }

    /// Opens the latest version of `table`.
    ///
    /// # Errors
    /// [`LanceEngineError::NoSuchTable`], Lance errors.
    pub async fn open(&self, table: &str) -> Result<Dataset, LanceEngineError> {
        validate_table_name(table)?;
        if !self.table_exists(table).await? {
            return Err(LanceEngineError::NoSuchTable { table: table.into(), uri: self.dataset_uri(table) });
        }
        self.dataset_builder(table).load().await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "open",
            source,
        })
    }

    /// Every version of lineage `table` (`t` or `t@b`) that still exists, with the tags of that
    /// lineage (restore tags judged stale or not by this host's clock) and whether it is
    /// journaled.
    ///
    /// # Errors
    /// Lance and storage errors.
    pub async fn versions(&self, table: &str) -> Result<Vec<VersionInfo>, LanceEngineError> {
        let ds = self.open(table).await?;
        let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "list versions", source };
        let versions = ds.versions().await.map_err(lance_err)?;
        let tags = self.lineage_tags(&ds, table).await?;
        let mut restore_tags = self.restore_tags(table, Utc::now()).await?;
        // Which versions' entries decode (streamed: no entry is held).
        let mut decoded = sidecar::Decoded::default();
        let listing = sidecar::list(&self.store, table).await?;
        sidecar::stream_listed(&self.store, table, &listing, 1..=u64::MAX, &mut decoded).await?;
        let mut by_version: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (name, contents) in tags {
            by_version.entry(contents.version).or_default().push(name);
        }
        Ok(versions
            .into_iter()
            .map(|v| {
                let tags = by_version.remove(&v.version).unwrap_or_default();
                let (restore, other): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut restore_tags).into_iter().partition(|t| t.version == v.version);
                restore_tags = other;
                VersionInfo {
                    version: v.version,
                    timestamp: fmt_time(v.timestamp),
                    tags,
                    restore_tags: restore,
                    journaled: decoded.ok(v.version),
                }
            })
            .collect())
    }

    /// Counts the references of `table` at `version` by scanning (the full-scan baseline).
    ///
    /// # Errors
    /// Lance errors.
    pub async fn scan_version(&self, table: &str, version: u64) -> Result<ReferenceCounts, LanceEngineError> {
        let ds = self.open_version(table, version).await?;
        count_references(&ds, table, self.store.root(), None).await
    }

    /// Opens `version` of `table`.
    ///
    /// # Errors
    /// As [`LanceEngine::open`]; Lance errors (no such version).
    pub(crate) async fn open_version(&self, table: &str, version: u64) -> Result<Dataset, LanceEngineError> {
        let ds = self.open(table).await?;
        ds.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "checkout",
            source,
        })
    }
}

/// Whether Lance rebased the commit of `version` (its transaction's read version is older than
/// `version - 1`). Informational: an unreadable transaction counts as not rebased.
pub(crate) async fn rebased(ds: &Dataset, version: u64) -> bool {
    match ds.read_transaction_by_version(version).await {
        Ok(Some(tx)) => tx.read_version + 1 < version,
        _ => false,
    }
}

pub(crate) fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[async_trait]
impl Engine for LanceEngine {
    fn lake_root(&self) -> Option<String> {
        Some(self.store.root().to_string())
    }

    async fn tables(&self) -> Result<TableSet, EngineError> {
        let names = registry::tables(&self.store).await.map_err(LanceEngineError::from)?;
        let known: BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let (dirs, _) = self.store.list_dir(TABLES_PREFIX).await.map_err(LanceEngineError::from)?;
        let mut problems = Vec::new();
        for d in dirs {
            let name = d.rsplit('/').next().unwrap_or(&d);
            let registered = name.strip_suffix(DATASET_SUFFIX).is_some_and(|n| known.contains(n));
            // A first write that failed before its commit (a schema Lance refused, Ctrl-C) leaves
            // the empty folders of its journal locally: nothing there can reference an object.
            // Checked again before every group of deletes, like any unregistered dataset.
            if !registered && self.store.holds_anything_below(&d).await.map_err(LanceEngineError::from)? {
                problems.extend(self.unregistered_problem(&d, name).await?);
            }
        }
        let tables = names.iter().map(|n| TableLocation { name: n.clone(), uri: self.dataset_uri(n) }).collect();
        Ok(TableSet { tables, problems })
    }

    async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError> {
        self.snapshot_in(location, &lake_engine::UriRange::all()).await
    }

    async fn snapshot_in(
        &self,
        location: &TableLocation,
        range: &lake_engine::UriRange,
    ) -> Result<Box<dyn TableSnapshot>, EngineError> {
        let (snapshot, bytes) =
            self.lineage_and_journal_in(&location.name, true, self.memory_budget(), range.clone()).await?;
        self.count_spilled_runs(snapshot.journal.spilled_runs());
        self.count_journal_bytes(bytes);
        Ok(Box::new(snapshot))
    }

    async fn lineage_stamp(&self, location: &TableLocation) -> Result<LineageStamp, EngineError> {
        Ok(self.observe(&location.name).await?.stamp)
    }

    async fn references_added_between(
        &self,
        location: &TableLocation,
        after: u64,
        upto: u64,
    ) -> Result<Vec<ObjectIdentity>, EngineError> {
        // Only the entries in the range are read.
        let table = &location.name;
        let mut listing = sidecar::list(self.store(), table).await?;
        let range = after.saturating_add(1)..=upto;
        // The dataset is read only when a version in the range has no sidecar (an implied entry).
        if range.clone().any(|v| !listing.files.contains_key(&v)) {
            let ds = self.open(table).await?;
            crate::foreign::imply_entries(&ds, table, self.store().root(), &mut listing, range.clone()).await;
        }
        let mut entries = Sidecars::new();
        sidecar::visit_listed(self.store(), table, &listing, range.clone(), |v, entry| {
            entries.insert(v, entry);
            Ok(())
        })
        .await?;
        // Each new version's written entry must be bound to the manifest the table holds now
        // before its references are revived (a version cleaned up since is not checked).
        let manifests = crate::binding::list_manifests(self.store(), table).await?;
        let mut bindings: BTreeMap<u64, Option<lake_common::VersionBinding>> = BTreeMap::new();
        for (&v, entry) in &entries {
            if let (true, true, Ok(delta)) = (listing.files.contains_key(&v), manifests.contains_key(&v), entry) {
                bindings.insert(v, delta.binding.clone());
            }
        }
        if !bindings.is_empty() {
            let ds = self.open(table).await?;
            let problems = crate::binding::check_entries(&ds, table, &manifests, &bindings).await?;
            if !problems.is_empty() {
                return Err(EngineError::Lineage { table: table.clone(), problems });
            }
        }
        // A lineage new since the plan (`after` 0) whose journal starts with a snapshot above
        // version 1 (a branch starts at its source's version) is read from that snapshot.
        let after = match entries.iter().next() {
            Some((first, Ok(entry))) if after == 0 && *first > 1 && entry.kind == DeltaKind::Snapshot => first - 1,
            _ => after,
        };
        added_between(table, after, upto, &entries)
    }

    async fn references_removed_between(
        &self,
        location: &TableLocation,
        after: Option<u64>,
        upto: u64,
        range: &lake_engine::UriRange,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<lake_engine::Removals, EngineError> {
        self.removed_between(&location.name, after, upto, range, visit).await
    }

    async fn unreferenced_journal_files(
        &self,
        location: &TableLocation,
        cutoff_ms: i64,
    ) -> Result<Vec<UnreferencedFile>, EngineError> {
        Ok(self.journal_garbage(&location.name, cutoff_ms).await?)
    }

    async fn write_intents(
        &self,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<lake_engine::WriteIntents, EngineError> {
        Ok(lake_store::intents::read_all(&self.store, visit).await.map_err(LanceEngineError::from)?)
    }
}
