//! Version history operations: restore an older version, tags.
//!
//! A restore commits an older version's content as the new latest version; its journal entry is
//! a snapshot of that version's references, computed from the journal (not a scan). While the
//! restore runs, the source version is protected from version cleanup by a temporary Lance tag
//! (Lance's cleanup never removes tagged versions), so its data files cannot vanish under it,
//! and a write intent names the references it restores (`crate::intent_commit`), so they stay
//! live should the commit land after the tag is gone.

use crate::engine::{rebased, CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::intent_commit::{Committed, IntentFacts, IntentRefs};
use lake_common::intent::IntentOperation;
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_engine::{check_chain, EngineError, LineageProblem, Replay};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::guard::PublicationGuard;

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
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when `version` no longer exists or its journal is
    /// incomplete; Lance, sidecar and registry errors. The protecting tag is removed on every path.
    pub async fn restore(&self, table: &str, version: u64) -> Result<CommitOutcome, LanceEngineError> {
        let ds = self.open(table).await?;
        let lance_err =
            |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
        let tag = format!("{RESTORE_TAG_PREFIX}{}", ulid::Ulid::new().to_string().to_lowercase());
        ds.tags().create(&tag, version).await.map_err(lance_err("tag the restore source"))?;
        let result: Result<CommitOutcome, LanceEngineError> = async {
            let counts = self.journal_counts_at(table, version).await?;
            self.resolve_before_commit(table).await;
            // The intent names the restored references: the tag keeps the source version's
            // data, the intent its objects, should the commit land after both were released.
            let guard = PublicationGuard::from_policy(&LakeDescriptor::load(self.store()).await?);
            let facts = IntentFacts {
                restored_version: Some(version),
                ..IntentFacts::new(IntentOperation::Restore, ds.version().version)
            };
            let ids = counts.iter().map(|(id, _)| id.clone()).collect();
            let intent = self.begin_intent(table, facts, IntentRefs::Identities(ids), &guard).await?;
            let restored = async {
                let mut source = self.open_gated(table, Some(version), &intent.gate).await?;
                source.restore().await.map_err(lance_err("restore"))?;
                Ok::<_, LanceEngineError>(source)
            }
            .await;
            let source = match self.after_commit(&intent, restored, false).await? {
                Committed::Now(source) => source,
                Committed::Late(landed) => return self.landed_outcome(table, landed, 0).await,
            };
            let landed = source.version().version;
            self.publish(ObjectReferenceDelta::snapshot(table, landed, &counts)).await?;
            self.end_intent(&intent).await;
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

fn lineage_error(table: &str, problem: LineageProblem) -> LanceEngineError {
    LanceEngineError::InvalidInput(EngineError::Lineage { table: table.into(), problems: vec![problem] }.to_string())
}
