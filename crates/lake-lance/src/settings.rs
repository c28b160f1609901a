//! Table settings that would let Lance remove versions on its own, and with them what GC needs
//! to see.
//!
//! A version another Lance client commits without a sidecar is an *implied* empty entry when
//! its transaction proves it content-preserving ([`crate::foreign`]); GC reads the transaction
//! for that proof. `lake cleanup` writes those entries down before it removes versions
//! (`foreign::materialize_implied`). Lance's **auto-cleanup** does not: with
//! `lance.auto_cleanup.interval` in a version's config, every commit whose version number is a
//! multiple of the interval (by any client that does not set `skip_auto_cleanup`: Lance's own
//! delete, compaction, restore, index, schema and config operations never do) runs a version
//! cleanup (`lance::dataset::cleanup::auto_cleanup_hook`), removing old versions and their
//! transactions. Once an implied version is gone, no replay can pass it and no repair can scan
//! it: GC would stay blocked for good.
//!
//! So a lineage whose latest version's config enables auto-cleanup is a named lineage problem
//! ([`LineageProblem::TableSetting`]) from the moment it is committed, whoever committed it: GC
//! plans nothing and apply refuses (a plan's apply too: the problem is part of the lineage
//! stamp), naming each setting and the command that unsets them
//! (`lake config ROOT --table T --unset KEY`, [`LanceEngine::unset_config`]; with Lance itself,
//! `Dataset::update_config([(KEY, None)])`, or `delete_config_keys(&[KEY])`). The settings, with what each does
//! (`auto_cleanup_hook` and `build_cleanup_operation` in lance 14's `dataset/cleanup.rs`):
//! - `lance.auto_cleanup.interval`: turns auto-cleanup on (any value: 0 means every commit);
//! - `lance.auto_cleanup.older_than`: which versions it removes (older than this; 7 days when
//!   unset);
//! - `lance.auto_cleanup.retain_versions`: keeps only the N newest versions, however young;
//! - `lance.auto_cleanup.referenced_branch`: cascades the cleanup into the table's branches
//!   (other lineages' versions removed by a commit on this one).
//!
//! The last three change what auto-cleanup removes and matter only with the first; they are
//! named with it. Other table features a second client could change were checked and do not
//! change what versions exist or what GC sees: the compaction options (`lance.compaction.*`)
//! apply only to compactions that read them (the engine's passes its own options, and another
//! client's compaction is proven on the manifests), and stable row ids and the data storage
//! version are fixed when a table is created (a client changes them only with an `Overwrite`,
//! which is never implied).

use crate::engine::{CommitOutcome, LanceEngine};
use crate::error::LanceEngineError;
use lake_engine::LineageProblem;
use std::collections::{BTreeMap, HashMap};

/// The config key that turns Lance's auto-cleanup on.
pub const AUTO_CLEANUP_INTERVAL: &str = "lance.auto_cleanup.interval";

/// The config keys of Lance 14's auto-cleanup that change which versions exist, each with what
/// it does (see the module documentation).
pub const VERSION_REMOVING_SETTINGS: [(&str, &str); 4] = [
    (
        AUTO_CLEANUP_INTERVAL,
        "turns on Lance's auto-cleanup: every commit of a version that is a multiple of it (by any client that does not skip it) removes old versions and their transactions",
    ),
    ("lance.auto_cleanup.older_than", "auto-cleanup removes the versions older than this"),
    ("lance.auto_cleanup.retain_versions", "auto-cleanup keeps only this many versions, however young"),
    (
        "lance.auto_cleanup.referenced_branch",
        "auto-cleanup cascades into the table's branches, removing versions of other lineages",
    ),
];

/// The version-removing settings in effect in `config` (a version's table config), as
/// `(key, value, what it does)`: none unless auto-cleanup is on ([`AUTO_CLEANUP_INTERVAL`]),
/// else every one of [`VERSION_REMOVING_SETTINGS`] present.
pub fn version_removing_settings(config: &HashMap<String, String>) -> Vec<(String, String, &'static str)> {
    if !config.contains_key(AUTO_CLEANUP_INTERVAL) {
        return Vec::new();
    }
    VERSION_REMOVING_SETTINGS
        .iter()
        .filter_map(|(key, what)| config.get(*key).map(|value| (key.to_string(), value.clone(), *what)))
        .collect()
}

/// The lineage problem of `table` at `version` whose config is `config`, when auto-cleanup is
/// on: the settings in effect, what each does, and the command that unsets them all.
pub(crate) fn setting_problems(table: &str, version: u64, config: &HashMap<String, String>) -> Vec<LineageProblem> {
    let settings = version_removing_settings(config);
    if settings.is_empty() {
        return Vec::new();
    }
    let setting = settings.iter().map(|(k, v, _)| format!("`{k}={v}`")).collect::<Vec<_>>().join(", ");
    let what = settings.iter().map(|(k, _, what)| format!("`{k}` {what}")).collect::<Vec<_>>().join("; ");
    let unset = settings.iter().map(|(k, _, _)| format!("`{k}`")).collect::<Vec<_>>().join(", ");
    let keys = settings.iter().map(|(k, _, _)| format!("\"{k}\"")).collect::<Vec<_>>().join(", ");
    vec![LineageProblem::TableSetting {
        table: table.into(),
        version,
        setting,
        reason: format!(
            "{what}. A version another client committed without a sidecar is proven by its transaction, which auto-cleanup removes with the version: GC would then be blocked for good. Unset it (`config unset` of {unset} on table `{table}`; Lance: `Dataset::delete_config_keys(&[{keys}])`), then plan again"
        ),
    }]
}

impl LanceEngine {
    /// The table config of lineage `table`'s latest version (Lance's `lance.*` settings and any
    /// other client's keys), sorted by key.
    ///
    /// # Errors
    /// Lance errors; [`LanceEngineError::NoSuchTable`].
    pub async fn config(&self, table: &str) -> Result<BTreeMap<String, String>, LanceEngineError> {
        let ds = self.open(table).await?;
        Ok(ds.manifest().config.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    /// Removes the config keys `keys` from lineage `table` as one new version (a Lance
    /// `UpdateConfig`, journaled as an empty entry); `None` when none of them is set. First
    /// writes down the implied entries of the retained versions (as `lake cleanup` does), so
    /// that no version journaled only by its transaction depends on it any longer. The commit
    /// itself runs no auto-cleanup: Lance judges that by the new version's config, which no
    /// longer has the keys.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] for an empty key; Lance, sidecar and registry errors.
    pub async fn unset_config(&self, table: &str, keys: &[&str]) -> Result<Option<CommitOutcome>, LanceEngineError> {
        if keys.iter().any(|k| k.is_empty()) {
            return Err(LanceEngineError::InvalidInput("a config key to unset is empty".into()));
        }
        let ds = self.open(table).await?;
        if !keys.iter().any(|k| ds.manifest().config.contains_key(*k)) {
            return Ok(None);
        }
        crate::foreign::materialize_implied(self.store(), &ds, table).await?;
        let (name, keys): (String, Vec<String>) = (table.to_string(), keys.iter().map(|k| k.to_string()).collect());
        let run: crate::commit::change::InLanceCall = Box::new(move |mut ds| {
            Box::pin(async move {
                ds.update_config(keys.iter().map(|key| (key.as_str(), None::<&str>)))
                    .await
                    .map_err(|source| LanceEngineError::Lance { table: name, action: "unset config", source })?;
                Ok(crate::commit::change::Made { dataset: ds, rows: 0 })
            })
        });
        self.commit_content_preserving(table, "unset_config", run).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_active_auto_cleanup_removes_versions() {
        let config = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        assert!(version_removing_settings(&config(&[("lance.auto_cleanup.older_than", "0s")])).is_empty());
        assert!(version_removing_settings(&config(&[("lance.compaction.target_rows_per_fragment", "10")])).is_empty());
        let on = version_removing_settings(&config(&[
            (AUTO_CLEANUP_INTERVAL, "1"),
            ("lance.auto_cleanup.retain_versions", "1"),
            ("other", "x"),
        ]));
        let keys: Vec<&str> = on.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(keys, [AUTO_CLEANUP_INTERVAL, "lance.auto_cleanup.retain_versions"]);
        let problems =
            setting_problems("t", 3, &config(&[(AUTO_CLEANUP_INTERVAL, "1"), ("lance.auto_cleanup.older_than", "0s")]));
        assert_eq!(problems.len(), 1);
        let text = problems[0].to_string();
        assert!(
            text.contains("lance.auto_cleanup.interval=1") && text.contains("lance.auto_cleanup.older_than=0s"),
            "{text}"
        );
        assert!(
            text.contains(
                "`config unset` of `lance.auto_cleanup.interval`, `lance.auto_cleanup.older_than` on table `t`"
            ),
            "{text}"
        );
    }
}
