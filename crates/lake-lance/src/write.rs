//! Streamed writes: an append, an overwrite, and the create of a table's first version.
//!
//! The batches stream through a [`JournalingReader`], which validates their reference columns,
//! keeps the oldest managed key and writes every reference to the write's reference log as
//! Lance consumes them; Lance writes the data files without committing
//! (`InsertBuilder::execute_uncommitted_stream`). The write then goes through the write
//! protocol (`crate::commit`): its intent names its log, the guard checks the oldest key, and
//! the journal entry is a head naming the log (a delta for an append, a snapshot for an
//! overwrite or a create).

use crate::commit::change::{Adds, Change, Journal};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::journaling::{discard_log, JournalingReader};
use crate::scan::writable_columns;
use crate::uncommitted::{data_file_keys, discard_refused_write};
use arrow_array::RecordBatchReader;
use lake_common::intent::IntentOperation;
use lake_common::{DeltaKind, LogRef, ReferenceColumns};
use lake_store::layout::{split_lineage, validate_table_name};
use lance::dataset::{InsertBuilder, WriteMode};

impl LanceEngine {
    /// Appends `batches` to `table` (creating it on first use) as one new version, journaling
    /// the references of every batch as Lance consumes it (a delta).
    ///
    /// # Errors
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value (nothing is
    /// committed); [`LanceEngineError::Guard`]; [`LanceEngineError::ConcurrentCreate`];
    /// [`LanceEngineError::NotCommitted`] when the commit failed and was proven never to land;
    /// [`LanceEngineError::CommitUncertain`] when it may still land (its intent keeps the
    /// objects; `lake refs recover` decides); Lance, sidecar and registry errors. A commit that
    /// landed although Lance reported a failure is journaled and returned as success.
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
        if !exists && split_lineage(table).1.is_some() {
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
        let schema = batches.schema();
        let (reader, worker) = JournalingReader::new(batches, self.store(), table)?;
        let (mode, operation, kind) = match (exists, overwrite) {
            (false, _) => (WriteMode::Create, IntentOperation::Create, DeltaKind::Snapshot),
            (true, false) => (WriteMode::Append, IntentOperation::Append, DeltaKind::Delta),
            (true, true) => (WriteMode::Overwrite, IntentOperation::Overwrite, DeltaKind::Snapshot),
        };
        let creating = matches!(mode, WriteMode::Create);
        let uri = self.dataset_uri(table);
        let params = self.write_params(mode);
        // The data files, without committing a version, while the journal worker writes the
        // reference log beside them.
        let source: Box<dyn RecordBatchReader + Send> = Box::new(reader);
        let written = InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted_stream(source).await;
        let data_files = written.as_ref().map(|tx| data_file_keys(table, tx)).unwrap_or_default();
        let log = match worker.finish().await {
            Ok(log) => log,
            Err(failure) => {
                discard_refused_write(self.store(), table, &data_files, creating).await;
                return Err(failure.into_error(table));
            }
        };
        // Lance's data phase refuses a create too once the dataset exists (another writer's).
        let transaction = match written {
            Ok(transaction) => transaction,
            Err(source) => {
                discard_log(self.store(), &log.key).await;
                return Err(match source {
                    lance::Error::DatasetAlreadyExists { .. } if creating => {
                        LanceEngineError::ConcurrentCreate { table: table.into() }
                    }
                    source => LanceEngineError::Lance { table: table.into(), action: operation.as_str(), source },
                });
            }
        };
        let read_version = transaction.read_version;
        let journal = Journal::Log { log: LogRef::of(log.write_id.clone(), &log.totals, false), kind, read_version };
        let adds = Adds::log(operation, read_version, &log);
        let change = Change::staged(table, operation.as_str(), transaction, None, journal);
        let change = match creating {
            true => change.adding(adds.with_schema(schema)).creating(data_files),
            false => change.adding(adds).staging(data_files),
        };
        let committed = self.commit(change).await?;
        tracing::debug!(
            table,
            version = committed.version,
            rows = log.rows,
            references = log.totals.references,
            log_bytes = log.totals.bytes,
            "{} committed and journaled",
            operation.as_str()
        );
        Ok(committed.outcome(table, log.rows))
    }
}
