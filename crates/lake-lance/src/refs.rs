//! Verification and repair of the reference journal against full scans.
//!
//! `verify` scans the reference columns of every retained version, compares each with the
//! journal's replayed counts at that version, and checks every referenced managed object exists
//! with its recorded size. It is also the baseline GC's journal-based planning is measured
//! against. `repair` rebuilds a missing sidecar as a snapshot from a scan of its version.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::sidecar;
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_engine::Replay;
use lake_objects::registry;
use serde::Serialize;
use std::collections::BTreeSet;

/// One difference between the journal and a scan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CountMismatch {
    /// Table.
    pub table: String,
    /// Version.
    pub version: u64,
    /// Object uri.
    pub uri: String,
    /// Count by the journal.
    pub journal: u64,
    /// Count by the scan.
    pub scan: u64,
}

/// What `lake refs verify` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Versions scanned.
    pub versions_scanned: u64,
    /// References (sum of counts) scanned.
    pub references_scanned: u64,
    /// Lineage problems that prevented a comparison (one sentence each).
    pub problems: Vec<String>,
    /// Journal/scan differences.
    pub mismatches: Vec<CountMismatch>,
    /// Referenced managed objects that do not exist.
    pub missing_objects: Vec<String>,
    /// Referenced managed objects whose stored size differs (`uri: expected X, found Y bytes`).
    pub size_mismatches: Vec<String>,
}

impl VerifyReport {
    /// True when nothing differs and nothing is missing.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
            && self.mismatches.is_empty()
            && self.missing_objects.is_empty()
            && self.size_mismatches.is_empty()
    }
}

fn diff(table: &str, version: u64, journal: &ReferenceCounts, scan: &ReferenceCounts, out: &mut Vec<CountMismatch>) {
    let ids: BTreeSet<_> = journal.iter().map(|(i, _)| i.clone()).chain(scan.iter().map(|(i, _)| i.clone())).collect();
    for id in ids {
        let (j, s) = (journal.get(&id), scan.get(&id));
        if j != s {
            out.push(CountMismatch { table: table.into(), version, uri: id.uri.clone(), journal: j, scan: s });
        }
    }
}

impl LanceEngine {
    /// Verifies the journal of `tables` (all registered tables when empty) against full scans.
    ///
    /// # Errors
    /// Lance and storage errors (lineage problems are reported, not errors).
    pub async fn verify_refs(&self, tables: &[String]) -> Result<VerifyReport, LanceEngineError> {
        let names = if tables.is_empty() { registry::tables(self.store()).await? } else { tables.to_vec() };
        let mut report = VerifyReport::default();
        let mut referenced: BTreeSet<lake_common::ObjectIdentity> = BTreeSet::new();
        for table in &names {
            let (lineage, sidecars) = self.lineage_and_sidecars_with(table, false).await?;
            report.problems.extend(lineage.problems.iter().map(|p| p.to_string()));
            let mut replay = match lineage.replay_base {
                Some(_) if lineage.problems.is_empty() => Some(Replay::new(&lineage.retained)),
                _ => None,
            };
            let base = lineage.replay_base.unwrap_or(1);
            let mut next = base;
            for &v in &lineage.retained {
                let scan = self.scan_version(table, v).await?;
                report.versions_scanned += 1;
                report.references_scanned += scan.total();
                referenced.extend(scan.iter().map(|(i, _)| i.clone()));
                if let Some(r) = replay.as_mut() {
                    while next <= v {
                        if let Some(Ok(d)) = sidecars.get(&next) {
                            if let Err(e) = r.apply(d) {
                                report
                                    .problems
                                    .push(format!("table `{table}` journal is inconsistent at version {next}: {e}"));
                                replay = None;
                                break;
                            }
                        }
                        next += 1;
                    }
                    if let Some(r) = replay.as_ref() {
                        diff(table, v, &r.counts(), &scan, &mut report.mismatches);
                    }
                }
            }
        }
        for id in referenced {
            if id.uri.contains("://") {
                continue;
            }
            match self.store().head(&id.uri).await? {
                None => report.missing_objects.push(id.uri.clone()),
                Some(meta) if meta.size != id.size => {
                    report.size_mismatches.push(format!("{}: expected {} bytes, found {}", id.uri, id.size, meta.size))
                }
                Some(_) => {}
            }
        }
        Ok(report)
    }

    /// Rebuilds the missing sidecar of `table` at `version` as a snapshot from a scan of that
    /// version (create-only: an existing different sidecar is never replaced), then advances the
    /// registry to it. Returns the snapshot written.
    ///
    /// # Errors
    /// Lance errors (the version must still exist); [`LanceEngineError::SidecarConflict`].
    pub async fn repair_refs(&self, table: &str, version: u64) -> Result<ObjectReferenceDelta, LanceEngineError> {
        let counts = self.scan_version(table, version).await?;
        let snapshot = ObjectReferenceDelta::snapshot(table, version, &counts);
        sidecar::write(self.store(), &snapshot).await?;
        registry::advance(self.store(), table, version).await?;
        Ok(snapshot)
    }
}
