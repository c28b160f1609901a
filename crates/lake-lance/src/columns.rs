//! Schema evolution through the engine: add columns from an Arrow stream joined on a key, drop
//! columns, rename a column. Each commits one Lance version (`Merge` or `Project`), journaled
//! from the two manifests (`crate::version_diff`): when the set of reference columns changes
//! (a reference column added, dropped or renamed) the entry is a snapshot of the new version,
//! otherwise a delta of the rewritten fragments (nothing moves for a column that holds no
//! reference).
//!
//! Adding columns reads the whole source first (Lance's `Dataset::merge` holds it in memory for
//! its hash join anyway, and commits as soon as it has written the new column files), validating
//! its references and collecting the distinct ones; the write intent names them
//! (`crate::intent_commit`); the publication guard checks them; then the merge runs on the
//! version read, every commit through the intent's gate.

use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::intent_commit::{Committed, IntentFacts};
use crate::version_diff::diff_entry;
use arrow_array::{RecordBatchIterator, RecordBatchReader};
use lake_common::intent::IntentOperation;
use lake_common::{ObjectIdentity, ReferenceColumns};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::guard::PublicationGuard;
use lance::dataset::ColumnAlteration;
use lance::Dataset;
use std::collections::BTreeSet;

impl LanceEngine {
    /// Adds the columns of `batches` (every column but `on`) to `table`, joined on the key
    /// column `on` (present in both; a row of the table without a match gets nulls, so the new
    /// columns must be nullable). A DataLocation column among them becomes a reference column.
    /// One new version (see the module documentation).
    ///
    /// # Errors
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value;
    /// [`LanceEngineError::Guard`] when a referenced managed object is too old to publish; Lance
    /// errors (no such key column, a column that already exists); sidecar and registry errors;
    /// [`LanceEngineError::NotCommitted`] / [`LanceEngineError::CommitUncertain`] when the
    /// commit failed after its manifest write was sent (see [`LanceEngine::append`]).
    pub async fn add_columns(
        &self,
        table: &str,
        on: &str,
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
        let ds = self.open(table).await?;
        let before = ds.version().version;
        // The source is read on a blocking thread (a reader may block while it waits for its
        // rows, as an ingest's does), validated, and its distinct references collected.
        let root = self.store().root().clone();
        let name = table.to_string();
        let read = tokio::task::spawn_blocking(move || {
            let schema = batches.schema();
            let columns = ReferenceColumns::from_schema(&schema)
                .map_err(|source| LanceEngineError::Location { table: name.clone(), source })?;
            let mut collected = Vec::new();
            let mut references = BTreeSet::new();
            for batch in batches {
                let batch = batch.map_err(|e| LanceEngineError::Lance {
                    table: name.clone(),
                    action: "add columns",
                    source: lance::Error::from(e),
                })?;
                columns
                    .visit(&batch, &root, |id| {
                        references.insert(id);
                    })
                    .map_err(|source| LanceEngineError::Location { table: name.clone(), source })?;
                collected.push(batch);
            }
            Ok::<_, LanceEngineError>((schema, collected, references))
        })
        .await
        .map_err(|e| {
            LanceEngineError::InvalidInput(format!("table `{table}`: reading the new columns stopped: {e}"))
        })?;
        let (schema, collected, references) = read?;
        let references: Vec<ObjectIdentity> = references.into_iter().collect();
        let facts = IntentFacts::new(IntentOperation::AddColumns, before);
        let intent = self.begin_guarded(table, facts, references, &guard).await?;
        let merged = async {
            let mut ds = self.open_gated(table, Some(before), &intent.gate).await?;
            let source = RecordBatchIterator::new(collected.into_iter().map(Ok), schema);
            ds.merge(source, on, on).await.map_err(|source| LanceEngineError::Lance {
                table: table.into(),
                action: "add columns",
                source,
            })?;
            Ok::<_, LanceEngineError>(ds)
        }
        .await;
        match self.after_commit(&intent, merged, false).await? {
            Committed::Now(ds) => {
                let outcome = self.publish_diff(&ds, table).await?;
                self.end_intent(&intent).await;
                Ok(outcome)
            }
            Committed::Late(version) => self.landed_outcome(table, version, 0).await,
        }
    }

    /// Drops `columns` from `table` (a reference column's references are removed). Lance's drop
    /// is metadata-only: the data stays in the files until compaction rewrites them.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] for a column that is not top-level; Lance errors
    /// (every column); sidecar and registry errors.
    pub async fn drop_columns(&self, table: &str, columns: &[&str]) -> Result<CommitOutcome, LanceEngineError> {
        let mut ds = self.open(table).await?;
        for column in columns {
            top_level(&ds, table, column)?;
        }
        ds.drop_columns(columns).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "drop columns",
            source,
        })?;
        self.publish_diff(&ds, table).await
    }

    /// Renames column `from` of `table` to `to` (a reference column keeps its references).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] for a `from` that is not a top-level column or a `to`
    /// with a `.` or in use; Lance, sidecar and registry errors.
    pub async fn rename_column(&self, table: &str, from: &str, to: &str) -> Result<CommitOutcome, LanceEngineError> {
        let mut ds = self.open(table).await?;
        top_level(&ds, table, from)?;
        if to.is_empty() || to.contains('.') || ds.schema().field(to).is_some() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}`: cannot rename `{from}` to `{to}`: the new name must be a top-level name (no `.`) not in use"
            )));
        }
        ds.alter_columns(&[ColumnAlteration::new(from.to_string()).rename(to.to_string())])
            .await
            .map_err(|source| LanceEngineError::Lance { table: table.into(), action: "rename column", source })?;
        self.publish_diff(&ds, table).await
    }

    /// Journals `ds`'s version from the two manifests and advances the registry.
    ///
    /// # Errors
    /// Lance, scan, sidecar and registry errors.
    async fn publish_diff(&self, ds: &Dataset, table: &str) -> Result<CommitOutcome, LanceEngineError> {
        let version = ds.version().version;
        let diff = diff_entry(ds, table, self.store().root()).await?;
        let (references_added, references_removed) = (diff.added, diff.removed);
        self.publish(diff.entry).await?;
        Ok(CommitOutcome {
            table: table.into(),
            version,
            rows: 0,
            references_added,
            references_removed,
            rebased: rebased(ds, version).await,
        })
    }
}

/// Refuses `column` unless it is a top-level column of `ds`: a child of a struct (`file.uri`)
/// dropped or renamed would turn a reference column into a look-alike after Lance committed.
fn top_level(ds: &Dataset, table: &str, column: &str) -> Result<(), LanceEngineError> {
    if ds.schema().fields.iter().any(|f| f.name == column) {
        return Ok(());
    }
    Err(LanceEngineError::InvalidInput(format!(
        "table `{table}` has no top-level column `{column}`; columns inside a struct (`a.b`) are not dropped or renamed here"
    )))
}
