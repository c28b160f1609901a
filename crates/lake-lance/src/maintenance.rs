//! Table maintenance through the engine: compaction (content-preserving: journaled as empty
//! entries) and version cleanup (Lance's version retention, after the write protocol's
//! resolution has journaled what earlier writes left).

use crate::commit::change::{Change, InLanceCall, Journal, Made};
use crate::commit::recover::Versions;
use crate::commit::Wait;
use crate::engine::{CleanupOutcome, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use lance::dataset::optimize::{compact_files, CompactionOptions};

impl LanceEngine {
    /// Compacts `table`'s fragments (materialising deletions). Content-preserving: journals an
    /// empty entry for each version it commits (Lance's compaction commits a `ReserveFragments`
    /// version before its `Rewrite`). Returns `None` when there was nothing to compact.
    ///
    /// # Errors
    /// [`LanceEngineError::UnreadableTable`] (nothing committed); Lance, sidecar and registry
    /// errors.
    pub async fn compact(&self, table: &str) -> Result<Option<CommitOutcome>, LanceEngineError> {
        writable_columns(&self.open(table).await?, table)?;
        let name = table.to_string();
        let run: InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                compact_files(&mut ds, CompactionOptions::default(), None)
                    .await
                    .map_err(|source| LanceEngineError::Lance { table: name, action: "compaction", source })?;
                Ok(Made { dataset: ds, rows: 0 })
            })
        });
        let change = Change::in_lance(table, "compact", table, None, Journal::ContentPreserving, run);
        let committed = self.commit(change).await?;
        Ok((!committed.unchanged).then(|| committed.outcome(table, 0)))
    }

    /// Removes versions older than `older_than` (Lance version retention). Never the latest or
    /// tagged versions; Lance deletes the data files only those versions used. The journal
    /// (`_lake/`) is not Lance's and stays. First, as every write does, the write protocol's
    /// resolution: write intents past their deadline (by the store's clock) are resolved, and
    /// the versions without a journal entry that recovery may journal are journaled from their
    /// manifests (`crate::commit`); then stale restore tags of the lineage (restores killed
    /// after tagging their source, judged by the store's clock:
    /// [`LanceEngine::remove_stale_restore_tags`]) are removed, so the versions they pinned can
    /// go. When versions went, writes the reference checkpoint at the new oldest retained version
    /// ([`LanceEngine::write_reference_checkpoint`]).
    ///
    /// A table with no version at all whose folder holds the files of a first write that never
    /// committed is cleaned up by [`LanceEngine::discard_uncommitted`] instead (its files older
    /// than `older_than`; `old_versions` is 0), once the intents of its create are resolved.
    ///
    /// # Errors
    /// Lance errors; as [`LanceEngine::discard_uncommitted`].
    pub async fn cleanup(
        &self,
        table: &str,
        older_than: std::time::Duration,
    ) -> Result<CleanupOutcome, LanceEngineError> {
        // Intents past their deadline first: a create that never landed is fenced (its table
        // then exists, empty), a commit that landed late is journaled.
        for resolved in self.resolve_lineage(table, Wait::No).await? {
            if let crate::commit::Resolution::Pending { reason } = &resolved.resolution {
                tracing::info!(intent = %resolved.key, "a write intent stays pending: {reason}");
            }
        }
        if self.is_uncommitted_dataset(table).await? {
            let discarded = self.discard_uncommitted(table, older_than).await?;
            return Ok(CleanupOutcome {
                old_versions: 0,
                bytes_removed: discarded.bytes_removed,
                stale_restore_tags: Vec::new(),
            });
        }
        self.recover_unjournaled(table, Versions::All).await?;
        let now = self.store_clock().read(self.store()).await?;
        let stale_restore_tags = self.remove_stale_restore_tags(table, now.store_now).await?;
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
                    "the duration {}s (versions older than it are removed) reaches before the earliest time this build can represent; use a shorter duration",
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
}
