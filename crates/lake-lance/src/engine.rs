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

use crate::create_commit::CheckedCommitHandler;
use crate::error::LanceEngineError;
use crate::intent_commit::{CommitGate, Committed, IntentFacts, IntentRefs, IntentWrite};
use crate::journaling::{discard_log, JournalLog, JournalingReader};
use crate::scan::{count_references, writable_columns};
use crate::sidecar;
use crate::uncommitted::{data_file_keys, discard_refused_write};
use arrow_array::RecordBatchReader;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lake_common::{
    DeltaKind, LogHead, LogRef, ObjectIdentity, ObjectReferenceDelta, ReferenceColumns, ReferenceCounts,
};
use lake_engine::journal::{added_between, Sidecars};
use lake_engine::{Engine, EngineError, LineageStamp, TableLocation, TableSet, TableSnapshot, UnreferencedFile};
use lake_store::descriptor::LakeDescriptor;
use lake_store::failpoint;
use lake_store::guard::{PublicationGuard, SystemClock, WriterClock};
use lake_store::layout::{dataset_key, validate_table_name, DATASET_SUFFIX, TABLES_PREFIX};
use lake_store::registry;
use lake_store::store::LakeStore;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::optimize::{compact_files, CompactionOptions};
use lance::dataset::{CommitBuilder, DeleteBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::io::{ObjectStoreParams, StorageOptionsAccessor, WrappingObjectStore};
use lance::Dataset;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Times a delete evaluates its predicate again after a conflict with a concurrent delete of the
/// same fragments (Lance's `DeleteBuilder` default: 10).
const DELETE_CONFLICT_RETRIES: u32 = 10;

/// How much older than its manifest's store time a version may look to Lance's cleanup (which
/// reads the timestamp its writer's clock put in the manifest) when cleanup must keep it: a
/// bound on clock differences between hosts, as the publication guard's margin is.
const CLEANUP_CLOCK_SLACK: Duration = Duration::from_secs(300);

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
    /// The commit deadline of every write with an intent, when set (else per operation:
    /// `crate::intent_commit`).
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

    /// The same engine giving every write with an intent the commit deadline `deadline` (the
    /// span after which it publishes no manifest; default: the guard's margin between 30 s and
    /// 5 min for two-phase commits, 30 min for operations that write inside Lance's call). A
    /// fence waits at most this long too. Safety does not depend on it
    /// (`crate::intent_commit`).
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
        self.commit_deadline.unwrap_or(crate::intent_commit::MIN_COMMIT_DEADLINE)
    }

    /// Now by the writer's clock (what the publication guard judges age against).
    pub(crate) fn writer_now(&self) -> DateTime<Utc> {
        self.writer_clock.now()
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
    fn store_params(&self) -> Option<ObjectStoreParams> {
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
    fn dataset_builder(&self, table: &str) -> DatasetBuilder {
        let builder = DatasetBuilder::from_uri(self.dataset_uri(table));
        match self.store_params() {
            Some(params) => builder.with_store_params(params),
            None => builder,
        }
    }

    /// Opens `table` (at `version`, else its latest) with every commit through `gate`: what an
    /// operation that commits inside Lance's own call writes through.
    ///
    /// # Errors
    /// As [`LanceEngine::open`].
    pub(crate) async fn open_gated(
        &self,
        table: &str,
        version: Option<u64>,
        gate: &Arc<CommitGate>,
    ) -> Result<Dataset, LanceEngineError> {
        let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "open", source };
        let handler =
            CheckedCommitHandler::for_uri(&self.dataset_uri(table), &self.store_params(), false, Some(gate.clone()))
                .await
                .map_err(lance_err)?;
        let mut builder = self.dataset_builder(table).with_commit_handler(handler);
        if let Some(v) = version {
            builder = builder.with_version(v);
        }
        builder.load().await.map_err(lance_err)
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

    /// Journals version `delta.version`, bound to `committed` (the dataset at that version, as
    /// the commit returned it: [`crate::binding::binding_of`]), and advances the registry: the
    /// tail of every commit.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when `committed` is at another version; storage,
    /// Lance, sidecar and registry errors.
    pub(crate) async fn publish(
        &self,
        delta: ObjectReferenceDelta,
        committed: &Dataset,
    ) -> Result<(), LanceEngineError> {
        check_binds_to(&delta.table, delta.version, committed)?;
        let binding = crate::binding::binding_of(&self.store, &delta.table, committed).await?;
        let delta = delta.bound(binding);
        sidecar::write(&self.store, &delta).await?;
        self.advance(&delta.table, delta.version).await
    }

    /// Publishes `head` (unbound) as the journal entry of `committed`'s version: binds it to
    /// that version, writes it create-only, then advances the registry.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when `head` is another version's; binding, sidecar and
    /// registry errors.
    pub(crate) async fn publish_head(&self, head: LogHead, committed: &Dataset) -> Result<(), LanceEngineError> {
        check_binds_to(&head.table, head.version, committed)?;
        let binding = crate::binding::binding_of(&self.store, &head.table, committed).await?;
        let head = head.bound(binding);
        sidecar::write_head(&self.store, &head).await?;
        self.advance(&head.table, head.version).await
    }

    /// Journals `ds`'s version, a streamed append that Lance rebased onto another schema
    /// ([`crate::version_diff::schema_moved`]): the entry is computed from the two manifests, not
    /// taken from the write's log, which no entry names then and is deleted. Ends the intent.
    ///
    /// # Errors
    /// [`LanceEngineError::Unjournaled`] naming the version; sidecar and registry errors (the
    /// intent then stays, and its resolver journals the version the same way).
    pub(crate) async fn publish_rebased(
        &self,
        table: &str,
        ds: &Dataset,
        intent: &IntentWrite,
        log: &JournalLog,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let version = ds.version().version;
        tracing::warn!(
            table,
            version,
            "the append was rebased onto a schema changed by a concurrent commit: journaling it from the manifests"
        );
        let diff = crate::version_diff::committed_entry(ds, table, self.store.root()).await?;
        self.publish(diff.entry, ds).await?;
        self.end_intent(intent).await;
        discard_log(&self.store, &log.key).await;
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows: log.rows,
            references_added: diff.added,
            references_removed: diff.removed,
            rebased: true,
        })
    }

    /// The tail of a commit once its sidecar is written: advances the registry.
    pub(crate) async fn advance(&self, table: &str, version: u64) -> Result<(), LanceEngineError> {
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
                Ok(()) => {
                    let binding = crate::binding::binding_at(&self.store, table, ds, v).await?;
                    sidecar::write(&self.store, &ObjectReferenceDelta::empty(table, v).bound(binding)).await?
                }
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
    /// The write records a write intent before its guard check and commits through its gate
    /// (`crate::intent_commit`): a commit that fails after its manifest write was sent is
    /// resolved before the call returns (it may wait until the commit's deadline passes).
    ///
    /// # Errors
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value (nothing is
    /// committed); [`LanceEngineError::Guard`]; [`LanceEngineError::NotCommitted`] when the
    /// commit failed and was proven never to land; [`LanceEngineError::CommitUncertain`] when it
    /// may still land (its intent keeps the objects; `lake refs recover` decides); Lance,
    /// sidecar and registry errors. A commit that landed although Lance reported a failure is
    /// journaled and returned as success.
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
        if !exists && lake_store::layout::split_lineage(table).1.is_some() {
            // A branch is made by `create_branch` (its first version is the source's), never by
            // a write; nothing is written for it here.
            return Err(LanceEngineError::NoSuchTable { table: table.into(), uri: self.dataset_uri(table) });
        }
        if exists && !overwrite {
            // The version an append produces keeps the table's schema: it must be one the
            // engine can journal (an overwrite replaces it, checked from its batches). The
            // batches' own columns are judged first.
            ReferenceColumns::from_schema(&batches.schema())
                .map_err(|source| LanceEngineError::Location { table: table.into(), source })?;
            writable_columns(&self.open(table).await?, table)?;
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
        // The data files this write created: removed when it is refused before its commit.
        let data_files = written.as_ref().map(|tx| data_file_keys(table, tx)).unwrap_or_default();
        let log = match worker.finish().await {
            Ok(log) => log,
            Err(failure) => {
                discard_refused_write(&self.store, table, &data_files, creating).await;
                return Err(failure.into_error(table));
            }
        };
        // Lance's data phase refuses a create too once the dataset exists (another writer's).
        let transaction = match written {
            Ok(transaction) => transaction,
            Err(source) => {
                discard_log(&self.store, &log.key).await;
                return Err(match source {
                    lance::Error::DatasetAlreadyExists { .. } if creating => {
                        LanceEngineError::ConcurrentCreate { table: table.into() }
                    }
                    source => LanceEngineError::Lance { table: table.into(), action, source },
                });
            }
        };
        if exists {
            self.resolve_before_commit(table).await;
        }
        // The intent before the guard: from here until it is resolved, GC keeps the log's
        // references (`crate::intent_commit`).
        let operation = match (creating, overwrite) {
            (true, _) => lake_common::intent::IntentOperation::Create,
            (false, true) => lake_common::intent::IntentOperation::Overwrite,
            (false, false) => lake_common::intent::IntentOperation::Append,
        };
        let facts = IntentFacts {
            operation,
            write_id: log.write_id.clone(),
            transaction_uuid: Some(transaction.uuid.clone()),
            read_version: transaction.read_version,
            restored_version: None,
        };
        let intent = match self.begin_intent(table, facts, IntentRefs::Log(&log), &guard).await {
            Ok(intent) => intent,
            Err(e) => {
                discard_log(&self.store, &log.key).await;
                discard_refused_write(&self.store, table, &data_files, creating).await;
                return Err(e);
            }
        };
        let read_version = transaction.read_version;
        let committed =
            self.commit_streamed(table, transaction, &params, &guard, &log, creating, action, &intent).await;
        // Refused before any manifest write (the guard, another writer's create): nothing of
        // this write can land, so nothing of it stays (another writer's create keeps its folders).
        let refused =
            matches!(&committed, Err(LanceEngineError::Guard { .. } | LanceEngineError::ConcurrentCreate { .. }))
                && !intent.gate.uncertain();
        let ds = match self.after_commit(&intent, committed, true).await {
            Ok(Committed::Now(ds)) => ds,
            Ok(Committed::Late(version)) => return self.landed_outcome(table, version, log.rows).await,
            Err(e) => {
                if refused {
                    let first = creating && matches!(e, LanceEngineError::Guard { .. });
                    discard_refused_write(&self.store, table, &data_files, first).await;
                }
                return Err(e);
            }
        };
        failpoint::hit("append.after_lance_commit")?;
        let committed = started.elapsed();
        let version = ds.version().version;
        // A create is an `Overwrite` in Lance: the version holds exactly these rows, also if it
        // landed on a dataset another writer created a moment before.
        let kind = if overwrite || creating { DeltaKind::Snapshot } else { DeltaKind::Delta };
        if kind == DeltaKind::Delta && crate::version_diff::schema_moved(&ds, read_version).await {
            return self.publish_rebased(table, &ds, &intent, &log).await;
        }
        let head = LogHead::new(table, version, kind, LogRef::of(log.write_id.clone(), &log.totals, false))
            .bound(crate::binding::binding_of(&self.store, table, &ds).await?);
        sidecar::write_head(&self.store, &head).await?;
        self.advance(table, version).await?;
        self.end_intent(&intent).await;
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

    /// Before a write commits on `table`: resolves the intents past their deadline (writers that
    /// may be gone) and the landed commits of streamed writes (a writer killed right after its
    /// commit), without fencing; then journals the versions after the registry pin that the
    /// engine provably committed and no intent names (`crate::recovery`). The tail of a commit
    /// gets its journal entry before another version builds on it. A failure is logged: it never
    /// stops this write.
    pub(crate) async fn resolve_before_commit(&self, table: &str) {
        match self.resolve_due_intents(table, crate::resolve::Fence::No, true).await {
            Ok(resolved) => {
                for r in resolved {
                    tracing::info!(intent = %r.key, resolution = ?r.resolution, "resolved a write intent");
                }
            }
            Err(e) => tracing::warn!(table, "could not resolve the write intents: {e}"),
        }
        if let Err(e) = self.recover_unjournaled(table, crate::recovery::Versions::AfterPin).await {
            tracing::warn!(table, "could not look for versions without a journal entry: {e}");
        }
    }

    /// The outcome of a write that landed as `version` after its commit was reported as
    /// failed, from the journal entry the resolver wrote.
    pub(crate) async fn landed_outcome(
        &self,
        table: &str,
        version: u64,
        rows: u64,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let (added, removed) = match sidecar::read(&self.store, table, version).await? {
            Some(Ok(entry)) => (entry.added.iter().map(|r| r.count).sum(), entry.removed.iter().map(|r| r.count).sum()),
            _ => (0, 0),
        };
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows,
            references_added: added,
            references_removed: removed,
            rebased: false,
        })
    }

    /// Phase 2 of a streamed write: the publication guard on the oldest new reference, then the
    /// Lance commit through the intent's gate, with Lance's timeout set to what is left of the
    /// deadline.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn commit_streamed(
        &self,
        table: &str,
        mut transaction: lance::dataset::transaction::Transaction,
        params: &WriteParams,
        guard: &PublicationGuard,
        log: &JournalLog,
        creating: bool,
        action: &'static str,
        intent: &IntentWrite,
    ) -> Result<Dataset, LanceEngineError> {
        // The guard, right before the commit (the intent is written: its objects are kept).
        guard
            .check(log.oldest.iter(), self.writer_now())
            .map_err(|source| LanceEngineError::Guard { table: table.into(), source })?;
        // Lance commits a create (an `Overwrite` transaction) on top of a dataset that appeared
        // since the write began, replacing its rows: the table another writer created while
        // this one wrote its data files is refused here instead (the retry appends), and one
        // created between this check and Lance's own is refused by the commit handler, which
        // publishes a create only as version 1 (`create_commit`).
        if creating && self.table_exists(table).await? {
            return Err(LanceEngineError::ConcurrentCreate { table: table.into() });
        }
        intent.mark(&self.store.root().to_string(), &mut transaction);
        let uri = self.dataset_uri(table);
        let lance_error = |source: lance::Error| LanceEngineError::Lance { table: table.into(), action, source };
        let handler =
            CheckedCommitHandler::for_uri(uri.as_str(), &params.store_params, creating, Some(intent.gate.clone()))
                .await
                .map_err(lance_error)?;
        let mut commit = CommitBuilder::new(uri.as_str())
            .with_skip_auto_cleanup(true)
            .with_timeout(Some(intent.gate.remaining().max(Duration::from_millis(1))))
            .with_commit_handler(handler);
        if let Some(store_params) = params.store_params.clone() {
            commit = commit.with_store_params(store_params);
        }
        if creating {
            // One attempt: a retry would only meet the other writer's version 1 again.
            commit = commit.with_max_retries(1);
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

    /// Deletes the rows of `table` matching `predicate` (one Lance SQL expression,
    /// [`crate::sql::check_predicate`]), journaling the references of the deleted rows with
    /// their counts, computed from the fragments the delete changed (`crate::version_diff`).
    /// A delete that matches no row still commits a version, as Lance's `Dataset::delete` does
    /// (an empty delete, journaled as an empty delta).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] for a predicate
    /// that is not one SQL expression, [`LanceEngineError::UnreadableTable`] for a table whose
    /// schema the engine cannot journal, Lance errors (an invalid predicate). After it:
    /// [`LanceEngineError::Unjournaled`], sidecar and registry errors, each naming the version.
    pub async fn delete(&self, table: &str, predicate: &str) -> Result<Option<CommitOutcome>, LanceEngineError> {
        crate::sql::check_predicate(predicate)?;
        self.resolve_before_commit(table).await;
        let lance_error = |source| LanceEngineError::Lance { table: table.into(), action: "delete", source };
        let mut ds = Arc::new(self.open(table).await?);
        writable_columns(&ds, table)?;
        // Lance's `Dataset::delete`, staged so that the commit carries the engine's marker
        // (`crate::marker`): a conflict with a concurrent delete of the same fragments evaluates
        // the predicate again on the newer version, as Lance's own retry does.
        let mut conflicts = 0;
        let (committed, deleted) = loop {
            let staged = DeleteBuilder::new(ds.clone(), predicate).execute_uncommitted().await.map_err(lance_error)?;
            let mut transaction = staged.transaction;
            crate::marker::CommitMarker::new(&self.store.root().to_string(), "delete", &ulid::Ulid::new().to_string())
                .set_on(&mut transaction);
            let mut commit = CommitBuilder::new(ds.clone()).with_skip_auto_cleanup(true);
            if let Some(rows) = staged.affected_rows {
                commit = commit.with_affected_rows(rows);
            }
            match commit.execute(transaction).await {
                Ok(committed) => break (committed, staged.num_deleted_rows),
                Err(lance::Error::RetryableCommitConflict { .. }) if conflicts < DELETE_CONFLICT_RETRIES => {
                    conflicts += 1;
                    ds = Arc::new(self.open(table).await?);
                }
                Err(source) => return Err(lance_error(source)),
            }
        };
        let version = committed.version().version;
        failpoint::hit("delete.after_lance_commit")?;
        // From the two manifests, not from a count taken before: a predicate need not evaluate
        // the same way twice (`random()`), and Lance may rebase the delete.
        let diff = crate::version_diff::committed_entry(&committed, table, self.store.root()).await?;
        let references_removed = diff.removed;
        self.publish(diff.entry, &committed).await?;
        Ok(Some(CommitOutcome {
            table: table.into(),
            version,
            rows: deleted,
            references_added: 0,
            references_removed,
            rebased: rebased(&committed, version).await,
        }))
    }

    /// Compacts `table`'s fragments (materialising deletions). Content-preserving: journals an
    /// empty delta. Returns `None` when there was nothing to compact.
    ///
    /// # Errors
    /// [`LanceEngineError::UnreadableTable`] (nothing committed); Lance, sidecar and registry
    /// errors.
    pub async fn compact(&self, table: &str) -> Result<Option<CommitOutcome>, LanceEngineError> {
        let mut ds = self.open(table).await?;
        writable_columns(&ds, table)?;
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
    /// (`_lake/`) is not Lance's and stays. Stale restore tags of the lineage (restores killed
    /// after tagging their source) are removed first, judged by the store's clock (a probe,
    /// [`lake_store::clock::ProbeClock`]; [`LanceEngine::remove_stale_restore_tags`]), so the
    /// versions they pinned can go. When
    /// versions went, writes the reference checkpoint at the new oldest retained version
    /// ([`LanceEngine::write_reference_checkpoint`]).
    ///
    /// A table with no version at all whose folder holds the files of a first write that never
    /// committed is cleaned up by [`LanceEngine::discard_uncommitted`] instead (its files older
    /// than `older_than`; `old_versions` is 0).
    ///
    /// # Errors
    /// Lance errors; as [`LanceEngine::discard_uncommitted`].
    pub async fn cleanup(
        &self,
        table: &str,
        older_than: std::time::Duration,
    ) -> Result<CleanupOutcome, LanceEngineError> {
        if self.is_uncommitted_dataset(table).await? {
            let discarded = self.discard_uncommitted(table, older_than).await?;
            return Ok(CleanupOutcome {
                old_versions: 0,
                bytes_removed: discarded.bytes_removed,
                stale_restore_tags: Vec::new(),
            });
        }
        let now = lake_store::clock::StoreClock::read(&lake_store::clock::ProbeClock, &self.store).await?;
        let stale_restore_tags = self.remove_stale_restore_tags(table, now.store_now).await?;
        let ds = self.open(table).await?;
        // Write intents past their deadline first: a commit that landed late is journaled while
        // its version (and the transaction that identifies it) still exists, and one that cannot
        // be resolved yet stops the cleanup (it could remove the version that decides it).
        let stuck: Vec<String> = self
            .resolve_due_intents(table, crate::resolve::Fence::IfDue, false)
            .await?
            .into_iter()
            .filter_map(|r| match r.resolution {
                crate::resolve::Resolution::Pending { reason } => Some(format!("{} ({reason})", r.key)),
                _ => None,
            })
            .collect();
        if !stuck.is_empty() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` has write intents past their deadline that cannot be resolved yet: {}; cleaning up versions now could remove the one that shows whether such a commit landed, so nothing was cleaned up. Run `lake refs recover {} --table {table}`, then clean up again",
                stuck.join("; "),
                self.store.display_root()
            )));
        }
        // Intents still within their deadline: a write in flight, or one killed after its
        // commit whose version has no journal entry yet. The versions from the oldest one's read
        // version on stay, whatever `older_than` says, so the version that shows how it ended
        // (and its transaction) is there for its resolution.
        let older_than = self.keeping_pending_writes(table, older_than).await?;
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
        Ok(CleanupOutcome { old_versions: stats.old_versions, bytes_removed: stats.bytes_removed, stale_restore_tags })
    }

    /// `older_than`, lengthened so that Lance's cleanup keeps every version from the read version
    /// of the oldest write intent of `table` on (a version whose manifest the store wrote at
    /// time T is kept when `older_than` reaches before T less [`CLEANUP_CLOCK_SLACK`]: Lance
    /// judges a version's age by the timestamp its writer's clock put in the manifest). An
    /// intent that cannot be read keeps every version.
    ///
    /// # Errors
    /// Storage errors listing the intents or the manifests.
    async fn keeping_pending_writes(
        &self,
        table: &str,
        older_than: std::time::Duration,
    ) -> Result<std::time::Duration, LanceEngineError> {
        let (listed, _) = lake_store::intents::list(&self.store, Some(table)).await?;
        let Some(from) = listed.iter().map(|i| i.intent.as_ref().map_or(0, |w| w.read_version)).min() else {
            return Ok(older_than);
        };
        let oldest_kept = self.manifest_times(table).await?.range(from..).map(|(_, written)| *written).min();
        let Some(oldest_kept) = oldest_kept else { return Ok(older_than) };
        let keep = (Utc::now() - oldest_kept).to_std().unwrap_or_default().saturating_add(CLEANUP_CLOCK_SLACK);
        if keep > older_than {
            tracing::info!(
                table,
                from,
                "a write intent is pending: cleanup keeps the versions from its read version on"
            );
        }
        Ok(older_than.max(keep))
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
                problems.push(self.unregistered_problem(&d, name).await?);
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

/// Refuses to bind the journal entry of `version` of `table` to `committed`, another version.
fn check_binds_to(table: &str, version: u64, committed: &Dataset) -> Result<(), LanceEngineError> {
    if committed.version().version != version {
        return Err(LanceEngineError::InvalidInput(format!(
            "table `{table}`: the journal entry of version {version} cannot be bound to version {}",
            committed.version().version
        )));
    }
    Ok(())
}
