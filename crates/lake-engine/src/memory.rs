//! [`MemoryEngine`]: an in-memory [`Engine`] for planner tests.
//!
//! It keeps the true content of every version beside the journal, so tests can compare the
//! journal's answer with the truth, and it can be told to misbehave (commit without a sidecar,
//! corrupt a sidecar) to exercise fail-closed paths.

use crate::error::EngineError;
use crate::journal::{added_between, live_set_of, removed_between, Sidecars};
use crate::lineage::{check_chain, TableLineage};
use crate::stamp::LineageStamp;
use crate::{Engine, IdentityStream, Removals, RetainedRoots, TableLocation, TableSet, TableSnapshot, UriRange};
use async_trait::async_trait;
use lake_common::{DecodeError, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

#[derive(Debug, Default)]
struct MemTable {
    /// True content of every version that still exists.
    versions: BTreeMap<u64, ReferenceCounts>,
    sidecars: Sidecars,
    latest: u64,
    current: ReferenceCounts,
    /// The reference checkpoint a cleanup wrote (as Lance's engine does): the snapshot entry of
    /// version C that stands in for C's sidecar, and the canonical bytes of that sidecar when it
    /// was written. While valid, a snapshot's lineage reads no entry before C (they stay in the
    /// journal: [`Engine::references_removed_between`] reads them).
    checkpoint: Option<(ObjectReferenceDelta, Vec<u8>)>,
}

/// An in-memory engine: tables of reference counts with a journal.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    tables: Mutex<BTreeMap<String, MemTable>>,
    /// Write intents with the references each names, by key.
    intents: Mutex<BTreeMap<String, (crate::IntentInfo, Vec<ObjectIdentity>)>>,
    /// Intents recorded so far (each one's key is unique, whatever was removed since).
    intents_made: std::sync::atomic::AtomicU64,
}

impl MemoryEngine {
    /// An engine with no tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a write intent of `table` naming `references` (what an engine writes before a
    /// commit that may land late); returns its key.
    pub fn add_intent(&self, table: &str, references: Vec<ObjectIdentity>) -> String {
        let mut guard = self.intents.lock().unwrap_or_else(|p| p.into_inner());
        let n = self.intents_made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = format!("_lake/intents/{table}/{n:026}.json");
        let info = crate::IntentInfo {
            key: key.clone(),
            table: table.to_string(),
            operation: "append".into(),
            last_modified_ms: 0,
            deadline_ms: 0,
            references: references.len() as u64,
        };
        guard.insert(key.clone(), (info, references));
        key
    }

    /// Removes the write intent `key` (its commit was journaled or can no longer land).
    pub fn remove_intent(&self, key: &str) {
        self.intents.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    fn with_table<R>(&self, table: &str, f: impl FnOnce(&mut MemTable) -> R) -> R {
        let mut guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        f(guard.entry(table.to_string()).or_default())
    }

    fn with_existing_table(&self, table: &str, f: impl FnOnce(&mut MemTable)) {
        let mut guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = guard.get_mut(table) {
            f(t);
        }
    }

    fn commit(&self, table: &str, added: &ReferenceCounts, removed: &ReferenceCounts, journal: bool) -> u64 {
        self.with_table(table, |t| {
            let v = t.latest + 1;
            let mut next = ReferenceCounts::new();
            for (id, n) in t.current.iter() {
                let left = n.saturating_sub(removed.get(id));
                next.add(id.clone(), left);
            }
            next.merge(added);
            t.current = next.clone();
            t.versions.insert(v, next);
            t.latest = v;
            if journal {
                t.sidecars.insert(v, Ok(ObjectReferenceDelta::delta(table, v, added, removed)));
            }
            v
        })
    }

    /// Appends one reference per element of `refs`; returns the new version.
    pub fn append(&self, table: &str, refs: &[ObjectIdentity]) -> u64 {
        self.commit(table, &refs.iter().cloned().collect(), &ReferenceCounts::new(), true)
    }

    /// Removes one reference per element of `refs` (as deleting rows does); returns the version.
    pub fn delete(&self, table: &str, refs: &[ObjectIdentity]) -> u64 {
        self.commit(table, &ReferenceCounts::new(), &refs.iter().cloned().collect(), true)
    }

    /// A content-preserving version (compaction) with an empty delta.
    pub fn compact(&self, table: &str) -> u64 {
        self.commit(table, &ReferenceCounts::new(), &ReferenceCounts::new(), true)
    }

    /// Appends without writing a sidecar: a version written around the engine.
    pub fn append_without_sidecar(&self, table: &str, refs: &[ObjectIdentity]) -> u64 {
        self.commit(table, &refs.iter().cloned().collect(), &ReferenceCounts::new(), false)
    }

    /// Writes the missing sidecar of `version` as a snapshot of its content: what the writer of
    /// a version committed by [`MemoryEngine::append_without_sidecar`] writes next (or what a
    /// repair rebuilds).
    pub fn write_sidecar(&self, table: &str, version: u64) {
        self.with_existing_table(table, |t| {
            if let Some(content) = t.versions.get(&version).cloned() {
                t.sidecars.insert(version, Ok(ObjectReferenceDelta::snapshot(table, version, &content)));
            }
        });
    }

    /// Replaces the sidecar of `version` by a decode error.
    pub fn corrupt_sidecar(&self, table: &str, version: u64, error: DecodeError) {
        self.with_existing_table(table, |t| {
            t.sidecars.insert(version, Err(error));
        });
    }

    /// Removes every version for which `keep` is false, except the latest (as Lance cleanup),
    /// then, when versions went and the journal is complete, writes the reference checkpoint at
    /// the new oldest retained version (as `lake cleanup` does): the replay's base moves there.
    pub fn cleanup(&self, table: &str, keep: impl Fn(u64) -> bool) {
        self.with_existing_table(table, |t| {
            let latest = t.latest;
            let before = t.versions.len();
            t.versions.retain(|v, _| *v == latest || keep(*v));
            if t.versions.len() == before {
                return;
            }
            let retained: Vec<u64> = t.versions.keys().copied().collect();
            let view = Self::journal_view(t);
            let (base, problems) = check_chain(table, &retained, t.latest, &view);
            let (Some(base), Some(&oldest), true) = (base, retained.first(), problems.is_empty()) else { return };
            if oldest <= base {
                return;
            }
            let mut replay = crate::Replay::new(&[]);
            for v in base..=oldest {
                match view.get(&v) {
                    Some(Ok(d)) if replay.apply(d).is_ok() => {}
                    _ => return,
                }
            }
            let bound = match t.sidecars.get(&oldest) {
                Some(Ok(d)) => d.encode(),
                _ => return,
            };
            t.checkpoint = Some((ObjectReferenceDelta::snapshot(table, oldest, &replay.counts()), bound));
        });
    }

    /// The journal a snapshot reads: every sidecar, or with a valid checkpoint at C (at or
    /// below the oldest retained version, C's sidecar unchanged) the checkpoint as C's entry
    /// and the sidecars after it.
    fn journal_view(t: &MemTable) -> Sidecars {
        let oldest = t.versions.keys().next().copied().unwrap_or(t.latest);
        let valid = t.checkpoint.as_ref().filter(|(c, bound)| {
            c.version <= oldest
                && c.version <= t.latest
                && matches!(t.sidecars.get(&c.version), Some(Ok(d)) if d.encode() == *bound)
        });
        match valid {
            None => t.sidecars.clone(),
            Some((c, _)) => {
                let mut view: Sidecars = t.sidecars.range(c.version + 1..).map(|(v, e)| (*v, e.clone())).collect();
                view.insert(c.version, Ok(c.clone()));
                view
            }
        }
    }

    /// Overwrites the table's content with one reference per element of `refs`: a version
    /// whose journal entry is a snapshot (as an overwrite's is); returns the version.
    pub fn overwrite(&self, table: &str, refs: &[ObjectIdentity]) -> u64 {
        self.with_table(table, |t| {
            let v = t.latest + 1;
            let content: ReferenceCounts = refs.iter().cloned().collect();
            t.current = content.clone();
            t.versions.insert(v, content.clone());
            t.latest = v;
            t.sidecars.insert(v, Ok(ObjectReferenceDelta::snapshot(table, v, &content)));
            v
        })
    }

    /// Creates lineage `branch` from `source`'s latest version, as a branch is made: its first
    /// version has the source's number and content, journaled as a snapshot. Returns that
    /// version (`None` when `source` does not exist).
    pub fn branch(&self, source: &str, branch: &str) -> Option<u64> {
        let mut guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let (v, content) = {
            let s = guard.get(source)?;
            (s.latest, s.current.clone())
        };
        let mut t = MemTable { latest: v, current: content.clone(), ..MemTable::default() };
        t.versions.insert(v, content.clone());
        t.sidecars.insert(v, Ok(ObjectReferenceDelta::snapshot(branch, v, &content)));
        guard.insert(branch.to_string(), t);
        Some(v)
    }

    /// Whether lineage `table` exists.
    pub fn lineage_exists(&self, table: &str) -> bool {
        self.tables.lock().unwrap_or_else(|p| p.into_inner()).contains_key(table)
    }

    /// The versions of `table` that still exist, ascending (empty for no such table).
    pub fn retained_versions(&self, table: &str) -> Vec<u64> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        guard.get(table).map(|t| t.versions.keys().copied().collect()).unwrap_or_default()
    }

    /// Deletes lineage `table` (a branch deleted): its versions and journal go.
    pub fn drop_table(&self, table: &str) {
        self.tables.lock().unwrap_or_else(|p| p.into_inner()).remove(table);
    }

    /// The truth: identities referenced by at least one version that still exists, all tables.
    pub fn true_live_set(&self) -> BTreeSet<ObjectIdentity> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .values()
            .flat_map(|t| t.versions.values().flat_map(|c| c.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>()))
            .collect()
    }

    /// Every sidecar of `table` (the whole journal, whatever a checkpoint stands in for).
    fn sidecars_of(&self, table: &str) -> Result<Sidecars, EngineError> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let t = guard
            .get(table)
            .ok_or_else(|| EngineError::Table { table: table.into(), message: "no such table".into() })?;
        Ok(t.sidecars.clone())
    }

    fn lineage_of(&self, table: &str) -> Result<(TableLineage, Sidecars), EngineError> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let t = guard
            .get(table)
            .ok_or_else(|| EngineError::Table { table: table.into(), message: "no such table".into() })?;
        let retained: Vec<u64> = t.versions.keys().copied().collect();
        let view = Self::journal_view(t);
        let (replay_base, mut problems) = check_chain(table, &retained, t.latest, &view);
        let stamp = Self::stamp_of(t);
        problems.extend(stamp.problems(table));
        Ok((
            TableLineage { table: table.into(), latest_version: t.latest, retained, replay_base, problems, stamp },
            view,
        ))
    }

    /// The stamp of a table: a journal file's identity is its canonical bytes' SHA-256 (or its
    /// decode error); the registry pins the latest version.
    fn stamp_of(t: &MemTable) -> LineageStamp {
        let journal = t
            .sidecars
            .iter()
            .map(|(v, entry)| {
                let identity = match entry {
                    Ok(d) => hex::encode(<sha2::Sha256 as sha2::Digest>::digest(d.encode())),
                    Err(e) => format!("undecodable: {e}"),
                };
                (*v, identity)
            })
            .collect();
        LineageStamp {
            latest_version: t.latest,
            retained: t.versions.keys().copied().collect(),
            // The in-memory engine has no Lance manifests to bind.
            manifests: std::collections::BTreeMap::new(),
            registry_version: Some(t.latest),
            journal,
            structure: Vec::new(),
        }
    }
}

/// A snapshot of one in-memory table: its lineage and a copy of its journal.
#[derive(Debug)]
struct MemSnapshot {
    lineage: TableLineage,
    sidecars: Sidecars,
}

impl TableSnapshot for MemSnapshot {
    fn lineage(&self) -> &TableLineage {
        &self.lineage
    }

    fn live(self: Box<Self>, roots: &RetainedRoots) -> Result<Box<dyn IdentityStream>, EngineError> {
        let live = live_set_of(&self.lineage, &self.sidecars, roots.versions())?;
        Ok(Box::new(MemLive(live.into_iter())))
    }
}

/// The live set of a [`MemSnapshot`], in order.
struct MemLive(std::collections::btree_set::IntoIter<ObjectIdentity>);

impl IdentityStream for MemLive {
    fn next_identity(&mut self) -> Result<Option<ObjectIdentity>, EngineError> {
        Ok(self.0.next())
    }
}

#[async_trait]
impl Engine for MemoryEngine {
    fn lake_root(&self) -> Option<String> {
        None
    }

    async fn tables(&self) -> Result<TableSet, EngineError> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        Ok(TableSet {
            tables: guard.keys().map(|n| TableLocation { name: n.clone(), uri: format!("memory://{n}") }).collect(),
            problems: vec![],
        })
    }

    async fn snapshot(&self, location: &TableLocation) -> Result<Box<dyn TableSnapshot>, EngineError> {
        let (lineage, sidecars) = self.lineage_of(&location.name)?;
        Ok(Box::new(MemSnapshot { lineage, sidecars }))
    }

    async fn lineage_stamp(&self, location: &TableLocation) -> Result<LineageStamp, EngineError> {
        let guard = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        let t = guard
            .get(&location.name)
            .ok_or_else(|| EngineError::Table { table: location.name.clone(), message: "no such table".into() })?;
        Ok(Self::stamp_of(t))
    }

    async fn references_added_between(
        &self,
        location: &TableLocation,
        after: u64,
        upto: u64,
    ) -> Result<Vec<ObjectIdentity>, EngineError> {
        // Every sidecar, those before a checkpoint too (as Lance's engine reads them).
        let sidecars = self.sidecars_of(&location.name)?;
        // A lineage new since the plan whose journal starts with a snapshot above version 1
        // (a branch) is read from that snapshot.
        let after = match sidecars.iter().next() {
            Some((first, Ok(entry))) if after == 0 && *first > 1 && entry.kind == lake_common::DeltaKind::Snapshot => {
                first - 1
            }
            _ => after,
        };
        added_between(&location.name, after, upto, &sidecars)
    }

    /// Reads every sidecar, those before a checkpoint too (the journal outlives cleanup).
    async fn references_removed_between(
        &self,
        location: &TableLocation,
        after: Option<u64>,
        upto: u64,
        range: &UriRange,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<Removals, EngineError> {
        let sidecars = self.sidecars_of(&location.name)?;
        removed_between(after, upto, &sidecars, range, visit)
    }

    /// The in-memory journal has no files: nothing is ever left behind.
    async fn unreferenced_journal_files(
        &self,
        _location: &TableLocation,
        _cutoff_ms: i64,
    ) -> Result<Vec<crate::UnreferencedFile>, EngineError> {
        Ok(Vec::new())
    }

    async fn write_intents(
        &self,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<crate::WriteIntents, EngineError> {
        let intents: Vec<(crate::IntentInfo, Vec<ObjectIdentity>)> =
            self.intents.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut found = crate::WriteIntents::default();
        for (info, references) in intents {
            for identity in references {
                visit(identity)?;
            }
            found.intents.push(info);
        }
        Ok(found)
    }
}
