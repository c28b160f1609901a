//! Verification and repair of the reference journal against full scans.
//!
//! `verify` ([`crate::verify_refs`], re-exported here) scans the reference columns of every
//! retained version, compares each with the journal's replayed counts at that version, and
//! checks every referenced managed object exists with its recorded size, in bounded memory. It
//! is also the baseline GC's journal-based planning is measured against. `repair` rebuilds a
//! missing sidecar as a snapshot from a scan of its version. `bind` binds the entries of
//! retained versions that record nothing of their Lance version (format 3, earlier builds) or
//! name another one, once full scans show the journal is exact for the table as it is.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::log_upload::{CountsWriter, WrittenCounts};
use crate::sidecar;
use crate::verify_refs::{is_binding_problem, Referenced};
use lake_common::{DeltaKind, LogHead, ObjectReferenceDelta, SidecarDocument};
use lake_engine::spill::SortedRuns;
use lake_engine::LineageProblem;
use lake_store::layout::sidecar_key;
use lake_store::registry;
use serde::Serialize;

/// What [`LanceEngine::bind_refs`] did to one table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BindReport {
    /// The table.
    pub table: String,
    /// Retained versions whose reference columns were scanned and compared with the journal.
    pub versions_compared: u64,
    /// The versions whose entries were rewritten bound to their manifests (ascending).
    pub bound: Vec<u64>,
}

/// What [`LanceEngine::repair_refs`] wrote: a snapshot entry of one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepairedEntry {
    /// The table (or lineage `table@branch`).
    pub table: String,
    /// The version journaled.
    pub version: u64,
    /// References in the version (the sum of the counts).
    pub references: u64,
    /// Distinct objects (identities) the version references.
    pub objects: u64,
    /// Sorted runs the scan spilled to the temporary folder (0: it fit the memory budget).
    pub spilled_runs: usize,
}

/// Verification lives in [`crate::verify_refs`] (bounded memory); re-exported here.
pub use crate::verify_refs::{CountMismatch, VerifyReport, MAX_LISTED};

impl LanceEngine {
    /// Rebuilds the missing sidecar of `table` at `version` as a snapshot from a scan of that
    /// version (create-only: an existing different sidecar is never replaced), then advances the
    /// registry to it. Returns what was written.
    ///
    /// Memory is bounded by the engine's budget ([`LanceEngine::with_memory_budget`]) whatever
    /// the version's size: the scanned references go into sorted runs (spilled to the
    /// temporary folder past the budget), merged, counted per identity and streamed into the
    /// entry's sorted reference log in upload parts (an entry of at most
    /// [`sidecar::INLINE_MAX_IDENTITIES`] identities is written inline).
    ///
    /// # Errors
    /// Lance errors (the version must still exist); [`LanceEngineError::SidecarConflict`];
    /// [`LanceEngineError::InvalidInput`] for a version that reads files outside its dataset
    /// folder; [`LanceEngineError::Unreadable`] for columns or values a scan cannot read with
    /// certainty; spill errors.
    pub async fn repair_refs(&self, table: &str, version: u64) -> Result<RepairedEntry, LanceEngineError> {
        // A version that reads files outside its dataset folder has rows a scan of this table
        // cannot vouch for.
        let ds = self.open(table).await?.checkout_version(version).await.map_err(|source| LanceEngineError::Lance {
            table: table.into(),
            action: "checkout",
            source,
        })?;
        if let Some(base) = ds.manifest().base_paths.values().next() {
            return Err(LanceEngineError::InvalidInput(format!(
                "table `{table}` version {version} reads files from `{}`, outside its dataset folder (a shallow clone or an added base path); refusing to journal it from a scan of this table",
                base.path
            )));
        }
        let mut runs = SortedRuns::<Referenced>::new(self.memory_budget());
        let io_buffer = crate::scan::scan_io_buffer_bytes(self.memory_budget());
        crate::scan::visit_scanned(&ds, table, self.store().root(), io_buffer, |identity| {
            runs.push(Referenced(identity)).map_err(|e| LanceEngineError::Objects(e.into()))
        })
        .await?;
        let spilled_runs = runs.runs();
        let mut merged = runs.finish().map_err(|e| LanceEngineError::Objects(e.into()))?;
        let mut next = || merged.next_record().map_err(|e| LanceEngineError::Objects(e.into()));
        // Bound to the manifest that was scanned.
        let binding = crate::binding::binding_of(self.store(), table, &ds).await?;
        let mut entry = RepairedEntry { table: table.into(), version, references: 0, objects: 0, spilled_runs };
        // Counted identity by identity as the merge yields them: small entries inline, the
        // rest into a sorted log without ever holding the set.
        let mut counts = CountsWriter::new(self.store(), table, version);
        let mut current: Option<(lake_common::ObjectIdentity, u64)> = None;
        loop {
            let record = match next() {
                Ok(record) => record,
                Err(e) => {
                    counts.abort().await;
                    return Err(e);
                }
            };
            if let (Some((c, n)), Some(Referenced(r))) = (current.as_mut(), &record) {
                if c == r {
                    *n += 1;
                    continue;
                }
            }
            if let Some((identity, n)) = current.take() {
                counts.push(identity, n).await?;
            }
            match record {
                Some(Referenced(identity)) => current = Some((identity, 1)),
                None => break,
            }
        }
        (entry.references, entry.objects) = (counts.references, counts.identities);
        match counts.finish().await? {
            WrittenCounts::Inline(small) => {
                let snapshot = ObjectReferenceDelta::snapshot(table, version, &small).bound(binding);
                sidecar::write(self.store(), &snapshot).await?;
            }
            WrittenCounts::Log(log) => {
                let head = LogHead::new(table, version, DeltaKind::Snapshot, log.clone()).bound(binding);
                if let Err(e) = sidecar::write_head(self.store(), &head).await {
                    crate::log_upload::discard(self.store(), table, &log).await;
                    return Err(e);
                }
            }
        }
        registry::advance(self.store(), table, version).await?;
        Ok(entry)
    }

    /// Binds the journal entries of `table`'s retained versions that are not bound to their
    /// Lance versions ([`LineageProblem::UnboundEntry`]: format 3, written by earlier builds;
    /// [`LineageProblem::EntryOfAnotherVersion`]: written for another version of that number),
    /// after checking the journal against full scans of every retained version
    /// (`lake refs verify`'s comparison). Only when the journal's counts equal the scans' at every
    /// retained version, and the table has no other lineage problem, is each such entry
    /// rewritten with the same content and the binding of the manifest the table holds now
    /// ([`crate::binding::binding_of`]). The manifests are listed before the scans and again
    /// before the rewrite: a table whose Lance files changed meanwhile is refused. Rewritten
    /// entries change the journal's identity, so an apply planned before stops (plan again).
    /// Idempotent: a table with nothing to bind is only verified.
    ///
    /// Do not run it while another process replaces the table's files; writes meanwhile are
    /// safe (their entries are bound when written).
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] naming what differs (count differences between the
    /// journal and the scans, other lineage problems, unreadable columns, manifests that changed
    /// during the check): nothing is rewritten then. Lance, storage and spill errors.
    pub async fn bind_refs(&self, table: &str) -> Result<BindReport, LanceEngineError> {
        let before = crate::binding::list_manifests(self.store(), table).await?;
        let share = self.memory_budget() / 3;
        let mut report = crate::verify_refs::VerifyReport::default();
        // The object check is not run: binding depends on the counts only.
        let mut referenced = SortedRuns::<Referenced>::new(share);
        let lineage = self.verify_table(table, share, &mut report, &mut referenced).await?;
        drop(referenced);
        let others: Vec<String> =
            lineage.problems.iter().filter(|p| !is_binding_problem(p)).map(ToString::to_string).collect();
        let refuse = |why: String| {
            Err(LanceEngineError::InvalidInput(format!("table `{table}`: no journal entry was bound: {why}")))
        };
        if !others.is_empty() {
            return refuse(format!("the lineage has other problems, fix them first: {}", others.join("; ")));
        }
        // Problems that are neither lineage problems nor mismatches: unreadable columns, an
        // inconsistent journal.
        if report.problems.len() > lineage.problems.len() {
            let extra: Vec<&str> = report.problems[lineage.problems.len()..].iter().map(String::as_str).collect();
            return refuse(format!("the journal could not be compared with every scan: {}", extra.join("; ")));
        }
        if report.mismatch_count > 0 {
            let listed: Vec<String> = report
                .mismatches
                .iter()
                .take(10)
                .map(|m| format!("version {} `{}`: journal {} != scan {}", m.version, m.uri, m.journal, m.scan))
                .collect();
            return refuse(format!(
                "the journal differs from the table's Lance files in {} counts ({}{}): the entries describe other versions than these files hold. Put back the table's own Lance files, or move its journal (`_lake/object_refs/`) aside and rebuild it with `refs repair`",
                report.mismatch_count,
                listed.join(", "),
                if report.mismatch_count > 10 { ", ..." } else { "" }
            ));
        }
        let versions: Vec<u64> = lineage
            .problems
            .iter()
            .filter_map(|p| match p {
                LineageProblem::UnboundEntry { version, .. }
                | LineageProblem::EntryOfAnotherVersion { version, .. } => Some(*version),
                _ => None,
            })
            .collect();
        let after = crate::binding::list_manifests(self.store(), table).await?;
        if versions.iter().any(|v| before.get(v) != after.get(v)) {
            return refuse("the table's manifests changed while it was being checked; run the command again".into());
        }
        let ds = self.open(table).await?;
        for &version in &versions {
            let key = sidecar_key(table, version);
            let Some(bytes) = self.store().get(&key).await? else {
                return refuse(format!("the sidecar of version {version} vanished"));
            };
            let binding = crate::binding::binding_at(self.store(), table, &ds, version).await?;
            if after.get(&version) != Some(&binding.manifest()) {
                return refuse(format!(
                    "the manifest of version {version} changed while it was being bound; run the command again"
                ));
            }
            let rebound = match SidecarDocument::decode(&bytes, table, version) {
                Ok(SidecarDocument::Inline(entry)) => entry.bound(binding).encode(),
                Ok(SidecarDocument::Log(head)) => head.bound(binding).encode(),
                Err(e) => return refuse(format!("the sidecar of version {version} cannot be decoded: {e}")),
            };
            self.store().put(&key, rebound).await?;
            tracing::info!(table, version, "journal entry bound to its Lance version");
        }
        Ok(BindReport { table: table.into(), versions_compared: report.versions_scanned, bound: versions })
    }
}
