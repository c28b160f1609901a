//! Lance branches through the engine: a branch of table `t` named `b` is a lineage of its own,
//! `t@b` (`lake_store::layout::BRANCH_SEPARATOR`), journaled and registered like a table.
//!
//! Lance 14 keeps a branch as a dataset under `tables/t.lance/tree/b/` whose first version is a
//! shallow clone (an `Operation::Clone`) of the version it was made from, with the table's own
//! folder as a base path, and whose later versions are its own. The engine:
//! - creates the branch, then journals its first version as a snapshot of the source version's
//!   references (replayed from the table's journal), then registers `t@b`: from then on GC takes
//!   every retained version of the branch as a root, like a table's;
//! - writes on it through every engine operation, given `t@b` as the table;
//! - deletes it: first its writes are resolved, then its name is spent (a create-only document
//!   `_lake/deleted-branches/t@b.json`, never removed), then Lance removes the branch's document
//!   and folder, then the engine removes the branch's journal and its registry folder.
//!
//! A branch name is used once. Lance's deletion frees every version slot of the branch, and a
//! new branch of the same name starts at its source's version number: a write to the deleted
//! branch suspended between its last check and its manifest write could land there, naming data
//! files the deletion removed. A write to a branch starts only while the branch is registered
//! (`LanceEngine::commit`), and deleting a registered branch spends its name first, so no such
//! write can find a new branch of its name (docs/protocol.md, "Branches").
//!
//! A branch made by another Lance client is not registered: it stays a lineage problem of its
//! table (GC refuses) until it is deleted, and the engine does not write to it. So is a branch
//! of a branch. A crash between Lance's branch creation and the registration leaves such an
//! unregistered branch: delete it (its name is not spent: it was never registered, so nothing
//! was written to it) and create it again.

use crate::commit::change::{Adds, Change, InLanceCall, Journal, Made};
use crate::commit::{Resolution, Wait};
use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use crate::scan::writable_columns;
use lake_common::intent::IntentOperation;
use lake_store::layout::{branch_lineage, dataset_key, deleted_branch_key, split_lineage, validate_table_name};

/// Where a branch starts: a version of the table's main line, or a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchSource {
    /// A version number of the main line.
    Version(u64),
    /// A tag of the main line.
    Tag(String),
}

impl std::str::FromStr for BranchSource {
    type Err = std::convert::Infallible;

    /// A number is a version; anything else a tag.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(s.parse::<u64>().map_or_else(|_| BranchSource::Tag(s.to_string()), BranchSource::Version))
    }
}

impl LanceEngine {
    /// Creates branch `branch` of `table` from `from` and journals and registers its lineage
    /// `table@branch` (see the module documentation). Returns its first version.
    ///
    /// # Errors
    /// Before anything is created: [`LanceEngineError::InvalidInput`] for a lineage name given
    /// as `table`, a branch name outside the table-name alphabet, a branch of that name that
    /// exists (in Lance, or files left under its folder), a name the engine deleted a branch of
    /// before (a name is used once), a lineage still registered, a source version whose
    /// journal is incomplete or that references an in-root key that is not managed;
    /// [`LanceEngineError::UnreadableTable`] for the source version's schema; Lance errors (no
    /// such version or tag). Sidecar and registry errors after Lance made the branch.
    pub async fn create_branch(
        &self,
        table: &str,
        branch: &str,
        from: &BranchSource,
    ) -> Result<CommitOutcome, LanceEngineError> {
        if split_lineage(table).1.is_some() {
            return Err(LanceEngineError::InvalidInput(format!(
                "`{table}` is a branch; branches are made from a table's main line"
            )));
        }
        let lineage = branch_lineage(table, branch);
        validate_table_name(&lineage)?;
        let ds = self.open(table).await?;
        let lance_err =
            |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
        // Lance commits a branch that exists again and fails with an internal error, leaving a
        // transaction file in the branch's folder: refuse it here.
        let existing = ds.list_branches().await.map_err(lance_err("list branches"))?;
        if existing.contains_key(branch) || self.lance_files_of_branch(&lineage).await? {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` already has a branch `{branch}` (or files of one under `{}/`); nothing was created. Choose another name, or delete that branch first (`branch delete` of branch `{branch}` of table `{table}`)",
                dataset_key(&lineage)
            )));
        }
        if self.store().head(&deleted_branch_key(&lineage)).await?.is_some() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` had a branch `{branch}`, deleted by the engine; a branch name is used once (a write to the deleted branch suspended before its deletion could still land in a new branch of that name, whose versions start below the deleted one's: docs/protocol.md, \"Branches\"). Nothing was created. Choose another name"
            )));
        }
        if self.is_registered(&lineage).await? {
            return Err(LanceEngineError::InvalidInput(format!(
                "branch `{lineage}` is still registered although Lance has no such branch (another client deleted it); nothing was created. Finish its deletion (`branch delete` of branch `{branch}` of table `{table}`), then choose another name"
            )));
        }
        let version = match from {
            BranchSource::Version(v) => *v,
            // A tag of the main line only: a branch's tag names a version of the branch.
            BranchSource::Tag(tag) => self.tag_of_lineage(table, tag).await?.version,
        };
        // The branch's first version has the source's schema and references: both are checked,
        // from the dataset and the journal, before anything is created.
        let counts = self.journal_counts_at(table, version).await?;
        // The intent names them (the branch's first version is the source's number: a version
        // above `version - 1` of the branch is this write's).
        let source = ds.checkout_version(version).await.map_err(lance_err("checkout"))?;
        writable_columns(&source, table)?;
        crate::history::check_republished(table, version, &counts)?;
        let ids: Vec<_> = counts.iter().map(|(id, _)| id.clone()).collect();
        let (name, branch_name) = (table.to_string(), branch.to_string());
        let run: InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                let created = ds
                    .create_branch(&branch_name, version, None)
                    .await
                    .map_err(|source| LanceEngineError::Lance { table: name, action: "create branch", source })?;
                Ok(Made { dataset: created, rows: 0 })
            })
        });
        // The branch's first version is the source's number: a version above `version - 1` of
        // the branch is this write's. Its references are held by the retained source version:
        // no guard.
        let adds = Adds::identities(IntentOperation::CreateBranch, version.saturating_sub(1), ids, Vec::new())
            .restoring(version);
        let journal = Journal::Snapshot(counts);
        let change = Change::in_lance(&lineage, "create_branch", table, None, journal, run).adding(adds).registering();
        Ok(self.commit(change).await?.outcome(&lineage, 0))
    }

    /// Deletes branch `branch` of `table`: first the writes to it are resolved (each one revoked
    /// and fenced: it landed and is journaled, or it can no longer land; docs/protocol.md), then
    /// its name is spent (a registered branch's: [`deleted_branch_key`]; [`Self::create_branch`]
    /// refuses it from then on), then Lance's branch, then its journal and registry pin (the
    /// objects only its versions referenced become orphans). A write to the branch that passed
    /// its last check before the revocation and lands after the deletion lands in the deleted
    /// branch's folder: GC reports that folder (a branch folder without its document) and
    /// refuses until it is removed, and its writer's journal step fails (the branch is no longer
    /// registered); running this again removes what is left of a deleted branch.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when a write to the branch cannot be resolved (nothing
    /// is deleted; the message names the write intent and why); Lance errors (no such branch; a
    /// tag or another branch still refers to it); storage errors.
    pub async fn delete_branch(&self, table: &str, branch: &str) -> Result<(), LanceEngineError> {
        let lineage = branch_lineage(table, branch);
        validate_table_name(&lineage)?;
        let pending: Vec<String> = self
            .resolve_lineage(&lineage, Wait::Revoke)
            .await?
            .into_iter()
            .filter_map(|r| match r.resolution {
                Resolution::Pending { reason } => Some(format!("{} ({reason})", r.key)),
                _ => None,
            })
            .collect();
        if !pending.is_empty() {
            return Err(LanceEngineError::InvalidInput(format!(
                "branch `{lineage}` has writes that cannot be resolved yet: {}; nothing was deleted. Run `refs recover` (table `{lineage}`), then delete the branch again",
                pending.join("; "),
            )));
        }
        let mut ds = self.open(table).await?;
        let known = ds.list_branches().await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "list branches",
            source,
        })?;
        // Before Lance deletes anything: a registered branch's name is spent (see
        // `lake_store::layout::deleted_branch_key`). A write to the branch starts only while it
        // is registered (`LanceEngine::commit`), so a write that can still land was made in a
        // branch whose name is now spent.
        if self.is_registered(&lineage).await? {
            let doc = serde_json::json!({ "table": table, "branch": branch, "lineage": lineage });
            self.store().put_create(&deleted_branch_key(&lineage), doc.to_string().into_bytes()).await?;
        }
        if known.contains_key(branch) {
            ds.delete_branch(branch).await.map_err(|source| LanceEngineError::Lance {
                table: table.into(),
                action: "delete branch",
                source,
            })?;
        } else if !self.lance_files_of_branch(&lineage).await? && !self.is_registered(&lineage).await? {
            return Err(LanceEngineError::InvalidInput(format!("table `{table}` has no branch `{branch}`")));
        } else {
            // What is left of a branch deleted before (a write that landed after its deletion):
            // Lance's files of it go too.
            let folder = format!("{}/", dataset_key(&lineage));
            let nested = format!("{folder}tree/");
            for (key, _) in self.store().list_all(&folder).await? {
                if !key.starts_with(&nested) {
                    self.store().delete(&key).await?;
                }
            }
            if let Some(dir) = self.store().local_dir() {
                // A local store keeps the folders it emptied.
                crate::uncommitted::remove_empty_folders(&dir.join(dataset_key(&lineage)));
            }
        }
        // Lance removed its own files (and keeps the folder when a nested branch lives in it):
        // the journal and the registry entry are the protocol's to remove.
        self.forget_lineage(&lineage).await
    }

    /// Whether the folder of `lineage` (`t@b`) holds anything of Lance's: a file, or a folder
    /// other than the engine's journal (`_lake/`, which a branch deleted by another client
    /// leaves) holding one.
    ///
    /// # Errors
    /// Storage errors.
    async fn lance_files_of_branch(&self, lineage: &str) -> Result<bool, LanceEngineError> {
        let (folders, files) = self.store().list_dir(&dataset_key(lineage)).await?;
        if !files.is_empty() {
            return Ok(true);
        }
        for folder in folders {
            if folder.trim_end_matches('/').rsplit('/').next() != Some("_lake")
                && self.store().holds_anything_below(&folder).await?
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The branches of `table` that the engine journals (registered lineages), by name.
    ///
    /// # Errors
    /// Storage errors.
    pub async fn branches(&self, table: &str) -> Result<Vec<String>, LanceEngineError> {
        let prefix = format!("{table}{}", lake_store::layout::BRANCH_SEPARATOR);
        Ok(self
            .registered_lineages()
            .await?
            .into_iter()
            .filter_map(|name| name.strip_prefix(&prefix).map(str::to_string))
            .collect())
    }
}
