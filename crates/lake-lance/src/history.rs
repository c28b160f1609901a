//! Version history operations: restore an older version, tags.
//!
//! A restore commits an older version's content as the new latest version; its journal entry is
//! a snapshot of that version's references, computed from the journal (not a scan). While the
//! restore runs, the source version is protected from version cleanup by a temporary Lance tag
//! (Lance's cleanup never removes tagged versions), so its data files cannot vanish under it.

use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_engine::{check_chain, EngineError, LineageProblem, Replay};

/// Prefix of the temporary tags that protect a restore's source version.
pub const RESTORE_TAG_PREFIX: &str = "lake-restore-";

impl LanceEngine {
    /// The reference counts of `table` at `version`, replayed from the journal.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] naming the lineage problem when the journal cannot
    /// reach `version` (a missing or undecodable sidecar at or below it).
    pub async fn journal_counts_at(&self, table: &str, version: u64) -> Result<ReferenceCounts, LanceEngineError> {
        let (lineage, sidecars) = self.lineage_and_sidecars(table).await?;
        if version > lineage.latest_version {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` has no version {version} (latest is {})",
                lineage.latest_version
            )));
        }
        // The replay's base for `version` alone, and a full chain to it: the one search of
        // `lake_engine::check_chain`, as for every other replay.
        let (base, problems) = check_chain(table, &[version], version, &sidecars);
        if let Some(problem) = problems.into_iter().next() {
            return Err(lineage_error(table, problem));
        }
        let base =
            base.ok_or_else(|| LanceEngineError::InvalidInput(format!("table `{table}` has no version {version}")))?;
        let mut replay = Replay::new(&[]);
        for v in base..=version {
            if let Some(Ok(d)) = sidecars.get(&v) {
                replay.apply(d).map_err(|e| {
                    lineage_error(
                        table,
                        LineageProblem::Inconsistent { table: table.into(), version: v, reason: e.to_string() },
                    )
                })?;
            }
        }
        Ok(replay.counts())
    }

    /// Restores `version` of `table` as a new latest version, journaled as a snapshot of
    /// `version`'s references.
    ///
    /// The restored version's schema must be one the engine can journal, and every reference it
    /// holds is published again, so each must pass the rule for new references (external or a
    /// managed key: [`check_republished`]). Restoring a version whose schema the engine can read
    /// is a way out of a latest version whose schema it cannot.
    ///
    /// # Errors
    /// Before the commit (nothing committed): [`LanceEngineError::InvalidInput`] when `version`
    /// no longer exists, its journal is incomplete, or it references an in-root key that is not
    /// managed; [`LanceEngineError::UnreadableTable`] for its schema; Lance errors. After it:
    /// sidecar and registry errors. The protecting tag is removed on every path.
    pub async fn restore(&self, table: &str, version: u64) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        let lance_err =
            |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
        let tag = format!("{RESTORE_TAG_PREFIX}{}", ulid::Ulid::new().to_string().to_lowercase());
        ds.tags().create(&tag, version).await.map_err(lance_err("tag the restore source"))?;
        let result: Result<CommitOutcome, LanceEngineError> = async {
            let counts = self.journal_counts_at(table, version).await?;
            let mut source = ds.checkout_version(version).await.map_err(lance_err("checkout"))?;
            writable_columns(&source, table)?;
            check_republished(table, version, &counts)?;
            source.restore().await.map_err(lance_err("restore"))?;
            let landed = source.version().version;
            self.publish(ObjectReferenceDelta::snapshot(table, landed, &counts)).await?;
            Ok(CommitOutcome {
                table: table.into(),
                version: landed,
                rows: 0,
                references_added: counts.total(),
                references_removed: 0,
                rebased: rebased(&source, landed).await,
            })
        }
        .await;
        let untag = ds.tags().delete(&tag).await;
        let outcome = result?;
        untag.map_err(lance_err("remove the restore tag"))?;
        Ok(outcome)
    }

    /// Tags `version` of `table` as `name` (a tagged version is retained: cleanup skips it, and
    /// GC keeps what it references).
    ///
    /// # Errors
    /// Lance errors (an existing tag, an invalid name, a missing version).
    pub async fn create_tag(&self, table: &str, version: u64, name: &str) -> Result<(), LanceEngineError> {
        let ds = self.open(table).await?;
        ds.tags().create(name, version).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "create tag",
            source,
        })
    }

    /// Deletes tag `name` of `table`.
    ///
    /// # Errors
    /// Lance errors (an unknown tag).
    pub async fn delete_tag(&self, table: &str, name: &str) -> Result<(), LanceEngineError> {
        let ds = self.open(table).await?;
        ds.tags().delete(name).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "delete tag",
            source,
        })
    }
}

/// Checks that every reference of `counts` (the references of `table` at `version`, about to be
/// published again by a restore or a new branch) is external or a managed key, the rule for
/// new references (`lake_common::managed`).
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] naming the first reference that is not.
pub(crate) fn check_republished(table: &str, version: u64, counts: &ReferenceCounts) -> Result<(), LanceEngineError> {
    for (identity, _) in counts.iter() {
        if let Err(e) = lake_common::check_new_reference(&identity.uri, &identity.uri) {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` version {version} references what no write may publish again: {e}; nothing was committed"
            )));
        }
    }
    Ok(())
}

fn lineage_error(table: &str, problem: LineageProblem) -> LanceEngineError {
    LanceEngineError::InvalidInput(EngineError::Lineage { table: table.into(), problems: vec![problem] }.to_string())
}
