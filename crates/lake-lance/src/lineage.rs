//! The lineage of one table as Lance and the journal show it: its retained versions, its journal
//! entries, its [`LineageStamp`], and every problem that makes GC refuse.
//!
//! Listings are read in the reverse of the order a commit writes (the Lance version, then its
//! sidecar, then the registry's pin): registry, then versions, then the journal folder. So a
//! concurrent commit can add a sidecar beyond the versions listed, never a pin: a sidecar
//! beyond the latest version is taken for a concurrent commit only when a second listing of the
//! versions shows it; otherwise the dataset went backwards ([`LineageProblem::JournalBeyondLatest`]).
//!
//! Besides the journal's own gaps and decode errors, the dataset's structure is checked: rows
//! the journal of this table cannot cover are a named problem, never skipped:
//! - a Lance branch the engine does not journal (made by another client: `_refs/branches/*.json`
//!   not registered as `table@branch`, or a `tree/` folder a stopped `create_branch`
//!   left): its versions are not journaled ([`LineageProblem::Branch`]);
//! - a base path outside the dataset folder in the latest manifest (a shallow clone, or
//!   `add_bases`), or on a local root a symbolic link among the dataset's own folders
//!   ([`LineageProblem::ExternalBase`]);
//! - a detached version (`_versions/d<n>.manifest`, made with `CommitBuilder::with_detached`):
//!   it can be checked out and restored but no version listing shows it
//!   ([`LineageProblem::Detached`]);
//! - a column of the latest schema that lake cannot read references from with certainty
//!   (`lake_common::ReferenceColumns`) ([`LineageProblem::UnreadableColumns`]);
//! - a setting in the latest version's config that lets Lance remove versions on its own
//!   (auto-cleanup, [`crate::settings`]) ([`LineageProblem::TableSetting`]).

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::refs_checkpoint;
use crate::scan::reference_columns;
use crate::sidecar::{self, JournalListing};
use lake_common::{DecodeError, DeltaKind};
use lake_engine::{check_chain_by, LineageProblem, LineageStamp, TableLineage};
use lake_store::layout::dataset_key;
use lake_store::registry;
use lance::Dataset;
use std::collections::BTreeMap;

/// The folder (under a dataset) where Lance 14 keeps branch documents.
const BRANCH_REFS: &str = "_refs/branches";
/// The folder (under a dataset) where Lance 14 keeps each branch's own dataset.
const BRANCH_TREE: &str = "tree";
/// The folders a branch's dataset folder may hold: Lance 14's own (versions, data, deletion
/// vectors, indexes, transactions, refs, blobs, fragment reuse, MemWAL) and the engine's journal.
const BRANCH_DATASET_FOLDERS: [&str; 10] =
    ["_versions", "data", "_deletions", "_indices", "_transactions", "_refs", "_blobs", "_fri", "_mem_wal", "_lake"];

/// A table's versions as one listing showed them ([`LanceEngine::retained_versions`]).
pub(crate) struct Retained {
    /// Every version that still exists, ascending.
    pub retained: Vec<u64>,
    /// Their manifest files, by version.
    pub manifests: BTreeMap<u64, lake_common::ManifestIdentity>,
    /// The latest version.
    pub latest: u64,
    /// The dataset at its latest version.
    pub ds: Dataset,
}

/// A table at one moment: its stamp (with its structural problems), and its journal listing (entries
/// beyond the latest version of a concurrent commit left out).
pub(crate) struct Observed {
    pub stamp: LineageStamp,
    pub journal: JournalListing,
    /// The dataset at its latest version when the versions were listed.
    pub ds: Dataset,
}

impl LanceEngine {
    /// The versions of `table` that still exist (ascending; Lance's manifest listing read
    /// through the lake's store, `crate::binding::list_manifests`: one LIST per 1000 versions
    /// on S3, no manifest read) with each one's manifest file (size and e-tag), its latest
    /// version, and the dataset at it.
    ///
    /// # Errors
    /// Lance and storage errors; [`LanceEngineError::NoSuchTable`].
    pub(crate) async fn retained_versions(&self, table: &str) -> Result<Retained, LanceEngineError> {
        let ds = self.open(table).await?;
        let manifests = crate::binding::list_manifests(self.store(), table).await?;
        let retained: Vec<u64> = manifests.keys().copied().collect();
        let latest = ds.version().version.max(retained.last().copied().unwrap_or(0));
        Ok(Retained { retained, manifests, latest, ds })
    }

    /// Reads `table`'s registry pin, versions and journal listing, in that order (see the module
    /// documentation).
    ///
    /// # Errors
    /// Storage and Lance errors.
    pub(crate) async fn observe(&self, table: &str) -> Result<Observed, LanceEngineError> {
        let registry_version = registry::current(self.store(), table).await?.map(|e| e.version);
        let Retained { retained, manifests, latest, ds } = self.retained_versions(table).await?;
        let mut journal = sidecar::list(self.store(), table).await?;
        if let Some((&beyond, _)) = journal.files.range(latest + 1..).next_back() {
            // Committed since the versions were listed, or left by a dataset that went back?
            let now = self.retained_versions(table).await?.latest;
            if now >= beyond {
                journal.files.retain(|v, _| *v <= latest);
            }
        }
        // Versions from the oldest retained on without a sidecar: another client's (or an
        // interrupted) content-preserving commit is an implied empty entry.
        let oldest = retained.first().copied().unwrap_or(latest);
        crate::foreign::imply_entries(&ds, table, self.store().root(), &mut journal, oldest..=latest).await;
        let structure = self.structure_problems(&ds, table).await?;
        let stamp = LineageStamp {
            latest_version: latest,
            retained,
            manifests,
            registry_version,
            journal: journal.identities(),
            structure,
        };
        Ok(Observed { stamp, journal, ds })
    }

    /// The problems of `ds`'s structure (see the module documentation): branches, base paths
    /// outside the dataset folder, unreadable columns of its schema.
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn structure_problems(
        &self,
        ds: &Dataset,
        table: &str,
    ) -> Result<Vec<LineageProblem>, LanceEngineError> {
        let mut problems = Vec::new();
        let base = dataset_key(table);
        // Branches the engine journals (registered lineages `table@branch`) are lineages of their
        // own; any other branch document or `tree/` folder is a problem.
        let registered = self.branches(table).await?;
        let (_, documents) = self.store().list_dir(&format!("{base}/{BRANCH_REFS}")).await?;
        let mut documented = Vec::new();
        for meta in documents {
            let name = meta.location.filename().unwrap_or_default();
            let branch = name.strip_suffix(".json").unwrap_or(name);
            let branch = percent_encoding::percent_decode_str(branch).decode_utf8_lossy().into_owned();
            if !registered.contains(&branch) {
                problems.push(LineageProblem::Branch { table: table.into(), branch: branch.clone() });
            }
            documented.push(branch);
        }
        let (folders, files) = self.store().list_dir(&format!("{base}/{BRANCH_TREE}")).await?;
        for folder in folders {
            // `tree/<a>` holds branch `a`, or `a/b` (a name with `/` is nested folders).
            let branch = folder.trim_end_matches('/').rsplit('/').next().unwrap_or(&folder).to_string();
            let known = documented.iter().any(|b| *b == branch || b.starts_with(&format!("{branch}/")));
            if !known {
                problems.push(LineageProblem::Branch { table: table.into(), branch });
            }
        }
        if !files.is_empty() {
            problems.push(LineageProblem::Branch { table: table.into(), branch: format!("{BRANCH_TREE}/ (files)") });
        }
        // A branch's own folder holds Lance's folders and the journal; anything else (the dataset
        // of a nested branch `b/z`, its document lost or never written) is a branch GC cannot see.
        if let (main, Some(branch)) = lake_store::layout::split_lineage(table) {
            let (folders, _) = self.store().list_dir(&base).await?;
            for folder in folders {
                let name = folder.trim_end_matches('/').rsplit('/').next().unwrap_or(&folder);
                if !BRANCH_DATASET_FOLDERS.contains(&name) {
                    problems.push(LineageProblem::Branch { table: main.into(), branch: format!("{branch}/{name}") });
                }
            }
        }
        // Detached versions (`_versions/d<n>.manifest`, `CommitBuilder::with_detached`): checked
        // out and restored like any version, listed by no `version_refs`.
        let detached = ds.list_detached_manifests().await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "list detached versions",
            source,
        })?;
        for d in detached {
            problems.push(LineageProblem::Detached { table: table.into(), version: d.version });
        }
        // On a local root, a link in the dataset's own folders (its data moved under
        // `objects/` and linked back, say) puts files the table needs where GC may delete them.
        if let Some(dir) = self.store().local_dir() {
            for folder in [dir.join(lake_store::layout::TABLES_PREFIX), dir.join(&base)] {
                if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink()) {
                    problems.push(LineageProblem::ExternalBase {
                        table: table.into(),
                        path: format!("{} (a symbolic link)", folder.display()),
                    });
                }
            }
            if let Ok(entries) = std::fs::read_dir(dir.join(&base)) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                        let path = entry.path().display().to_string();
                        problems.push(LineageProblem::ExternalBase {
                            table: table.into(),
                            path: format!("{path} (a symbolic link)"),
                        });
                    }
                }
            }
        }
        let mut bases: Vec<&str> = ds.manifest().base_paths.values().map(|b| b.path.as_str()).collect();
        bases.sort_unstable();
        // A registered branch's base is its table's own folder (Lance's shallow clone).
        let own_table = lake_store::layout::split_lineage(table)
            .1
            .map(|_| self.dataset_uri(lake_store::layout::split_lineage(table).0));
        for path in bases {
            if own_table.as_deref().is_some_and(|own| same_location(own, path)) {
                continue;
            }
            problems.push(LineageProblem::ExternalBase { table: table.into(), path: path.to_string() });
        }
        problems.extend(crate::settings::setting_problems(table, ds.version().version, &ds.manifest().config));
        if let Err(e) = reference_columns(ds, table) {
            problems.push(LineageProblem::UnreadableColumns {
                table: table.into(),
                version: ds.version().version,
                reason: e.to_string(),
            });
        }
        Ok(problems)
    }

    /// The lineage of `table`, streaming every journal entry it reads into `sink` in ascending
    /// version order (see [`sidecar::EntrySink`]), without keeping them: the entries from the
    /// replay's start on. With `use_checkpoint`, a valid reference checkpoint at version C is
    /// streamed first as C's entry (a snapshot), and sidecars up to C are not read.
    ///
    /// Every retained version's entry read from a sidecar (or the checkpoint standing in for
    /// it) is checked against the version's manifest (`crate::binding::check_entries`): an
    /// entry that records nothing of its version, or was written for another one, is a problem.
    ///
    /// # Errors
    /// Storage and Lance errors, and whatever `sink` returns.
    pub(crate) async fn read_lineage(
        &self,
        table: &str,
        use_checkpoint: bool,
        sink: &mut dyn sidecar::EntrySink,
    ) -> Result<TableLineage, LanceEngineError> {
        let Observed { stamp, journal, ds } = self.observe(table).await?;
        let (retained, latest) = (stamp.retained.clone(), stamp.latest_version);
        let oldest = retained.first().copied().unwrap_or(latest);
        let checkpoint = match use_checkpoint {
            true => refs_checkpoint::load_valid(self.store(), table, oldest, latest).await?,
            false => None,
        };
        let mut recording = Recording {
            inner: sink,
            kinds: BTreeMap::new(),
            bindings: BTreeMap::new(),
            journal: &journal,
            manifests: &stamp.manifests,
        };
        let from = match checkpoint {
            Some(c) => {
                let at = c.version();
                c.stream_into(self.store(), table, &mut recording).await?;
                at + 1
            }
            None => 1,
        };
        sidecar::stream_listed(self.store(), table, &journal, from..=latest, &mut recording).await?;
        let Recording { kinds, bindings, .. } = recording;
        let mut problems = journal.problems.clone();
        let (replay_base, chain_problems) = check_chain_by(table, &retained, latest, |v| kinds.get(&v).cloned());
        problems.extend(chain_problems);
        problems.extend(crate::binding::check_entries(&ds, table, &stamp.manifests, &bindings).await?);
        problems.extend(stamp.problems(table));
        Ok(TableLineage { table: table.into(), latest_version: latest, retained, replay_base, problems, stamp })
    }
}

/// The sink [`LanceEngine::read_lineage`] puts in front of its caller's: it keeps each version's
/// kind (or decode error) for the chain check, and the binding each retained version's written
/// entry records (implied entries are judged from the version's own transaction: nothing to
/// bind).
struct Recording<'a> {
    inner: &'a mut dyn sidecar::EntrySink,
    kinds: BTreeMap<u64, Result<DeltaKind, String>>,
    bindings: BTreeMap<u64, Option<lake_common::VersionBinding>>,
    journal: &'a JournalListing,
    manifests: &'a BTreeMap<u64, lake_common::ManifestIdentity>,
}

impl sidecar::EntrySink for Recording<'_> {
    fn begin(&mut self, head: &sidecar::EntryHead) -> Result<(), LanceEngineError> {
        self.inner.begin(head)
    }

    fn reference(
        &mut self,
        version: u64,
        list: lake_common::EntryList,
        identity: lake_common::ObjectIdentity,
        count: u64,
    ) -> Result<(), LanceEngineError> {
        self.inner.reference(version, list, identity, count)
    }

    fn range(&self) -> Option<&lake_engine::UriRange> {
        self.inner.range()
    }

    fn read_bytes(&mut self, bytes: u64) {
        self.inner.read_bytes(bytes);
    }

    fn end(&mut self, version: u64, entry: Result<sidecar::EntryHead, DecodeError>) -> Result<(), LanceEngineError> {
        self.kinds.insert(version, entry.as_ref().map(|h| h.kind).map_err(|e| e.to_string()));
        if let Ok(head) = &entry {
            if !self.journal.implied.contains_key(&version) && self.manifests.contains_key(&version) {
                self.bindings.insert(version, head.binding.clone());
            }
        }
        self.inner.end(version, entry)
    }
}

/// Whether a base path Lance recorded names the dataset at `uri` (`file:///p` and `/p` alike,
/// a trailing slash ignored).
fn same_location(uri: &str, base: &str) -> bool {
    let strip = |s: &str| {
        let s = s.strip_prefix("file://").unwrap_or(s);
        s.trim_end_matches('/').to_string()
    };
    strip(uri) == strip(base)
}
