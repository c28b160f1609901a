//! What a table's lineage is at one moment, and the rules for how it may move on.
//!
//! A plan is made against one moment of every table's lineage; apply deletes at a later one.
//! Between the two, the lineage may only have moved forward: new versions on top of the latest
//! (whose additions apply then revalidates), and old versions removed by version cleanup (which
//! makes nothing live). Anything else means the table is not the one the plan saw, and apply
//! stops with a named problem instead of trusting a version number:
//! - the latest version is below the plan's (a dataset folder restored from a backup);
//! - a version at or below the plan's latest is retained now but was not then (a version that
//!   reappeared);
//! - a journal file at or below the plan's latest differs (rewritten, removed, or added late),
//!   judged by the store's own metadata of every journal file (size, ETag, last-modified);
//! - the registry pins a version above the dataset's latest (the table went backwards), or a
//!   journal file exists for a version above the latest (also checked when planning);
//! - the table has rows the journal cannot cover: a branch, a base path outside the dataset,
//!   a column lake cannot read (also checked when planning);
//! - a version retained then and now has another manifest file (size or e-tag, from the
//!   version listing): the table's Lance files were swapped under its journal
//!   ([`LineageProblem::ManifestChanged`]). A new version's journal entry is checked against its
//!   manifest by the engine before its additions are read (`Engine::references_added_between`).
//!
//! A [`LineageStamp`] is read from listings only (versions, registry, journal folder), so apply
//! can take one before every group of deletes; a [`LineageBasis`] is the part of it a plan
//! records.

use crate::lineage::LineageProblem;
use lake_common::ManifestIdentity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A table's lineage at one moment, from listings only.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LineageStamp {
    /// The latest version of the dataset.
    pub latest_version: u64,
    /// Every version that still exists, ascending.
    pub retained: Vec<u64>,
    /// The manifest file of every retained version as the version listing showed it (size and
    /// e-tag; no manifest is read).
    pub manifests: BTreeMap<u64, ManifestIdentity>,
    /// The version the table registry pins, when the table is registered.
    pub registry_version: Option<u64>,
    /// Every journal file by version: an opaque identity from the store's metadata (for
    /// example `size:etag:last_modified`); equal identities mean an unchanged file.
    pub journal: BTreeMap<u64, String>,
    /// Problems of the table's structure the listings show: rows the journal cannot cover (a
    /// branch, a base path outside the dataset, a column lake cannot read). Apply stops on
    /// them as planning does, also when they appear after the plan.
    pub structure: Vec<LineageProblem>,
}

/// SHA-256 of the identities of the journal files at versions up to `upto`, hex.
fn journal_digest(journal: &BTreeMap<u64, String>, upto: u64) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for (version, identity) in journal.range(..=upto) {
        hasher.update(format!("{version}\t{identity}\n").as_bytes());
    }
    hex::encode(hasher.finalize())
}

impl LineageStamp {
    /// Problems the stamp shows on its own: its structure's, a registry pin above the latest
    /// version, and journal files for versions above it (a dataset that went backwards under
    /// its journal).
    pub fn problems(&self, table: &str) -> Vec<LineageProblem> {
        let mut problems = self.structure.clone();
        if let Some(pinned) = self.registry_version.filter(|p| *p > self.latest_version) {
            problems.push(LineageProblem::RegistryAhead {
                table: table.into(),
                registry: pinned,
                latest: self.latest_version,
            });
        }
        if let Some((&version, _)) = self.journal.range(self.latest_version.saturating_add(1)..).next() {
            problems.push(LineageProblem::JournalBeyondLatest {
                table: table.into(),
                version,
                latest: self.latest_version,
            });
        }
        problems
    }
}

/// The moment of a table's lineage a plan (or an apply's last check) was made against.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LineageBasis {
    /// Latest version then.
    pub version: u64,
    /// Versions retained then, ascending.
    pub retained: Vec<u64>,
    /// SHA-256 of the identities of the journal files at versions up to `version`.
    pub journal_sha256: String,
    /// The manifest file of every version in `retained` (`size:e-tag`, [`ManifestIdentity`]'s
    /// display form), by version.
    pub manifests: BTreeMap<u64, String>,
}

impl LineageBasis {
    /// The basis of a stamp.
    pub fn of(stamp: &LineageStamp) -> Self {
        Self {
            version: stamp.latest_version,
            retained: stamp.retained.clone(),
            journal_sha256: journal_digest(&stamp.journal, stamp.latest_version),
            manifests: stamp.manifests.iter().map(|(v, m)| (*v, m.to_string())).collect(),
        }
    }

    /// The basis of a table that did not exist then (every version of it is new).
    pub fn empty() -> Self {
        Self {
            version: 0,
            retained: Vec::new(),
            journal_sha256: journal_digest(&BTreeMap::new(), 0),
            manifests: BTreeMap::new(),
        }
    }

    /// Whether `now` moved only forward from this basis (see the module documentation):
    /// every problem found, empty when it did. The versions in `(self.version, now.latest]`
    /// are the ones whose additions must then be revalidated.
    pub fn check_forward(&self, table: &str, now: &LineageStamp) -> Vec<LineageProblem> {
        let mut problems = now.problems(table);
        if now.latest_version < self.version {
            problems.push(LineageProblem::WentBackwards {
                table: table.into(),
                was: self.version,
                now: now.latest_version,
            });
            return problems;
        }
        if let Some(&version) =
            now.retained.iter().find(|v| **v <= self.version && self.retained.binary_search(v).is_err())
        {
            problems.push(LineageProblem::VersionReappeared { table: table.into(), version });
        }
        if journal_digest(&now.journal, self.version) != self.journal_sha256 {
            problems.push(LineageProblem::JournalRewritten { table: table.into(), upto: self.version });
        }
        // Versions cleaned up since have no manifest now: only those retained then and now.
        for (version, was) in &self.manifests {
            if let Some(now) = now.manifests.get(version).map(ToString::to_string).filter(|now| now != was) {
                problems.push(LineageProblem::ManifestChanged {
                    table: table.into(),
                    version: *version,
                    was: was.clone(),
                    now,
                });
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(latest: u64, retained: &[u64], journal: &[(u64, &str)]) -> LineageStamp {
        LineageStamp {
            latest_version: latest,
            retained: retained.to_vec(),
            manifests: retained
                .iter()
                .map(|v| (*v, ManifestIdentity { size: *v, e_tag: Some(format!("m{v}")) }))
                .collect(),
            registry_version: Some(latest),
            journal: journal.iter().map(|(v, s)| (*v, s.to_string())).collect(),
            structure: Vec::new(),
        }
    }

    #[test]
    fn only_forward_moves_and_cleanups_pass() {
        let then = stamp(3, &[1, 2, 3], &[(1, "a"), (2, "b"), (3, "c")]);
        let basis = LineageBasis::of(&then);
        assert!(basis.check_forward("t", &then).is_empty());
        // New versions on top, old ones cleaned up: forward.
        let later = stamp(5, &[3, 4, 5], &[(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]);
        assert!(basis.check_forward("t", &later).is_empty());
        // Restored from a backup: the latest went down and the registry is ahead.
        let restored = LineageStamp { registry_version: Some(3), ..stamp(2, &[1, 2], &[(1, "a"), (2, "b")]) };
        let problems = basis.check_forward("t", &restored);
        assert!(problems.iter().any(|p| matches!(p, LineageProblem::WentBackwards { was: 3, now: 2, .. })));
        assert!(problems.iter().any(|p| matches!(p, LineageProblem::RegistryAhead { registry: 3, latest: 2, .. })));
        // A journal file rewritten (same version, other identity), or one left above the latest.
        let rewritten = stamp(3, &[1, 2, 3], &[(1, "a"), (2, "B"), (3, "c")]);
        assert!(matches!(basis.check_forward("t", &rewritten)[..], [LineageProblem::JournalRewritten { upto: 3, .. }]));
        let branched = LineageStamp {
            structure: vec![LineageProblem::Branch { table: "t".into(), branch: "dev".into() }],
            ..then.clone()
        };
        assert!(matches!(basis.check_forward("t", &branched)[..], [LineageProblem::Branch { .. }]));
        let beyond = stamp(3, &[1, 2, 3], &[(1, "a"), (2, "b"), (3, "c"), (4, "x")]);
        assert!(matches!(
            basis.check_forward("t", &beyond)[..],
            [LineageProblem::JournalBeyondLatest { version: 4, .. }]
        ));
        // A version that reappeared below the basis.
        let cleaned = LineageBasis::of(&stamp(3, &[3], &[(1, "a"), (2, "b"), (3, "c")]));
        assert!(matches!(
            cleaned.check_forward("t", &stamp(3, &[2, 3], &[(1, "a"), (2, "b"), (3, "c")]))[..],
            [LineageProblem::VersionReappeared { version: 2, .. }]
        ));
        // A retained version's manifest replaced (another table's files copied in): named, and
        // a version cleaned up since (no manifest now) is not.
        let mut swapped = stamp(3, &[2, 3], &[(1, "a"), (2, "b"), (3, "c")]);
        swapped.manifests.insert(3, ManifestIdentity { size: 3, e_tag: Some("other".into()) });
        assert!(matches!(basis.check_forward("t", &swapped)[..], [LineageProblem::ManifestChanged { version: 3, .. }]));
    }
}
