//! Upsert (Lance's merge insert) through the engine: rows of a source stream replace the rows of
//! the table with the same key, and rows with a new key are inserted, as one version.
//!
//! The source streams through a [`JournalingReader`] that validates its reference columns, keeps
//! the oldest managed key and writes every reference to a reference log; Lance writes the new
//! fragments without committing (`MergeInsertJob::execute_uncommitted`); the write protocol
//! (`crate::commit`) commits them: the write intent names that log (GC keeps its objects until
//! the version is journaled or proven never to land), the publication guard checks the oldest
//! key. The journal entry comes from the two manifests (`crate::version_diff`):
//! - when the manifests show that every source row was written once
//!   ([`crate::version_diff::logged_entry`]) and the log is too large to inline, the entry is a
//!   head naming that log as its additions and a row log of the replaced rows' references
//!   (read by row address from the previous version) as its removals: the write's references
//!   are not read back or written twice;
//! - otherwise removed = the replaced rows' references, added = the new fragments' rows',
//!   computed whole ([`crate::version_diff::committed_entry`]), exact whatever Lance did with
//!   duplicate keys or a rebase onto a concurrent commit, and the log, which then only served
//!   the intent, is removed with it.

use crate::commit::change::{Adds, Change, Journal};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::journaling::{discard_log, JournalingReader};
use crate::scan::writable_columns;
use arrow_array::RecordBatchReader;
use lake_common::intent::IntentOperation;
use lance::dataset::write::merge_insert::SourceDedupeBehavior;
use lance::dataset::{MergeInsertBuilder, WhenMatched, WhenNotMatched};
use std::sync::Arc;

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
    /// [`LanceEngineError::NotCommitted`] / [`LanceEngineError::CommitUncertain`] when the
    /// commit failed after its manifest write was sent (see [`LanceEngine::append`]).
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
        let ds = Arc::new(self.open(table).await?);
        writable_columns(&ds, table)?;
        let lance_err =
            |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
        let (reader, worker) = JournalingReader::with_key_columns(batches, self.store(), table, on)?;
        let source: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let job = MergeInsertBuilder::try_new(ds.clone(), on.to_vec())
            .map_err(lance_err("upsert"))?
            .when_matched(WhenMatched::UpdateAll)
            .when_not_matched(WhenNotMatched::InsertAll)
            // Two source rows matching one table row are refused (Lance's default, pinned: the
            // journal's shortcut relies on no source row being skipped, `logged_entry`).
            .source_dedupe_behavior(SourceDedupeBehavior::Fail)
            .conflict_retries(0)
            .try_build()
            .map_err(lance_err("upsert"))?;
        let started = std::time::Instant::now();
        let uncommitted = job.execute_uncommitted(source).await;
        let log = worker.finish().await.map_err(|failure| failure.into_error(table))?;
        let uncommitted = match uncommitted {
            Ok(uncommitted) => uncommitted,
            Err(source) => {
                discard_log(self.store(), &log.key).await;
                return Err(lance_err("upsert")(source));
            }
        };
        let data_written = started.elapsed();
        let rows = uncommitted.stats.num_inserted_rows + uncommitted.stats.num_updated_rows;
        let adds = Adds::log(IntentOperation::Upsert, uncommitted.transaction.read_version, &log);
        let journal = Journal::Upsert { log, on: on.to_vec() };
        let change = Change::staged(table, "upsert", uncommitted.transaction, Some(ds), journal).adding(adds);
        let committed = self.commit(change).await?;
        tracing::debug!(
            table,
            version = committed.version,
            references_added = committed.added,
            references_removed = committed.removed,
            data_files_s = data_written.as_secs_f64(),
            total_s = started.elapsed().as_secs_f64(),
            "upsert committed and journaled"
        );
        Ok(committed.outcome(table, rows))
    }
}
