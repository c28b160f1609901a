//! Deletes through the engine: Lance's delete staged (`DeleteBuilder::execute_uncommitted`, as
//! Lance's own `Dataset::delete` does) and committed by the write protocol, so the version
//! carries the lake's marker (`crate::commit::marker`). The journal entry is computed from the
//! two manifests: the references of the rows the delete removed, with their counts.

use crate::commit::change::{Change, Journal};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use lance::dataset::DeleteBuilder;
use std::sync::Arc;

/// Times a delete evaluates its predicate again after a conflict with a concurrent delete of the
/// same fragments (Lance's `DeleteBuilder` default: 10).
const DELETE_CONFLICT_RETRIES: u32 = 10;

impl LanceEngine {
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
        let lance_error = |source| LanceEngineError::Lance { table: table.into(), action: "delete", source };
        // A conflict with a concurrent delete of the same fragments evaluates the predicate again
        // on the newer version, as Lance's own retry does.
        let mut conflicts = 0;
        loop {
            let ds = Arc::new(self.open(table).await?);
            writable_columns(&ds, table)?;
            let staged = DeleteBuilder::new(ds.clone(), predicate).execute_uncommitted().await.map_err(lance_error)?;
            // Journaled from the two manifests, not from a count taken before: a predicate need
            // not evaluate the same way twice (`random()`), and Lance may rebase the delete.
            let change = Change::staged(table, "delete", staged.transaction, Some(ds), Journal::Manifests)
                .affecting(staged.affected_rows);
            match self.commit(change).await {
                Ok(committed) => return Ok(Some(committed.outcome(table, staged.num_deleted_rows))),
                Err(LanceEngineError::Lance { source: lance::Error::RetryableCommitConflict { .. }, .. })
                    if conflicts < DELETE_CONFLICT_RETRIES =>
                {
                    conflicts += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
