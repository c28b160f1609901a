//! Upsert (Lance's merge insert) through the engine: rows of a source stream replace the rows of
//! the table with the same key, and rows with a new key are inserted, as one version.
//!
//! The source streams through a [`GuardedReader`] that validates its reference columns and keeps
//! the oldest managed key; Lance writes the new fragments without committing
//! (`MergeInsertJob::execute_uncommitted`); the publication guard checks that key; the commit
//! follows within the guard's margin. The journal entry is computed from the two manifests
//! (`crate::version_diff`): removed = the replaced rows' references, added = the written rows',
//! exact whatever Lance did with duplicate keys or a rebase onto a concurrent commit.

use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::journaling::OldestKey;
use crate::scan::writable_columns;
use crate::version_diff::committed_entry;
use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::{ArrowError, SchemaRef};
use chrono::Utc;
use lake_common::{LakeRootUri, LocationError, ReferenceColumns};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::guard::PublicationGuard;
use lance::dataset::{CommitBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A source stream that validates the references of every batch as it passes and keeps the
/// oldest managed key (shared with the caller). With `guard_at_end`, the stream checks the
/// publication guard on that key when the source ends and fails (Lance then aborts, nothing
/// committed) when it is too old: for Lance operations that commit as soon as they have read
/// their source (`Dataset::merge`).
pub(crate) struct GuardedReader {
    inner: Box<dyn RecordBatchReader + Send>,
    columns: ReferenceColumns,
    root: LakeRootUri,
    oldest: Arc<Mutex<OldestKey>>,
    /// The reference that failed the stream, when one did (shared: Lance reports only its echo).
    refusal: Arc<Mutex<Option<LocationError>>>,
    guard_at_end: Option<PublicationGuard>,
}

impl GuardedReader {
    /// Wraps `inner`, whose schema's reference columns are validated now; its rows are new
    /// references (`ReferenceColumns::for_new_references`: one inside the lake root must be a
    /// managed key).
    ///
    /// # Errors
    /// [`LanceEngineError::Location`] for an invalid DataLocation column.
    pub(crate) fn new(
        table: &str,
        inner: Box<dyn RecordBatchReader + Send>,
        root: &LakeRootUri,
        guard_at_end: Option<PublicationGuard>,
    ) -> Result<Self, LanceEngineError> {
        let columns = ReferenceColumns::from_schema(&inner.schema())
            .map_err(|source| LanceEngineError::Location { table: table.into(), source })?
            .for_new_references();
        Ok(Self { inner, columns, root: root.clone(), oldest: Arc::default(), refusal: Arc::default(), guard_at_end })
    }

    /// The oldest managed identity seen so far (shared: read it after the source is consumed).
    pub(crate) fn oldest(&self) -> Arc<Mutex<OldestKey>> {
        self.oldest.clone()
    }

    /// Where the reference that failed the stream is kept (shared: read it when Lance fails).
    pub(crate) fn refusal(&self) -> Arc<Mutex<Option<LocationError>>> {
        self.refusal.clone()
    }
}

/// The write's error when Lance failed on `source` (`lance_error`): the reference the reader
/// refused, as [`LanceEngineError::Location`] (nothing was committed), when it refused one.
pub(crate) fn refused_or(
    table: &str,
    refusal: &Mutex<Option<LocationError>>,
    lance_error: LanceEngineError,
) -> LanceEngineError {
    match refusal.lock().ok().and_then(|mut r| r.take()) {
        Some(source) => LanceEngineError::Location { table: table.into(), source },
        None => lance_error,
    }
}

impl Iterator for GuardedReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let Ok(mut oldest) = self.oldest.lock() else {
            return Some(Err(ArrowError::ExternalError("the guard's state is poisoned".into())));
        };
        let batch = match self.inner.next() {
            Some(Ok(batch)) => batch,
            Some(Err(e)) => return Some(Err(e)),
            None => {
                let guard = self.guard_at_end.take()?;
                return guard
                    .check(oldest.identity.iter(), Utc::now())
                    .err()
                    .map(|e| Err(ArrowError::ExternalError(Box::new(e))));
            }
        };
        if let Err(e) = self.columns.visit_borrowed(&batch, &self.root, |uri, sha, size| oldest.offer(uri, sha, size)) {
            if let Ok(mut refusal) = self.refusal.lock() {
                *refusal = Some(e.clone());
            }
            return Some(Err(ArrowError::ExternalError(Box::new(e))));
        }
        Some(Ok(batch))
    }
}

impl RecordBatchReader for GuardedReader {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}

impl LanceEngine {
    /// Upserts `batches` into `table` keyed on the columns `on`: a source row whose key matches
    /// a row of the table replaces it (its old references are removed), any other source row is
    /// inserted. Creates the table (an append) when it does not exist. One new version, journaled
    /// as a delta (see the module documentation).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] without key
    /// columns; [`LanceEngineError::UnreadableTable`]; [`LanceEngineError::Location`] for an
    /// invalid DataLocation column or value (a reference inside the lake root must be a managed
    /// key); [`LanceEngineError::Guard`] when a referenced managed object is too old to publish;
    /// Lance errors (a key column missing from the source or the table, a schema that does not
    /// match, a conflicting concurrent write). After it: [`LanceEngineError::Unjournaled`],
    /// sidecar and registry errors, each naming the committed version.
    pub async fn upsert(
        &self,
        table: &str,
        on: &[String],
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<CommitOutcome, LanceEngineError> {
        if on.is_empty() {
            return Err(LanceEngineError::InvalidInput(format!(
                "an upsert into `{table}` needs at least one key column (`on`)"
            )));
        }
        if !self.table_exists(table).await? {
            return self.append(table, batches).await;
        }
        let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
        let ds = Arc::new(self.open(table).await?);
        writable_columns(&ds, table)?;
        let lance_err =
            |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
        let reader = GuardedReader::new(table, batches, self.store().root(), None)?;
        let (oldest, refusal) = (reader.oldest(), reader.refusal());
        let source: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let job = MergeInsertBuilder::try_new(ds.clone(), on.to_vec())
            .map_err(lance_err("upsert"))?
            .when_matched(WhenMatched::UpdateAll)
            .when_not_matched(WhenNotMatched::InsertAll)
            .conflict_retries(0)
            .try_build()
            .map_err(lance_err("upsert"))?;
        let started = std::time::Instant::now();
        let uncommitted = job
            .execute_uncommitted(source)
            .await
            .map_err(|source| refused_or(table, &refusal, lance_err("upsert")(source)))?;
        let data_written = started.elapsed();
        let oldest = oldest.lock().map(|o| o.identity.clone()).unwrap_or(None);
        // The guard, right before the commit; the commit must land within the margin.
        guard
            .check(oldest.iter(), Utc::now())
            .map_err(|source| LanceEngineError::Guard { table: table.into(), source })?;
        let committed = CommitBuilder::new(ds)
            .with_skip_auto_cleanup(true)
            .with_timeout(Some(guard.margin().max(Duration::from_millis(1))))
            .execute(uncommitted.transaction)
            .await
            .map_err(lance_err("commit"))?;
        let version = committed.version().version;
        let committed_at = started.elapsed();
        let diff = committed_entry(&committed, table, self.store().root()).await?;
        let diffed_at = started.elapsed();
        let (references_added, references_removed) = (diff.added, diff.removed);
        self.publish(diff.entry, &committed).await?;
        tracing::debug!(
            table,
            version,
            references_added,
            references_removed,
            data_files_s = data_written.as_secs_f64(),
            commit_s = (committed_at - data_written).as_secs_f64(),
            diff_s = (diffed_at - committed_at).as_secs_f64(),
            publish_s = (started.elapsed() - diffed_at).as_secs_f64(),
            "upsert committed and journaled"
        );
        let stats = uncommitted.stats;
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows: stats.num_inserted_rows + stats.num_updated_rows,
            references_added,
            references_removed,
            rebased: rebased(&committed, version).await,
        })
    }
}
