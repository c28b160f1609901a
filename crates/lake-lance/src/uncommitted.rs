//! What a write that never committed leaves in a table's folder, and how it goes.
//!
//! A streamed write (append, overwrite) writes its Lance data files and its reference log
//! before it commits. When the engine refuses the commit (the publication guard, another
//! writer's create, a failed journal), the write removes exactly the files it created
//! ([`discard_refused_write`]): the data files its uncommitted transaction names, its reference
//! log, and for a first write the folders it left empty. Nothing else is touched: every data
//! file name is Lance's fresh UUID, and only a write refused before its commit attempt is
//! cleaned up (a commit that was attempted may still land).
//!
//! A write killed between its data files and its commit leaves them behind. For a first write
//! that is a dataset folder with no version at all: nothing any version references. GC names it
//! as a problem of that table ([`lake_engine::LineageProblem::UncommittedDataset`]) with the way
//! out, `lake cleanup ROOT --table T --older-than DUR` ([`LanceEngine::discard_uncommitted`]),
//! which removes the files older than DUR unless a write to the table may still land: a write
//! intent under `_lake/intents/<table>/` ([`INTENTS_PREFIX`], written before a commit and removed
//! after its journal entry) keeps the folder, reported.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use lake_engine::LineageProblem;
use lake_store::layout::{dataset_key, validate_table_name, DATASET_SUFFIX};
use lake_store::registry;
use lake_store::store::LakeStore;
use lance::dataset::transaction::{Operation, Transaction};

/// Folder of the write intents: `_lake/intents/<table>/<write_id>.json` (one per write whose
/// commit may still land).
pub const INTENTS_PREFIX: &str = "_lake/intents";

/// The keys (relative to the lake root) of the data files an uncommitted `transaction` of
/// `table` wrote: the files of the fragments an append or overwrite adds, in the dataset's own
/// `data/` folder. Empty for any other operation.
pub(crate) fn data_file_keys(table: &str, transaction: &Transaction) -> Vec<String> {
    let fragments = match &transaction.operation {
        Operation::Append { fragments } | Operation::Overwrite { fragments, .. } => fragments,
        _ => return Vec::new(),
    };
    let base = dataset_key(table);
    fragments
        .iter()
        .flat_map(|f| f.files.iter())
        .filter(|file| file.base_id.is_none())
        .map(|file| format!("{base}/data/{}", file.path))
        .collect()
}

/// Removes what a write refused before its commit attempt created, once its reference log is
/// gone (`crate::journaling::discard_log`): `data_files` (from [`data_file_keys`]) and, for a
/// first write (`creating`) on a local root, the folders of the dataset it left empty. Best
/// effort: a file that cannot be removed is logged (it is an uncommitted file, never read).
pub(crate) async fn discard_refused_write(store: &LakeStore, table: &str, data_files: &[String], creating: bool) {
    for key in data_files {
        if let Err(e) = store.delete(key).await {
            tracing::warn!(file = key.as_str(), "could not delete a data file of a refused write: {e}");
        }
    }
    if creating {
        if let Some(dir) = store.local_dir() {
            let base = dir.join(dataset_key(table));
            // Only empty folders go (`remove_dir` refuses any other): another writer's files
            // keep theirs.
            for folder in ["data", "_lake/object_ref_logs", "_lake/object_refs", "_lake", "_versions", ""] {
                let _ = std::fs::remove_dir(base.join(folder));
            }
        }
    }
}

/// The write intents of `table` (keys under `_lake/intents/<table>/`): writes whose commit may
/// still land.
///
/// # Errors
/// Storage errors.
pub(crate) async fn pending_intents(store: &LakeStore, table: &str) -> Result<Vec<String>, LanceEngineError> {
    let listed = store.list_all(&format!("{INTENTS_PREFIX}/{table}/")).await?;
    let mut keys: Vec<String> = listed.into_iter().map(|(k, _)| k).collect();
    keys.sort();
    Ok(keys)
}

/// What [`LanceEngine::discard_uncommitted`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UncommittedCleanup {
    /// Files removed.
    pub removed: u64,
    /// Bytes removed.
    pub bytes_removed: u64,
    /// Files kept because they are younger than the age asked for.
    pub kept_young: u64,
}

impl LanceEngine {
    /// The problem of the unregistered dataset folder `folder` (named `name`, with the
    /// `.lance` suffix) that holds something: a dataset lake did not make
    /// ([`LineageProblem::UnregisteredDataset`]), or the files of a first write that never
    /// committed when its table has no version ([`LineageProblem::UncommittedDataset`]). `None`
    /// for the latter while a write intent of the table exists: the create it belongs to is
    /// covered by the write protocol (its intent keeps what it may publish live, and resolution
    /// fences it: docs/protocol.md), so the problem stays confined to that table instead of
    /// stopping every GC of the lake.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn unregistered_problem(
        &self,
        folder: &str,
        name: &str,
    ) -> Result<Option<LineageProblem>, LanceEngineError> {
        let table = name.strip_suffix(DATASET_SUFFIX).filter(|t| validate_table_name(t).is_ok());
        let Some(table) = table else {
            return Ok(Some(LineageProblem::UnregisteredDataset { path: folder.to_string() }));
        };
        if self.table_exists(table).await? {
            return Ok(Some(LineageProblem::UnregisteredDataset { path: folder.to_string() }));
        }
        if pending_intents(self.store(), table).await?.iter().any(|k| k.ends_with(".json")) {
            return Ok(None);
        }
        Ok(Some(LineageProblem::UncommittedDataset {
            table: table.to_string(),
            path: folder.to_string(),
            intent: None,
        }))
    }

    /// Whether `table`'s dataset folder holds the files of a write that never committed and
    /// nothing else: the table is not registered and its folder has no version at all.
    ///
    /// # Errors
    /// Storage errors; an invalid table name.
    pub async fn is_uncommitted_dataset(&self, table: &str) -> Result<bool, LanceEngineError> {
        validate_table_name(table)?;
        Ok(registry::current(self.store(), table).await?.is_none()
            && !self.table_exists(table).await?
            && self.store().holds_anything_below(&dataset_key(table)).await?)
    }

    /// Removes what writes to `table` that never committed left in its dataset folder, when the
    /// table has no version at all and is not registered (a first write killed between its data
    /// files and its commit): every file of the folder last written more than `older_than` ago
    /// (by this host's clock, like Lance's version cleanup), and then the folders left empty.
    /// What `lake cleanup` does for such a table.
    ///
    /// Choose `older_than` longer than any write to the table that may still be running: a
    /// write's data files are written before its commit.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] when the table is registered or has a version (use
    /// [`LanceEngine::cleanup`]), when a write intent says a write may still land, or when the
    /// folder holds a symbolic link or another non-regular entry (nothing is removed then);
    /// storage errors.
    pub async fn discard_uncommitted(
        &self,
        table: &str,
        older_than: std::time::Duration,
    ) -> Result<UncommittedCleanup, LanceEngineError> {
        validate_table_name(table)?;
        let folder = dataset_key(table);
        if registry::current(self.store(), table).await?.is_some() || self.table_exists(table).await? {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` has versions; its uncommitted files are Lance's to clean up (`cleanup` of its versions)"
            )));
        }
        let intents = pending_intents(self.store(), table).await?;
        if let Some(intent) = intents.first() {
            return Err(LanceEngineError::InvalidInput(format!(
                "a write to table `{table}` may still land (write intent `{intent}`); nothing was removed from `{folder}/`. Run this again once that write has landed or been resolved"
            )));
        }
        let older = chrono::Duration::from_std(older_than).map_err(|_| {
            LanceEngineError::InvalidInput(format!(
                "the duration {older_than:?} (files older than it are removed) is too large"
            ))
        })?;
        let cutoff = chrono::Utc::now() - older;
        let files = self.uncommitted_files(table).await?;
        let mut outcome = UncommittedCleanup::default();
        for (key, last_modified, size) in files {
            if last_modified >= cutoff {
                outcome.kept_young += 1;
                continue;
            }
            self.store().delete(&key).await?;
            outcome.removed += 1;
            outcome.bytes_removed += size;
        }
        if let Some(dir) = self.store().local_dir() {
            remove_empty_folders(&dir.join(&folder));
        }
        // A commit that landed meanwhile would be a version whose data files this removed: the
        // age rule is what prevents it; say so loudly if it happened anyway.
        if self.table_exists(table).await? {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` got a version while its uncommitted files were removed: a write older than {older_than:?} was still running. Check the table's versions and rerun that write"
            )));
        }
        Ok(outcome)
    }

    /// Every file of `table`'s dataset folder: key, last modified, size in bytes. On a local root
    /// the folder is walked without following links, and any entry that is not a regular file
    /// or a folder (a symbolic link, say) refuses the whole cleanup.
    async fn uncommitted_files(
        &self,
        table: &str,
    ) -> Result<Vec<(String, chrono::DateTime<chrono::Utc>, u64)>, LanceEngineError> {
        let folder = dataset_key(table);
        let Some(dir) = self.store().local_dir() else {
            let listed = self.store().list_all(&format!("{folder}/")).await?;
            return Ok(listed.into_iter().map(|(k, m)| (k, m.last_modified, m.size)).collect());
        };
        let mut files = Vec::new();
        let refuse = |what: String| {
            LanceEngineError::InvalidInput(format!(
                "table `{table}`: {what} in its dataset folder; nothing was removed: move it out of the lake first"
            ))
        };
        if std::fs::symlink_metadata(dir.join(&folder)).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refuse(format!("`{folder}` itself is a symbolic link")));
        }
        for entry in walkdir::WalkDir::new(dir.join(&folder)).follow_links(false) {
            let entry = entry.map_err(|e| refuse(format!("cannot read {e}")))?;
            let kind = entry.file_type();
            if kind.is_dir() {
                continue;
            }
            let path = entry.path().display().to_string();
            if !kind.is_file() {
                return Err(refuse(format!("`{path}` is not a regular file (a symbolic link?)")));
            }
            let meta = entry.metadata().map_err(|e| refuse(format!("cannot read `{path}` ({e})")))?;
            let rel = entry.path().strip_prefix(dir).map_err(|_| refuse(format!("`{path}` is outside the root")))?;
            let key = rel.to_str().ok_or_else(|| refuse(format!("`{path}` is not UTF-8")))?.to_string();
            let modified: chrono::DateTime<chrono::Utc> =
                meta.modified().map_err(|e| refuse(format!("cannot read `{path}` ({e})")))?.into();
            files.push((key, modified, meta.len()));
        }
        Ok(files)
    }
}

/// Removes the empty folders under `folder` and `folder` itself when it ends up empty (links
/// are never followed; a folder that is not empty stays).
pub(crate) fn remove_empty_folders(folder: &std::path::Path) {
    for entry in walkdir::WalkDir::new(folder).follow_links(false).contents_first(true).into_iter().flatten() {
        if entry.file_type().is_dir() {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}
