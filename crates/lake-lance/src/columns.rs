//! Schema evolution through the engine: add columns from an Arrow stream joined on a key, drop
//! columns, rename a column. Each commits one Lance version (`Merge` or `Project`), journaled
//! from the two manifests (`crate::version_diff`): when the set of reference columns changes
//! (a reference column added, dropped or renamed) the entry is a snapshot of the new version,
//! otherwise a delta of the rewritten fragments (nothing moves for a column that holds no
//! reference).
//!
//! Adding columns reads the whole source first (Lance's `Dataset::merge` holds it in memory for
//! its hash join anyway, and commits as soon as it has written the new column files), validating
//! its references and collecting the distinct ones; then the merge runs on the version read,
//! through the write protocol's commit handler (`crate::commit`): right before its manifest
//! write the write intent names them and the publication guard checks them.

use crate::commit::change::{Adds, Change, InLanceCall, Journal, Made};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use arrow_array::{RecordBatchIterator, RecordBatchReader};
use lake_common::intent::IntentOperation;
use lake_common::{ObjectIdentity, ReferenceColumns};
use lance::dataset::ColumnAlteration;
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::Arc;

impl LanceEngine {
    /// Adds the columns of `batches` (every column but `on`) to `table`, joined on the key
    /// column `on` (present in both; a row of the table without a match gets nulls, so the new
    /// columns must be nullable). A DataLocation column among them becomes a reference column.
    /// One new version (see the module documentation).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] for a key
    /// column missing from either side or of another type, or a new column already in the table
    /// ([`check_new_columns`]); [`LanceEngineError::UnreadableTable`];
    /// [`LanceEngineError::Location`] for an invalid DataLocation column or value (a reference
    /// inside the lake root must be a managed key); [`LanceEngineError::Guard`] when a
    /// referenced managed object is too old to publish; Lance errors. After it:
    /// [`LanceEngineError::Unjournaled`], sidecar and registry errors;
    /// [`LanceEngineError::NotCommitted`] / [`LanceEngineError::CommitUncertain`] when the
    /// commit failed after its manifest write was sent (see [`LanceEngine::append`]).
    pub async fn add_columns(
        &self,
        table: &str,
        on: &str,
        batches: Box<dyn RecordBatchReader + Send>,
    ) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        writable_columns(&ds, table)?;
        check_new_columns(&ds, table, on, &batches.schema())?;
        let before = ds.version().version;
        // The source is read on a blocking thread (a reader may block while it waits for its
        // rows, as an ingest's does), validated, and its distinct references collected.
        let root = self.store().root().clone();
        let name = table.to_string();
        let read = tokio::task::spawn_blocking(move || {
            let schema = batches.schema();
            let columns = ReferenceColumns::from_schema(&schema)
                .map_err(|source| LanceEngineError::Location { table: name.clone(), source })?
                .for_new_references();
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
        let (name, key) = (table.to_string(), on.to_string());
        let run: InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                let source = RecordBatchIterator::new(collected.into_iter().map(Ok), schema);
                ds.merge(source, &key, &key).await.map_err(|source| LanceEngineError::Lance {
                    table: name,
                    action: "add columns",
                    source,
                })?;
                Ok(Made { dataset: ds, rows: 0 })
            })
        });
        // The version adds the source's references, no other (checked after the commit).
        let adds =
            Adds::identities(IntentOperation::AddColumns, before, references.clone(), references).expecting(Vec::new());
        let change = Change::in_lance(table, "add_columns", table, Some(before), Journal::Manifests, run).adding(adds);
        Ok(self.commit(change).await?.outcome(table, 0))
    }

    /// Drops `columns` from `table` (a reference column's references are removed). Lance's drop
    /// is metadata-only: the data stays in the files until compaction rewrites them.
    ///
    /// A table whose schema has a column the engine cannot read references from (a nested or
    /// look-alike DataLocation another client added) accepts only a drop that removes every such
    /// column: the way out of that state. That version is journaled as a snapshot of its
    /// references (the previous version's cannot be read).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] for a column
    /// that is not top-level; [`LanceEngineError::UnreadableTable`] when the schema after the
    /// drop still has an unreadable column; Lance errors. After it:
    /// [`LanceEngineError::Unjournaled`], sidecar and registry errors.
    pub async fn drop_columns(&self, table: &str, columns: &[&str]) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        for column in columns {
            top_level(&ds, table, column)?;
        }
        let readable_before = writable_columns(&ds, table).is_ok();
        if !readable_before {
            // The schema the drop produces must be readable.
            let kept: Vec<arrow_schema::FieldRef> = arrow_schema::Schema::from(ds.schema())
                .fields()
                .iter()
                .filter(|f| !columns.contains(&f.name().as_str()))
                .cloned()
                .collect();
            if let Err(source) = ReferenceColumns::from_stored_schema(&arrow_schema::Schema::new(kept)) {
                let version = ds.version().version;
                return Err(LanceEngineError::UnreadableTable {
                    table: table.into(),
                    version,
                    source: Box::new(source),
                });
            }
        }
        // Lance's `Dataset::drop_columns` (a `Project` of the schema without them), staged so that
        // it goes through the write protocol (and carries the lake's marker).
        let lance_error = |source| LanceEngineError::Lance { table: table.into(), action: "drop columns", source };
        let schema = ds.plan_drop_columns(columns).map_err(lance_error)?;
        let transaction = lance::dataset::transaction::Transaction::new(
            ds.version().version,
            lance::dataset::transaction::Operation::Project { schema, preserves_nullability: true },
            None,
        );
        // The previous version's columns cannot be read when they were not readable: a snapshot
        // of the new version instead.
        let journal = if readable_before { Journal::Manifests } else { Journal::Scan };
        let change = Change::staged(table, "drop_columns", transaction, Some(Arc::new(ds)), journal);
        Ok(self.commit(change).await?.outcome(table, 0))
    }

    /// Renames column `from` of `table` to `to` (a reference column keeps its references).
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] for a `from`
    /// that is not a top-level column or a `to` with a `.` or in use;
    /// [`LanceEngineError::UnreadableTable`]; Lance errors. After it:
    /// [`LanceEngineError::Unjournaled`], sidecar and registry errors.
    pub async fn rename_column(&self, table: &str, from: &str, to: &str) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        writable_columns(&ds, table)?;
        top_level(&ds, table, from)?;
        if to.is_empty() || to.contains('.') || ds.schema().field(to).is_some() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}`: cannot rename `{from}` to `{to}`: the new name must be a top-level name (no `.`) not in use"
            )));
        }
        let before = ds.version().version;
        let (name, from, to) = (table.to_string(), from.to_string(), to.to_string());
        let run: InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                ds.alter_columns(&[ColumnAlteration::new(from).rename(to)])
                    .await
                    .map_err(|source| LanceEngineError::Lance { table: name, action: "rename column", source })?;
                Ok(Made { dataset: ds, rows: 0 })
            })
        });
        let change = Change::in_lance(table, "rename_column", table, Some(before), Journal::Manifests, run);
        Ok(self.commit(change).await?.outcome(table, 0))
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

/// Checks, before anything is read or written, the inputs of adding the columns of a source of
/// `source` schema to `ds`, joined on `on`: the key column exists in the table and in the
/// source with the same type, and every other source column is new to the table and has a
/// top-level name (no `.`).
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] naming the column at fault.
pub(crate) fn check_new_columns(
    ds: &Dataset,
    table: &str,
    on: &str,
    source: &arrow_schema::Schema,
) -> Result<(), LanceEngineError> {
    let stored = arrow_schema::Schema::from(ds.schema());
    let refuse =
        |why: String| Err(LanceEngineError::InvalidInput(format!("table `{table}`: {why}; nothing was written")));
    let Ok(key) = stored.field_with_name(on) else {
        return refuse(format!("has no column `{on}` to match rows on"));
    };
    match source.field_with_name(on) {
        Err(_) => return refuse(format!("the new columns come without the key column `{on}`")),
        Ok(f) if f.data_type() != key.data_type() => {
            return refuse(format!(
                "the key column `{on}` is {} in the table but {} in the new columns",
                key.data_type(),
                f.data_type()
            ))
        }
        Ok(_) => {}
    }
    for field in source.fields().iter().filter(|f| f.name() != on) {
        let name = field.name();
        if name.is_empty() || name.contains('.') {
            return refuse(format!("`{name}` is not a top-level column name (no `.`)"));
        }
        if stored.field_with_name(name).is_ok() {
            return refuse(format!("already has a column `{name}`"));
        }
    }
    Ok(())
}
