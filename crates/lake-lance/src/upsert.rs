//! Upsert (Lance's merge insert) through the engine: rows of a source stream replace the rows of
//! the table with the same key, and rows with a new key are inserted, as one version.
//!
//! The source streams through a [`JournalingReader`] that validates its reference columns, keeps
//! the oldest managed key and writes every reference to a reference log; Lance writes the new
//! fragments without committing (`MergeInsertJob::execute_uncommitted`); the write intent names
//! that log (`crate::intent_commit`: GC keeps its objects until the version is journaled or
//! proven never to land); the publication guard checks the oldest key; the commit goes through
//! the intent's gate. The journal entry comes from the two manifests (`crate::version_diff`):
//! - when the manifests show that every source row was written once
//!   ([`crate::version_diff::logged_entry`]) and the log is too large to inline, the entry is a
//!   head naming that log as its additions and a row log of the replaced rows' references
//!   (read by row address from the previous version) as its removals: the write's references
//!   are not read back or written twice;
//! - otherwise removed = the replaced rows' references, added = the new fragments' rows',
//!   computed whole ([`crate::version_diff::committed_entry`]), exact whatever Lance did with
//!   duplicate keys or a rebase onto a concurrent commit, and the log, which then only served
//!   the intent, is removed with it.

use crate::create_commit::CheckedCommitHandler;
use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::intent_commit::{Committed, IntentFacts, IntentRefs};
use crate::journaling::{discard_log, JournalingReader};
use crate::scan::writable_columns;
use crate::version_diff::{committed_entry, logged_entry};
use arrow_array::RecordBatchReader;
use lake_common::intent::IntentOperation;
use lake_store::descriptor::LakeDescriptor;
use lake_store::guard::PublicationGuard;
use lance::dataset::write::merge_insert::SourceDedupeBehavior;
use lance::dataset::{CommitBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched};
use std::sync::Arc;
use std::time::Duration;

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
        let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
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
        self.resolve_before_commit(table).await;
        let facts = IntentFacts {
            operation: IntentOperation::Upsert,
            write_id: log.write_id.clone(),
            transaction_uuid: Some(uncommitted.transaction.uuid.clone()),
            read_version: uncommitted.transaction.read_version,
            restored_version: None,
        };
        let mut intent = match self.begin_intent(table, facts, IntentRefs::Log(&log), &guard).await {
            Ok(intent) => intent,
            Err(e) => {
                discard_log(self.store(), &log.key).await;
                return Err(e);
            }
        };
        // The guard, right before the commit (the intent keeps the objects meanwhile).
        let mut transaction = uncommitted.transaction;
        intent.mark(&self.store().root().to_string(), &mut transaction);
        let committed = async {
            guard
                .check(log.oldest.iter(), self.writer_now())
                .map_err(|source| LanceEngineError::Guard { table: table.into(), source })?;
            let uri = self.dataset_uri(table);
            let handler = CheckedCommitHandler::for_uri(
                &uri,
                &self.write_params(lance::dataset::WriteMode::Append).store_params,
                false,
                Some(intent.gate.clone()),
            )
            .await
            .map_err(lance_err("commit"))?;
            CommitBuilder::new(ds)
                .with_skip_auto_cleanup(true)
                .with_timeout(Some(intent.gate.remaining().max(Duration::from_millis(1))))
                .with_commit_handler(handler)
                .execute(transaction)
                .await
                .map_err(lance_err("commit"))
        }
        .await;
        let rows = uncommitted.stats.num_inserted_rows + uncommitted.stats.num_updated_rows;
        let committed = match self.after_commit(&intent, committed, true).await? {
            Committed::Now(committed) => committed,
            Committed::Late(version) => return self.landed_outcome(table, version, rows).await,
        };
        let version = committed.version().version;
        let committed_at = started.elapsed();
        let logged = match log.totals.references > crate::sidecar::INLINE_MAX_IDENTITIES as u64 {
            true => logged_entry(&committed, table, self.store(), &log, on).await.unwrap_or_else(|e| {
                tracing::warn!(table, version, "computing the upsert's entry from the manifests instead: {e}");
                None
            }),
            false => None,
        };
        let (references_added, references_removed) = match logged {
            Some(entry) => {
                // The entry names the log: it is the journal's now, not the intent's.
                intent.keep_log();
                self.publish_head(entry.head, &committed).await?;
                (entry.added, entry.removed)
            }
            None => {
                let diff = committed_entry(&committed, table, self.store().root()).await?;
                self.publish(diff.entry, &committed).await?;
                (diff.added, diff.removed)
            }
        };
        let published_at = started.elapsed();
        // A log that served the intent only is removed with it.
        self.end_intent(&intent).await;
        tracing::debug!(
            table,
            version,
            references_added,
            references_removed,
            data_files_s = data_written.as_secs_f64(),
            commit_s = (committed_at - data_written).as_secs_f64(),
            publish_s = (published_at - committed_at).as_secs_f64(),
            "upsert committed and journaled"
        );
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows,
            references_added,
            references_removed,
            rebased: rebased(&committed, version).await,
        })
    }
}
