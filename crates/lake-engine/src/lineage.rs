//! Lineage: which versions a table retains and whether its journal covers them.

use lake_common::{DecodeError, DeltaKind, ObjectReferenceDelta};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A reason the journal cannot be trusted. Each one names the table, version or path at fault
/// and makes GC apply refuse (a dry run reports them all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LineageProblem {
    /// A version exists in the table but has no sidecar (written around the engine, or a writer
    /// crashed between its commit and its sidecar). Fix: `lake refs recover` for a lake writer
    /// (its write intent journals the version), `lake refs repair` for another client's version.
    MissingSidecar {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
    },
    /// A sidecar exists but fails to decode.
    UndecodableSidecar {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
        /// Why it fails to decode (the decoder's message).
        reason: String,
    },
    /// A version between the replay base and the latest version has no sidecar, so the counts
    /// of later versions cannot be computed.
    ParentGap {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version without a sidecar (Lance's version number).
        version: u64,
        /// The version whose replay needs it.
        needed_by: u64,
    },
    /// A sidecar file's name does not parse as a version, or its content names another version.
    VersionMismatch {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The sidecar file's key, relative to the lake root.
        file: String,
        /// What is wrong, one phrase.
        reason: String,
    },
    /// The journal replays to an impossible state (a count below zero).
    Inconsistent {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version at which replay fails (Lance's version number).
        version: u64,
        /// What is impossible, one sentence (the replay error's message).
        reason: String,
    },
    /// A dataset under the lake's tables folder that the registry does not know.
    UnregisteredDataset {
        /// The dataset folder's key, relative to the lake root.
        path: String,
    },
    /// A dataset folder of table `table` that has no version at all and is not registered:
    /// the files of a first write to the table that never committed (killed between its data
    /// files and its commit). No version references them. `intent` names a write intent of the
    /// table (`_lake/intents/<table>/`) when one says that a write may still land.
    UncommittedDataset {
        /// The table the folder is named for.
        table: String,
        /// The dataset folder's key, relative to the lake root.
        path: String,
        /// The key of a pending write intent of the table, relative to the lake root, if any.
        intent: Option<String>,
    },
    /// The registry pins a version above the dataset's latest: the dataset went backwards
    /// (restored from a backup?) and the versions it lost may still matter.
    RegistryAhead {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version the registry pins.
        registry: u64,
        /// The dataset's latest version.
        latest: u64,
    },
    /// A journal file exists for a version above the dataset's latest: the dataset went
    /// backwards under its journal, and a new version with that number would inherit an entry
    /// that describes another version.
    JournalBeyondLatest {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The lowest version above `latest` with a journal file.
        version: u64,
        /// The dataset's latest version.
        latest: u64,
    },
    /// The latest version is below the one a plan was made at.
    WentBackwards {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The latest version when the plan was made.
        was: u64,
        /// The latest version now.
        now: u64,
    },
    /// A version at or below a plan's latest is retained now but was not then.
    VersionReappeared {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version retained now and not at plan time.
        version: u64,
    },
    /// A journal file at or below a plan's latest version changed since the plan.
    JournalRewritten {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The plan's latest version: the journal up to it changed.
        upto: u64,
    },
    /// A table of a plan is no longer registered.
    TableVanished {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
    },
    /// The dataset has Lance branches (or a branch folder): versions the journal does not cover.
    Branch {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The branch's name (or the unexpected folder or files under `tree/`, described).
        branch: String,
    },
    /// A retained version reads files outside the dataset folder (a shallow clone, a base path
    /// added with `add_bases`): rows the journal of this table does not cover.
    ExternalBase {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The base path or URL outside the dataset folder (or a local symbolic link, marked so).
        path: String,
    },
    /// A detached version (Lance `CommitBuilder::with_detached`): it can be checked out and
    /// restored, and no version listing shows it.
    Detached {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The detached version's number.
        version: u64,
    },
    /// The schema of a version has a column lake cannot read references from with certainty.
    UnreadableColumns {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
        /// Why, one sentence (the column check's message).
        reason: String,
    },
    /// A retained version's journal entry records nothing of the Lance version it describes
    /// (sidecar format 3, written by an earlier build): it cannot be told from an entry of
    /// another version with the same number. Fix: `lake refs bind` checks the journal against
    /// full scans and binds the entries.
    UnboundEntry {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
    },
    /// A retained version's journal entry was written for another Lance version than the one
    /// the table holds at that number now (`expected`: what the entry records, `found`: what the
    /// version's manifest names): the table's Lance files were replaced under its journal.
    EntryOfAnotherVersion {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
        /// The Lance version the entry records, described (its transaction, or its manifest file).
        expected: String,
        /// The Lance version the table holds at that number now, described likewise.
        found: String,
    },
    /// A version retained when the plan was made has another manifest file now (its size or
    /// e-tag changed): the table's Lance files were replaced or copied back since.
    ManifestChanged {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The version (Lance's version number).
        version: u64,
        /// The manifest file when the plan was made, as `size:e-tag` (size in bytes).
        was: String,
        /// The manifest file now, as `size:e-tag`.
        now: String,
    },
    /// The latest version's table config lets Lance remove versions on its own (auto-cleanup),
    /// and with them the transactions GC reads to prove versions without a sidecar: `setting`
    /// is the keys and values, `reason` what they do and the command that unsets them.
    TableSetting {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// The latest version, whose config was read.
        version: u64,
        /// The settings in effect, as `` `key=value` `` items joined by `, `.
        setting: String,
        /// What they do, and the command that unsets them.
        reason: String,
    },
}

impl LineageProblem {
    /// The problem's kind: a stable snake_case name of its variant (`missing_sidecar`,
    /// `branch`, ...), for callers that act on a kind rather than parse the message.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::MissingSidecar { .. } => "missing_sidecar",
            Self::UndecodableSidecar { .. } => "undecodable_sidecar",
            Self::ParentGap { .. } => "parent_gap",
            Self::VersionMismatch { .. } => "version_mismatch",
            Self::Inconsistent { .. } => "inconsistent",
            Self::UnregisteredDataset { .. } => "unregistered_dataset",
            Self::UncommittedDataset { .. } => "uncommitted_dataset",
            Self::RegistryAhead { .. } => "registry_ahead",
            Self::JournalBeyondLatest { .. } => "journal_beyond_latest",
            Self::WentBackwards { .. } => "went_backwards",
            Self::VersionReappeared { .. } => "version_reappeared",
            Self::JournalRewritten { .. } => "journal_rewritten",
            Self::TableVanished { .. } => "table_vanished",
            Self::Branch { .. } => "branch",
            Self::ExternalBase { .. } => "external_base",
            Self::Detached { .. } => "detached",
            Self::UnreadableColumns { .. } => "unreadable_columns",
            Self::UnboundEntry { .. } => "unbound_entry",
            Self::EntryOfAnotherVersion { .. } => "entry_of_another_version",
            Self::ManifestChanged { .. } => "manifest_changed",
            Self::TableSetting { .. } => "table_setting",
        }
    }
}

impl fmt::Display for LineageProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingSidecar { table, version } => write!(f, "table `{table}` version {version} has no reference sidecar: if a writer is still running on the table, it is between its Lance commit and its journal entry (run the same command again once it has finished; do not repair while it runs); if none is, run `refs recover` first (a version a lake writer committed before it crashed is journaled from its write intent or from the lake's marker in its Lance transaction, without a scan; the next write to the table does the same); a version written around the engine (another Lance client) needs `refs repair` (table `{table}`, version {version})"),
            Self::UndecodableSidecar { table, version, reason } => write!(f, "table `{table}` version {version}: sidecar cannot be decoded: {reason}"),
            Self::ParentGap { table, version, needed_by } => write!(f, "table `{table}` version {version} has no sidecar, but replaying version {needed_by} needs it"),
            Self::VersionMismatch { table, file, reason } => write!(f, "table `{table}` sidecar file `{file}`: {reason}"),
            Self::Inconsistent { table, version, reason } => write!(f, "table `{table}` journal is inconsistent at version {version}: {reason}"),
            Self::UnregisteredDataset { path } => write!(f, "dataset `{path}` is under the lake's tables but not in the registry; its references are unknown. A first write to it killed after its commit and before its journal entry leaves this: `refs recover` journals the version that landed and registers the table (nothing to remove). Removing the folder deletes the table's versions: do it only for a folder that is not a table lake wrote"),
            Self::UncommittedDataset { table, path, intent: None } => write!(f, "table `{table}`: dataset folder `{path}` has no version and is not registered: the files of a first write to `{table}` that never committed (killed?); no version references them. Remove them with `cleanup` of table `{table}`, removing files older than a duration longer than any write to `{table}` that may still be running"),
            Self::UncommittedDataset { table, path, intent: Some(intent) } => write!(f, "table `{table}`: dataset folder `{path}` has no version yet and a write to `{table}` may still land (write intent `{intent}`); plan again once it has landed or been resolved"),
            Self::RegistryAhead { table, registry, latest } => write!(f, "table `{table}`: the registry pins version {registry} but the dataset's latest version is {latest}: the dataset went backwards (restored from a backup?); restore its missing versions, or recreate the table"),
            Self::JournalBeyondLatest { table, version, latest } => write!(f, "table `{table}` has a journal entry for version {version} but the dataset's latest version is {latest}: the dataset went backwards under its journal; restore the dataset's versions, or move the journal entries above {latest} aside"),
            Self::WentBackwards { table, was, now } => write!(f, "table `{table}` was at version {was} when the plan was made and is at version {now} now: the dataset went backwards; nothing more is deleted, plan again once it is repaired"),
            Self::VersionReappeared { table, version } => write!(f, "table `{table}` version {version} exists now but did not when the plan was made (restored from a backup?); plan again"),
            Self::JournalRewritten { table, upto } => write!(f, "table `{table}`: the journal of versions up to {upto} changed since the plan was made (an entry rewritten, removed or added late); plan again"),
            Self::TableVanished { table } => write!(f, "table `{table}` of the plan was deleted since the plan was made (it is no longer registered, or its dataset is gone: a branch deleted while apply ran?); nothing more is deleted by this apply: plan again"),
            Self::Branch { table, branch } => write!(f, "table `{table}` has a Lance branch `{branch}` (made by another Lance client): its versions are not journaled and may reference objects; delete the branch (and create it with `branch create`), or move the table out of the lake"),
            Self::ExternalBase { table, path } => write!(f, "table `{table}` reads files from `{path}`, outside its dataset folder (a shallow clone or an added base path): lake cannot see the references there"),
            Self::UnreadableColumns { table, version, reason } => write!(f, "table `{table}` version {version}: {reason}"),
            Self::UnboundEntry { table, version } => write!(f, "table `{table}` version {version}: its journal entry was written by an earlier lake build (sidecar format 3) and records nothing of the Lance version it describes, so it cannot be told from an entry of another table's version {version}; run `refs bind` on table `{table}` (it compares the journal with full scans and binds the entries that match)"),
            Self::EntryOfAnotherVersion { table, version, expected, found } => write!(f, "table `{table}` version {version}: its journal entry was written for {expected}, but the table's version {version} is {found}: the table's Lance files were replaced under its journal (copied from another table or another backup), or a write suspended before its manifest write landed it in the number of a version `cleanup` removed (docs/protocol.md, \"Cleanup and late manifests\"); nothing of this table is deleted. For a late manifest below the latest version, `cleanup` removes it again; otherwise put back the table's own Lance files (`_versions`, `data`, `_transactions`, `_deletions`, `_indices`), or, if these files are meant to be the table now, run `refs bind` on table `{table}` (it binds the entries only where full scans match the journal)"),
            Self::ManifestChanged { table, version, was, now } => write!(f, "table `{table}` version {version}: its Lance manifest is another file now (size:e-tag {now}) than when the plan was made ({was}): the table's Lance files were replaced or copied back since; nothing more is deleted, plan again"),
            Self::Detached { table, version } => write!(f, "table `{table}` has a detached version {version} (made by another Lance client): it can be checked out and restored, and is not journaled; delete it from `_versions/`, or move the table out of the lake"),
            Self::TableSetting { table, version, setting, reason } => write!(f, "table `{table}` version {version} sets {setting}: {reason}"),
        }
    }
}

/// The lineage of one table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableLineage {
    /// Table name.
    pub table: String,
    /// Latest version of the dataset.
    pub latest_version: u64,
    /// Every version that still exists, ascending.
    pub retained: Vec<u64>,
    /// The version replay starts from (a snapshot or version 1), when the chain reaches one.
    pub replay_base: Option<u64>,
    /// Problems; empty when the journal covers every retained version.
    pub problems: Vec<LineageProblem>,
    /// The lineage as the listings that were read showed it (what a plan binds).
    pub stamp: crate::stamp::LineageStamp,
}

impl TableLineage {
    /// True when GC may trust this table's journal.
    pub fn is_complete(&self) -> bool {
        self.problems.is_empty()
    }

    /// The version replay starts from, for a complete lineage.
    ///
    /// # Errors
    /// [`crate::EngineError::Lineage`] with the lineage's problems, or a parent gap at version 1
    /// when the chain reaches no base.
    pub fn complete_base(&self) -> Result<u64, crate::EngineError> {
        let table = self.table.clone();
        if !self.problems.is_empty() {
            return Err(crate::EngineError::Lineage { table, problems: self.problems.clone() });
        }
        self.replay_base.ok_or_else(|| crate::EngineError::Lineage {
            table: table.clone(),
            problems: vec![LineageProblem::ParentGap { table, version: 1, needed_by: self.latest_version }],
        })
    }
}

/// Checks that the sidecars cover `retained`: walking down from `latest`, every version down
/// to the replay base (the newest snapshot at or below the oldest retained version, or version
/// 1) must have a decodable sidecar.
///
/// `sidecars` maps a version to its decoded sidecar or decode error. Returns the replay base
/// (when reached) and the problems, in descending version order.
pub fn check_chain(
    table: &str,
    retained: &[u64],
    latest: u64,
    sidecars: &BTreeMap<u64, Result<ObjectReferenceDelta, DecodeError>>,
) -> (Option<u64>, Vec<LineageProblem>) {
    check_chain_by(table, retained, latest, |v| {
        sidecars.get(&v).map(|entry| entry.as_ref().map(|d| d.kind).map_err(|e| e.to_string()))
    })
}

/// [`check_chain`] over what it needs of each version: `entry(v)` is `None` when version `v`
/// has no sidecar, its kind when it decodes, or the decode error as a sentence. Lets a caller
/// that streams the journal (and keeps only each version's kind) check the same rules.
pub fn check_chain_by(
    table: &str,
    retained: &[u64],
    latest: u64,
    entry: impl Fn(u64) -> Option<Result<DeltaKind, String>>,
) -> (Option<u64>, Vec<LineageProblem>) {
    let mut problems = Vec::new();
    let oldest_retained = retained.first().copied().unwrap_or(latest);
    let mut base = None;
    let mut v = latest;
    while v >= 1 {
        match entry(v) {
            None => {
                if retained.binary_search(&v).is_ok() {
                    problems.push(LineageProblem::MissingSidecar { table: table.into(), version: v });
                } else {
                    problems.push(LineageProblem::ParentGap { table: table.into(), version: v, needed_by: v + 1 });
                }
            }
            Some(Err(reason)) => {
                problems.push(LineageProblem::UndecodableSidecar { table: table.into(), version: v, reason })
            }
            Some(Ok(kind)) => {
                if v <= oldest_retained && (kind == DeltaKind::Snapshot || v == 1) {
                    base = Some(v);
                    break;
                }
            }
        }
        if v == 1 {
            break;
        }
        v -= 1;
    }
    (base, problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lake_common::ReferenceCounts;

    fn ok(v: u64) -> Result<ObjectReferenceDelta, DecodeError> {
        Ok(ObjectReferenceDelta::empty("t", v))
    }

    #[test]
    fn complete_chain_reaches_version_one() {
        let s: BTreeMap<_, _> = (1..=4).map(|v| (v, ok(v))).collect();
        assert_eq!(check_chain("t", &[3, 4], 4, &s), (Some(1), vec![]));
    }

    #[test]
    fn a_snapshot_at_or_below_the_oldest_retained_version_is_a_base() {
        let mut s: BTreeMap<_, _> = (3..=4).map(|v| (v, ok(v))).collect();
        s.insert(2, Ok(ObjectReferenceDelta::snapshot("t", 2, &ReferenceCounts::new())));
        assert_eq!(check_chain("t", &[3, 4], 4, &s), (Some(2), vec![]));
    }

    #[test]
    fn missing_retained_and_gap_versions_are_named() {
        let mut s: BTreeMap<_, _> = [(1, ok(1)), (4, ok(4))].into_iter().collect();
        s.insert(2, Err(DecodeError::ZeroVersion));
        let (base, problems) = check_chain("t", &[3, 4], 4, &s);
        assert_eq!(base, Some(1));
        assert_eq!(
            problems,
            vec![
                LineageProblem::MissingSidecar { table: "t".into(), version: 3 },
                LineageProblem::UndecodableSidecar {
                    table: "t".into(),
                    version: 2,
                    reason: DecodeError::ZeroVersion.to_string()
                },
            ]
        );
        s.remove(&2);
        let (_, problems) = check_chain("t", &[3, 4], 4, &s);
        assert!(problems.contains(&LineageProblem::ParentGap { table: "t".into(), version: 2, needed_by: 3 }));
    }
}
