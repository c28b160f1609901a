//! [`LanceEngine`]: journaled table operations over Lance 14 datasets.
//!
//! Every operation that produces a Lance version follows the same protocol (docs/architecture.md,
//! "The write protocol"):
//! commit the Lance version, write its sidecar create-only, then advance the table registry.
//! If the sidecar cannot be written the call fails and the registry is not advanced; GC then
//! finds the version without a journal and refuses until it is repaired.
//!
//! (Longer than most modules: every version-producing operation of the engine follows the one
//! commit protocol above and shares its helpers; lineage, live references, history, ingest and
//! verification live in their own modules.)

use crate::create_commit::CreateOnlyCommitHandler;
use crate::error::LanceEngineError;
use crate::journaling::{discard_log, JournalFailure, JournalLog, JournalingReader};
use crate::scan::count_references;
use crate::sidecar;
use arrow_array::RecordBatchReader;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lake_common::{DeltaKind, LogHead, LogRef, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts};
use lake_engine::journal::{added_between, Sidecars};
use lake_engine::{
    Engine, EngineError, LineageProblem, LineageStamp, TableLineage, TableLocation, TableSet, TableSnapshot,
    UnreferencedFile,
};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::failpoint;
use lake_objects::guard::PublicationGuard;
use lake_objects::layout::{dataset_key, validate_table_name, DATASET_SUFFIX, TABLES_PREFIX};
use lake_objects::registry;
use lake_objects::store::LakeStore;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::optimize::{compact_files, CompactionOptions};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::io::{ObjectStoreParams, StorageOptionsAccessor};
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
    /// References added (sum of counts).
    pub references_added: u64,
    /// References removed (sum of counts).
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
}

/// One version of a table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionInfo {
    /// Version number.
    pub version: u64,
    /// Commit time, RFC 3339 UTC.
    pub timestamp: String,
    /// Tags pointing at it.
    pub tags: Vec<String>,
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
            memory_budget: lake_objects::spill::share(lake_objects::spill::DEFAULT_MEMORY_BUDGET).0,
            journal_runs: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The same engine replaying journals with at most `bytes` of sorted-run buffers in memory
    /// (default: half of [`lake_objects::spill::DEFAULT_MEMORY_BUDGET`]); the rest spills to the
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

    /// The lake's store.
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// The dataset URI of `table`.
    pub fn dataset_uri(&self, table: &str) -> String {
        self.store.uri_of(&dataset_key(table))
    }

    pub(crate) fn write_params(&self, mode: WriteMode) -> WriteParams {
        let mut params = WriteParams { mode, skip_auto_cleanup: true, ..Default::default() };
        if !self.store.storage_options().is_empty() {
            params.store_params = Some(ObjectStoreParams {
                storage_options_accessor: Some(Arc::new(StorageOptionsAccessor::with_static_options(
                    self.store.storage_options().clone(),
                ))),
                ..Default::default()
            });
        }
        params
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
        DatasetBuilder::from_uri(self.dataset_uri(table))
            .with_storage_options(self.store.storage_options().clone())
            .load()
            .await
            .map_err(|source| LanceEngineError::Lance { table: table.into(), action: "open", source })
    }

    /// Journals version `delta.version` and advances the registry: the tail of every commit.
    pub(crate) async fn publish(&self, delta: ObjectReferenceDelta) -> Result<(), LanceEngineError> {
        sidecar::write(&self.store, &delta).await?;
        self.advance(&delta.table, delta.version).await
    }

    /// The tail of a commit once its sidecar is written: advances the registry.
    async fn advance(&self, table: &str, version: u64) -> Result<(), LanceEngineError> {
        failpoint::hit("append.after_sidecar")?;
        registry::advance(&self.store, table, version).await?;
        failpoint::hit("append.after_registry")?;
        Ok(())
    }

    /// Writes empty deltas for the versions in `(after, upto]` that have no sidecar and whose
    /// Lance transaction is content-preserving ([`crate::foreign::preserves_content`]). Versions of
    /// other kinds are left to the writer that made them (a concurrent append journals its own).
    /// `upto` itself must end up journaled.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when `upto` is not content-preserving; Lance and
    /// sidecar errors.
    async fn journal_content_preserving(
        &self,
        ds: &Dataset,
        table: &str,
        after: u64,
        upto: u64,
    ) -> Result<(), LanceEngineError> {
        // Only the versions in question: the rest of the journal (and its reference logs) is
        // not read.
        for v in after + 1..=upto {
            if matches!(sidecar::read(&self.store, table, v).await?, Some(Ok(_))) {
                continue;
            }
            let tx = ds.read_transaction_by_version(v).await.map_err(|source| LanceEngineError::Lance {
                table: table.into(),
                action: "read transaction",
                source,
            })?;
            let judged = match &tx {
                Some(tx) => crate::foreign::preserves_content(&tx.operation),
                None => Err("its transaction is missing".to_string()),
            };
            match judged {
                Ok(()) => sidecar::write(&self.store, &ObjectReferenceDelta::empty(table, v)).await?,
                Err(why) if v == upto => {
                    return Err(LanceEngineError::InvalidInput(format!(
                        "table `{table}` version {v} is not content-preserving ({why}); refusing to journal it as empty"
                    )))
                }
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Appends `batches` to `table` (creating it on first use) as one new version, journaling
    /// the references of every batch as Lance consumes it (a delta).
    ///
    /// # Errors
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value (nothing is
    /// committed); Lance, sidecar and registry errors.
    pub async fn append(
        &self,
        table: &str,
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<CommitOutcome, LanceEngineError> {
        self.write_batches(table, batches, false).await
    }

    /// Replaces the whole content of `table` (creating it on first use) by `batches` as one new
    /// version, journaled as a snapshot of the new content.
    ///
    /// # Errors
    /// As [`LanceEngine::append`].
    pub async fn overwrite(
        &self,
        table: &str,
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<CommitOutcome, LanceEngineError> {
        self.write_batches(table, batches, true).await
    }

    async fn write_batches(
        &self,
        table: &str,
        batches: Box<dyn RecordBatchReader + Send>,
        overwrite: bool,
    ) -> Result<CommitOutcome, LanceEngineError> {
        validate_table_name(table)?;
        let exists = self.table_exists(table).await?;
        if !exists && lake_objects::layout::split_lineage(table).1.is_some() {
            // A branch is made by `create_branch` (its first version is the source's), never by
            // a write; nothing is written for it here.
            return Err(LanceEngineError::NoSuchTable { table: table.into(), uri: self.dataset_uri(table) });
        }
        let descriptor = LakeDescriptor::load(&self.store).await?;
        let guard = PublicationGuard::from_policy(&descriptor);
        let (reader, worker) = JournalingReader::new(batches, &self.store, table)?;
        let mode = match (exists, overwrite) {
            (false, _) => WriteMode::Create,
            (true, false) => WriteMode::Append,
            (true, true) => WriteMode::Overwrite,
        };
        let creating = matches!(mode, WriteMode::Create);
        let action = if overwrite { "overwrite" } else { "append" };
        let uri = self.dataset_uri(table);
        let params = self.write_params(mode);
        // Phase 1: write the data files without committing a version, while the journal worker
        // writes the reference log beside them.
        let source: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let started = std::time::Instant::now();
        let written = InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted_stream(source).await;
        let data_written = started.elapsed();
        let log = worker.finish().await.map_err(|failure| match failure {
            JournalFailure::Location(source) => LanceEngineError::Location { table: table.into(), source },
            JournalFailure::Log(message) => LanceEngineError::JournalLog { table: table.into(), message },
        })?;
        let ds = match self.commit_streamed(table, written, &params, &guard, &log, creating, action).await {
            Ok(ds) => ds,
            Err(e) => {
                discard_log(&self.store, &log.key).await;
                return Err(e);
            }
        };
        failpoint::hit("append.after_lance_commit")?;
        let committed = started.elapsed();
        let version = ds.version().version;
        // A create is an `Overwrite` in Lance: the version holds exactly these rows, also if it
        // landed on a dataset another writer created a moment before.
        let kind = if overwrite || creating { DeltaKind::Snapshot } else { DeltaKind::Delta };
        let head = LogHead::new(
            table,
            version,
            kind,
            LogRef {
                write_id: log.write_id.clone(),
                references: log.totals.references,
                bytes: log.totals.bytes,
                sha256: log.totals.sha256.clone(),
            },
        );
        sidecar::write_head(&self.store, &head).await?;
        self.advance(table, version).await?;
        tracing::debug!(
            table,
            version,
            rows = log.rows,
            references = log.totals.references,
            log_bytes = log.totals.bytes,
            data_files_s = data_written.as_secs_f64(),
            commit_s = (committed - data_written).as_secs_f64(),
            publish_s = (started.elapsed() - committed).as_secs_f64(),
            "{action} committed and journaled"
        );
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows: log.rows,
            references_added: log.totals.references,
            references_removed: 0,
            rebased: rebased(&ds, version).await,
        })
    }

    /// Phase 2 of a streamed write: the publication guard on the oldest new reference, then the
    /// Lance commit within the guard's margin.
    #[allow(clippy::too_many_arguments)]
    async fn commit_streamed(
        &self,
        table: &str,
        written: lance::Result<lance::dataset::transaction::Transaction>,
        params: &WriteParams,
        guard: &PublicationGuard,
        log: &JournalLog,
        creating: bool,
        action: &'static str,
    ) -> Result<Dataset, LanceEngineError> {
        // Lance's data phase refuses a create too once the dataset exists (another writer's).
        let transaction = written.map_err(|source| match source {
            lance::Error::DatasetAlreadyExists { .. } if creating => {
                LanceEngineError::ConcurrentCreate { table: table.into() }
            }
            source => LanceEngineError::Lance { table: table.into(), action, source },
        })?;
        // The guard, right before the commit; the commit must land within the margin.
        guard
            .check(log.oldest.iter(), Utc::now())
            .map_err(|source| LanceEngineError::Guard { table: table.into(), source })?;
        // Lance commits a create (an `Overwrite` transaction) on top of a dataset that appeared
        // since the write began, replacing its rows: the table another writer created while
        // this one wrote its data files is refused here instead (the retry appends), and one
        // created between this check and Lance's own is refused by the commit handler, which
        // publishes a create only as version 1 (`create_commit`).
        if creating && self.table_exists(table).await? {
            return Err(LanceEngineError::ConcurrentCreate { table: table.into() });
        }
        let uri = self.dataset_uri(table);
        let mut commit = CommitBuilder::new(uri.as_str())
            .with_skip_auto_cleanup(true)
            .with_timeout(Some(guard.margin().max(Duration::from_millis(1))));
        if let Some(store_params) = params.store_params.clone() {
            commit = commit.with_store_params(store_params);
        }
        let lance_error = |source: lance::Error| LanceEngineError::Lance { table: table.into(), action, source };
        if creating {
            // One attempt: a retry would only meet the other writer's version 1 again.
            let handler =
                CreateOnlyCommitHandler::for_uri(uri.as_str(), &params.store_params).await.map_err(lance_error)?;
            commit = commit.with_commit_handler(handler).with_max_retries(1);
        }
        commit.execute(transaction).await.map_err(|source| match source {
            lance::Error::DatasetAlreadyExists { .. }
            | lance::Error::CommitConflict { .. }
            | lance::Error::RetryableCommitConflict { .. }
            | lance::Error::TooMuchWriteContention { .. }
                if creating =>
            {
                LanceEngineError::ConcurrentCreate { table: table.into() }
            }
            source => lance_error(source),
        })
    }

    /// Deletes the rows of `table` matching `predicate` (Lance SQL), journaling the references of
    /// the deleted rows with their counts, computed from the fragments the delete changed
    /// (`crate::version_diff`). Returns `None` when no row matched (no new version).
    ///
    /// # Errors
    /// Lance errors (including an invalid predicate), sidecar and registry errors.
    pub async fn delete(&self, table: &str, predicate: &str) -> Result<Option<CommitOutcome>, LanceEngineError> {
        let mut ds = self.open(table).await?;
        let before = ds.version().version;
        let result = ds.delete(predicate).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "delete",
            source,
        })?;
        let version = result.new_dataset.version().version;
        if version == before {
            return Ok(None);
        }
        // From the two manifests, not from a count taken before: a predicate need not evaluate
        // the same way twice (`random()`), and Lance may rebase the delete.
        let diff = crate::version_diff::diff_entry(&result.new_dataset, table, self.store.root()).await?;
        let references_removed = diff.removed;
        self.publish(diff.entry).await?;
        Ok(Some(CommitOutcome {
            table: table.into(),
            version,
            rows: result.num_deleted_rows,
            references_added: 0,
            references_removed,
            rebased: rebased(&result.new_dataset, version).await,
        }))
    }

    /// Compacts `table`'s fragments (materialising deletions). Content-preserving: journals an
    /// empty delta. Returns `None` when there was nothing to compact.
    ///
    /// # Errors
    /// Lance, sidecar and registry errors.
    pub async fn compact(&self, table: &str) -> Result<Option<CommitOutcome>, LanceEngineError> {
        let mut ds = self.open(table).await?;
        let before = ds.version().version;
        compact_files(&mut ds, CompactionOptions::default(), None).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "compaction",
            source,
        })?;
        let version = ds.version().version;
        if version == before {
            return Ok(None);
        }
        // Lance's compaction commits a ReserveFragments version before its Rewrite; journal
        // every content-preserving version it produced.
        self.publish_content_preserving(&ds, table, before).await.map(Some)
    }

    /// The tail of a content-preserving operation that moved `ds`'s table from `before` to
    /// `ds`'s version: journals every content-preserving version in between as an empty delta
    /// (a concurrent writer's version is left to it), then advances the registry.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when the latest version is not content-preserving;
    /// sidecar and registry errors.
    pub(crate) async fn publish_content_preserving(
        &self,
        ds: &Dataset,
        table: &str,
        before: u64,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let version = ds.version().version;
        self.journal_content_preserving(ds, table, before, version).await?;
        registry::advance(&self.store, table, version).await?;
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows: 0,
            references_added: 0,
            references_removed: 0,
            rebased: rebased(ds, version).await,
        })
    }

    /// Removes versions older than `older_than` (Lance version retention). Never the latest or
    /// tagged versions; Lance deletes the data files only those versions used. The journal
    /// (`_lake/`) is not Lance's and stays. When versions went, writes the reference checkpoint
    /// at the new oldest retained version ([`LanceEngine::write_reference_checkpoint`]).
    ///
    /// # Errors
    /// Lance errors.
    pub async fn cleanup(
        &self,
        table: &str,
        older_than: std::time::Duration,
    ) -> Result<CleanupOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        // Lance removes the transactions of the versions it cleans up, and with them the proof
        // that a version without a sidecar is content-preserving: write those entries first.
        crate::foreign::materialize_implied(self.store(), &ds, table).await?;
        // Lance computes `now - older_than` unchecked (a panic past chrono's range): refuse a
        // duration that reaches before the earliest representable time here.
        let older = chrono::Duration::from_std(older_than)
            .ok()
            .filter(|d| chrono::Utc::now().checked_sub_signed(*d).is_some())
            .ok_or_else(|| {
                LanceEngineError::InvalidInput(format!(
                    "--older-than {}s reaches before the earliest time this build can represent; use a shorter duration",
                    older_than.as_secs()
                ))
            })?;
        let stats = ds
            .cleanup_old_versions(older, Some(false), Some(false))
            .await
            .map_err(|source| LanceEngineError::Lance { table: table.into(), action: "cleanup", source })?;
        // Versions went: the replay's base may have moved, and the reference checkpoint with it
        // (an optimisation: a failure is logged, never fatal; GC never writes it).
        if stats.old_versions > 0 {
            if let Err(e) = self.write_reference_checkpoint(table).await {
                tracing::warn!(table, "could not write the reference checkpoint: {e}");
            }
        }
        Ok(CleanupOutcome { old_versions: stats.old_versions, bytes_removed: stats.bytes_removed })
    }

    /// Every version of `table` that still exists, with tags and whether it is journaled.
    ///
    /// # Errors
    /// Lance and storage errors.
    pub async fn versions(&self, table: &str) -> Result<Vec<VersionInfo>, LanceEngineError> {
        let ds = self.open(table).await?;
        let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "list versions", source };
        let versions = ds.versions().await.map_err(lance_err)?;
        let tags = ds.tags().list().await.map_err(lance_err)?;
        let (sidecars, _) = sidecar::read_all(&self.store, table).await?;
        let mut by_version: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (name, contents) in tags {
            by_version.entry(contents.version).or_default().push(name);
        }
        Ok(versions
            .into_iter()
            .map(|v| {
                let mut tags = by_version.remove(&v.version).unwrap_or_default();
                tags.sort();
                VersionInfo {
                    version: v.version,
                    timestamp: fmt_time(v.timestamp),
                    tags,
                    journaled: matches!(sidecars.get(&v.version), Some(Ok(_))),
                }
            })
            .collect())
    }

    /// Counts the references of `table` at `version` by scanning (the full-scan baseline).
    ///
    /// # Errors
    /// Lance errors.
    pub async fn scan_version(&self, table: &str, version: u64) -> Result<ReferenceCounts, LanceEngineError> {
        let ds = self.open(table).await?;
        let ds = ds.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "checkout",
            source,
        })?;
        count_references(&ds, table, self.store.root(), None).await
    }

    pub(crate) async fn lineage_and_sidecars(&self, table: &str) -> Result<(TableLineage, Sidecars), LanceEngineError> {
        self.lineage_and_sidecars_with(table, true).await
    }

    /// The lineage of `table` and its decoded sidecars. With `use_checkpoint`, a valid reference
    /// checkpoint at version C stands in for C's sidecar as a snapshot, and sidecars before C are
    /// not read (see [`crate::refs_checkpoint`]).
    pub(crate) async fn lineage_and_sidecars_with(
        &self,
        table: &str,
        use_checkpoint: bool,
    ) -> Result<(TableLineage, Sidecars), LanceEngineError> {
        let mut sidecars = Sidecars::new();
        let lineage = self
            .read_lineage(table, use_checkpoint, |version, entry| {
                sidecars.insert(version, entry);
                Ok(())
            })
            .await?;
        Ok((lineage, sidecars))
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
                problems.push(LineageProblem::UnregisteredDataset { path: d.clone() });
            }
        }
        let tables = names.iter().map(|n| TableLocation { name: n.clone(), uri: self.dataset_uri(n) }).collect();
        Ok(TableSet { tables, problems })
    }

    async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError> {
        let snapshot = self.lineage_and_journal(&location.name).await?;
        self.count_spilled_runs(snapshot.journal.spilled_runs());
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
        sidecar::visit_listed(self.store(), table, &listing, range, |v, entry| {
            entries.insert(v, entry);
            Ok(())
        })
        .await?;
        // A lineage new since the plan (`after` 0) whose journal starts with a snapshot above
        // version 1 (a branch starts at its source's version) is read from that snapshot.
        let after = match entries.iter().next() {
            Some((first, Ok(entry))) if after == 0 && *first > 1 && entry.kind == DeltaKind::Snapshot => first - 1,
            _ => after,
        };
        added_between(table, after, upto, &entries)
    }

    async fn unreferenced_journal_files(
        &self,
        location: &TableLocation,
        cutoff_ms: i64,
    ) -> Result<Vec<UnreferencedFile>, EngineError> {
        Ok(self.journal_garbage(&location.name, cutoff_ms).await?)
    }
}
