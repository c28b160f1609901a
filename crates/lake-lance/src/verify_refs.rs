//! `lake refs verify` in bounded memory: the journal of every table compared with full scans of
//! its retained versions, and every referenced managed object checked with one HEAD.
//!
//! Per table, two streams sorted by `(identity, version)` are merged:
//!
//! - the journal's counts at every retained version: the table's journal (read from version 1
//!   or its newest snapshot base, never a reference checkpoint) goes into a
//!   [`SpilledJournal`], whose per-identity replay yields `(identity, version, count)` for every
//!   retained version where the count is positive ([`SpilledJournal::retained_counts`]);
//! - a full scan's counts: every retained version's reference columns are scanned batch by batch
//!   and each batch's `(identity, version, count)` records go through an external sort
//!   ([`SortedRuns`]).
//!
//! For each identity both sides' counts are compared version by version. Every distinct
//! identity a scan read goes, in order, into a third external sort shared by all tables; once
//! every table is compared, its merge walks the distinct identities in ascending order (each
//! once, however many tables or versions reference it) and HEADs every managed object (external
//! URIs are not checked).
//!
//! Memory: each of the three sorts holds at most a third of [`LanceEngine::memory_budget`] in
//! memory and spills sorted runs to the temporary folder (`TMPDIR`) past it, plus one read
//! buffer per spilled run, one identity's counts per side, [`HEAD_CONCURRENCY`] HEADs in
//! flight, one scanned batch and one decoded journal entry. The report itself is bounded: it
//! lists at most [`MAX_LISTED`] count mismatches, missing objects and size differences each,
//! with exact totals. Not bounded here: one journal entry is decoded whole (a format-2 version's
//! reference log is folded into counts in memory).
//!
//! (Longer than most modules: the three external sorts and their record types belong to the one
//! merge they feed; split, none of them reads on its own.)

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::scan::reference_columns;
use futures::{StreamExt, TryStreamExt};
use lake_common::ObjectIdentity;
use lake_engine::spill::{read_exact_or_end, SortedRuns, SpillError, SpillRecord};
use lake_engine::spilled_replay::RetainedCounts;
use lake_engine::{LineageProblem, SpilledReplayError};
use lake_store::registry;
use serde::Serialize;
use std::io::{Read, Write};

/// Whether `problem` is only that an entry is not bound to its Lance version: the journal's
/// counts can still be compared with the scans.
pub(crate) fn is_binding_problem(problem: &LineageProblem) -> bool {
    matches!(problem, LineageProblem::UnboundEntry { .. } | LineageProblem::EntryOfAnotherVersion { .. })
}

/// At most this many entries of each list of a [`VerifyReport`] (`mismatches`,
/// `missing_objects`, `size_mismatches`) are kept; the `*_count` fields carry the exact totals.
pub const MAX_LISTED: usize = 1000;

/// HEAD requests in flight at once while the referenced objects are checked (results are read
/// in identity order).
pub const HEAD_CONCURRENCY: usize = 8;

/// One difference between the journal and a scan: the count of one identity at one retained
/// version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CountMismatch {
    /// Table.
    pub table: String,
    /// Version.
    pub version: u64,
    /// Object uri.
    pub uri: String,
    /// Count by the journal (references; 0 when the journal has none there).
    pub journal: u64,
    /// Count by the scan (references; 0 when the scan found none there).
    pub scan: u64,
}

/// What `lake refs verify` found.
///
/// Bounded whatever the size of the lake: each list keeps at most its first [`MAX_LISTED`]
/// entries (mismatches in table order, then identity and version order; objects in identity
/// order) and the matching `*_count` field gives the exact total. `problems` has at most a few
/// sentences per table and version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Retained versions whose reference columns were scanned to the end.
    pub versions_scanned: u64,
    /// References (sum of counts) in the versions scanned to the end.
    pub references_scanned: u64,
    /// Problems that prevented a comparison (one sentence each): lineage problems, an
    /// inconsistent journal, a version whose reference column cannot be read.
    pub problems: Vec<String>,
    /// Journal/scan differences in total (one per identity and version).
    pub mismatch_count: u64,
    /// The first [`MAX_LISTED`] journal/scan differences.
    pub mismatches: Vec<CountMismatch>,
    /// Distinct referenced managed objects checked with a HEAD request.
    pub objects_checked: u64,
    /// Referenced managed objects that do not exist, in total.
    pub missing_object_count: u64,
    /// The first [`MAX_LISTED`] referenced managed objects that do not exist (uris).
    pub missing_objects: Vec<String>,
    /// Referenced managed objects whose stored size differs, in total.
    pub size_mismatch_count: u64,
    /// The first [`MAX_LISTED`] of them (`uri: expected X bytes, found Y`).
    pub size_mismatches: Vec<String>,
    /// Sorted runs written to the temporary folder past the memory budget (0 when everything
    /// fit); says how the run went, not what it found.
    pub spilled_runs: u64,
}

impl VerifyReport {
    /// True when nothing differs and nothing is missing.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
            && self.mismatch_count == 0
            && self.missing_object_count == 0
            && self.size_mismatch_count == 0
    }

    fn mismatch(&mut self, table: &str, version: u64, identity: &ObjectIdentity, journal: u64, scan: u64) {
        self.mismatch_count += 1;
        if self.mismatches.len() < MAX_LISTED {
            self.mismatches.push(CountMismatch {
                table: table.into(),
                version,
                uri: identity.uri.clone(),
                journal,
                scan,
            });
        }
    }
}

/// Pushes `item` onto `list` while it holds fewer than [`MAX_LISTED`] entries.
fn listed(list: &mut Vec<String>, item: impl FnOnce() -> String) {
    if list.len() < MAX_LISTED {
        list.push(item());
    }
}

/// Scanned references of one identity at one version (spilled as the uri, SHA-256, size,
/// version and count).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Scanned {
    identity: ObjectIdentity,
    version: u64,
    count: u64,
}

fn truncated() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated spill record")
}

fn write_identity(identity: &ObjectIdentity, out: &mut impl Write) -> std::io::Result<()> {
    identity.uri.write_to(out)?;
    out.write_all(&identity.sha256)?;
    out.write_all(&identity.size.to_le_bytes())
}

/// Reads an identity written by [`write_identity`] followed by `N` bytes of `rest`.
fn read_identity<const N: usize>(input: &mut impl Read) -> std::io::Result<Option<(ObjectIdentity, [u8; N])>> {
    let Some(uri) = String::read_from(input)? else {
        return Ok(None);
    };
    let mut sha256 = [0u8; 32];
    let mut size = [0u8; 8];
    let mut rest = [0u8; N];
    if !read_exact_or_end(input, &mut sha256)?
        || !read_exact_or_end(input, &mut size)?
        || (N > 0 && !read_exact_or_end(input, &mut rest)?)
    {
        return Err(truncated());
    }
    Ok(Some((ObjectIdentity { uri, sha256, size: u64::from_le_bytes(size) }, rest)))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

impl SpillRecord for Scanned {
    fn memory_bytes(&self) -> usize {
        self.identity.uri.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        write_identity(&self.identity, out)?;
        out.write_all(&self.version.to_le_bytes())?;
        out.write_all(&self.count.to_le_bytes())
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        Ok(read_identity::<16>(input)?.map(|(identity, rest)| Scanned {
            identity,
            version: u64_at(&rest, 0),
            count: u64_at(&rest, 8),
        }))
    }
}

/// An identity some scanned version references (for the object check).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Referenced(pub(crate) ObjectIdentity);

impl SpillRecord for Referenced {
    fn memory_bytes(&self) -> usize {
        self.0.uri.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        write_identity(&self.0, out)
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        Ok(read_identity::<0>(input)?.map(|(identity, _)| Referenced(identity)))
    }
}

fn spill(e: SpillError) -> LanceEngineError {
    LanceEngineError::Objects(e.into())
}

/// How the scan of one version ended.
enum ScanEnd {
    /// Read to the end: this many references.
    Complete(u64),
    /// A reference column could not be read (the sentence names it).
    Unreadable(String),
}

/// The journal side of one table's comparison: the stream and the identity it is positioned on.
struct JournalSide {
    stream: RetainedCounts,
    /// The next identity and its `(version, count)` at retained versions.
    next: Option<ObjectIdentity>,
    counts: Vec<(u64, u64)>,
}

impl JournalSide {
    /// Moves to the next identity. A journal that does not replay ends the side and names the
    /// problem in `report`.
    fn advance(mut side: Self, table: &str, report: &mut VerifyReport) -> Result<Option<Self>, LanceEngineError> {
        match side.stream.next_counts(&mut side.counts) {
            Ok(next) => {
                side.next = next;
                Ok(Some(side))
            }
            Err(SpilledReplayError::Replay(e)) => {
                report
                    .problems
                    .push(format!("table `{table}` journal is inconsistent at version {}: {e}", e.version()));
                Ok(None)
            }
            Err(SpilledReplayError::Spill(e)) => Err(spill(e)),
        }
    }
}

/// Records a mismatch for every version where `journal` and `scan` (each `(version, count)`
/// ascending) differ, except at `unreadable` versions.
fn compare(
    table: &str,
    identity: &ObjectIdentity,
    journal: &[(u64, u64)],
    scan: &[(u64, u64)],
    unreadable: &[u64],
    report: &mut VerifyReport,
) {
    let (mut j, mut s) = (journal.iter().peekable(), scan.iter().peekable());
    loop {
        let (version, jc, sc) = match (j.peek().copied(), s.peek().copied()) {
            (None, None) => break,
            (Some(&(v, c)), None) => {
                j.next();
                (v, c, 0)
            }
            (None, Some(&(v, c))) => {
                s.next();
                (v, 0, c)
            }
            (Some(&(jv, jc)), Some(&(sv, sc))) => {
                if jv < sv {
                    j.next();
                    (jv, jc, 0)
                } else if sv < jv {
                    s.next();
                    (sv, 0, sc)
                } else {
                    j.next();
                    s.next();
                    (jv, jc, sc)
                }
            }
        };
        if jc != sc && !unreadable.contains(&version) {
            report.mismatch(table, version, identity, jc, sc);
        }
    }
}

impl LanceEngine {
    /// Verifies the journal of `tables` (all registered tables when empty) against full scans
    /// of every retained version, and checks that every referenced managed object exists with
    /// its recorded size, in memory bounded by [`LanceEngine::memory_budget`] (see the module
    /// documentation).
    ///
    /// # Errors
    /// Lance and storage errors, and a temporary folder that cannot be written. Lineage problems,
    /// an inconsistent journal and unreadable reference columns are reported, not errors.
    pub async fn verify_refs(&self, tables: &[String]) -> Result<VerifyReport, LanceEngineError> {
        let names = if tables.is_empty() { registry::tables(self.store()).await? } else { tables.to_vec() };
        let share = self.memory_budget() / 3;
        let mut report = VerifyReport::default();
        let mut referenced = SortedRuns::<Referenced>::new(share);
        for table in &names {
            self.verify_table(table, share, &mut report, &mut referenced).await?;
        }
        report.spilled_runs += referenced.runs() as u64;
        self.check_objects(referenced, &mut report).await?;
        tracing::debug!(
            tables = names.len(),
            versions = report.versions_scanned,
            references = report.references_scanned,
            objects = report.objects_checked,
            spilled_runs = report.spilled_runs,
            "references verified"
        );
        Ok(report)
    }

    /// Compares one table's journal with scans of its retained versions, adding every scanned
    /// identity to `referenced`. Entries not bound to their versions
    /// ([`LineageProblem::UnboundEntry`], [`LineageProblem::EntryOfAnotherVersion`]) are
    /// reported and still compared: the comparison is what `lake refs bind` relies on. Returns
    /// the lineage read.
    pub(crate) async fn verify_table(
        &self,
        table: &str,
        share: usize,
        report: &mut VerifyReport,
        referenced: &mut SortedRuns<Referenced>,
    ) -> Result<lake_engine::TableLineage, LanceEngineError> {
        let crate::live::LanceSnapshot { lineage, journal } =
            self.lineage_and_journal_with(table, false, share).await?;
        report.problems.extend(lineage.problems.iter().map(|p| p.to_string()));
        let journal_runs = journal.spilled_runs();
        let mut side = match lineage.replay_base {
            Some(base) if lineage.problems.iter().all(is_binding_problem) => {
                match journal.retained_counts(base, lineage.latest_version, &lineage.retained) {
                    Ok(stream) => {
                        let side = JournalSide { stream, next: None, counts: Vec::new() };
                        JournalSide::advance(side, table, report)?
                    }
                    Err(SpilledReplayError::Replay(e)) => {
                        report
                            .problems
                            .push(format!("table `{table}` journal is inconsistent at version {}: {e}", e.version()));
                        None
                    }
                    Err(SpilledReplayError::Spill(e)) => return Err(spill(e)),
                }
            }
            _ => None,
        };
        // Without a journal to compare (lineage problems), the scans still feed the object check.
        let compared = side.is_some();

        let mut scanned = SortedRuns::<Scanned>::new(share);
        let mut unreadable = Vec::new();
        if !lineage.retained.is_empty() {
            let ds = self.open(table).await?;
            for &version in &lineage.retained {
                match self.scan_into(&ds, table, version, &mut scanned).await? {
                    ScanEnd::Complete(references) => {
                        report.versions_scanned += 1;
                        report.references_scanned += references;
                    }
                    ScanEnd::Unreadable(problem) => {
                        report.problems.push(problem);
                        unreadable.push(version);
                    }
                }
            }
        }
        let scan_runs = scanned.runs();
        report.spilled_runs += (journal_runs + scan_runs) as u64;
        let mut scan = scanned.finish().map_err(spill)?;
        let mut scan_counts: Vec<(u64, u64)> = Vec::new();
        loop {
            // The smaller of the two sides' next identities.
            let identity = match (side.as_ref().and_then(|s| s.next.as_ref()), scan.peek()) {
                (None, None) => break,
                (Some(j), None) => j.clone(),
                (None, Some(s)) => s.identity.clone(),
                (Some(j), Some(s)) if *j < s.identity => j.clone(),
                (Some(_), Some(s)) => s.identity.clone(),
            };
            scan_counts.clear();
            while scan.peek().is_some_and(|r| r.identity == identity) {
                let Some(record) = scan.next_record().map_err(spill)? else { break };
                match scan_counts.last_mut() {
                    Some((v, c)) if *v == record.version => *c = c.saturating_add(record.count),
                    _ => scan_counts.push((record.version, record.count)),
                }
            }
            // A journal that stopped replaying (inconsistent) compares nothing more.
            let journal_has = side.as_ref().is_some_and(|s| s.next.as_ref() == Some(&identity));
            if let Some(s) = side.as_ref() {
                let journal_counts: &[(u64, u64)] = if journal_has { &s.counts } else { &[] };
                compare(table, &identity, journal_counts, &scan_counts, &unreadable, report);
            }
            if journal_has {
                if let Some(s) = side.take() {
                    side = JournalSide::advance(s, table, report)?;
                }
            }
            if !scan_counts.is_empty() {
                referenced.push(Referenced(identity)).map_err(spill)?;
            }
        }
        tracing::debug!(table, journal_runs, scan_runs, compared, "table verified");
        // (A clone: the journal side's stream may still borrow the lineage's retained versions.)
        Ok(lineage.clone())
    }

    /// Scans the reference columns of `table` at `version` into `sink`, one record per identity
    /// and batch.
    async fn scan_into(
        &self,
        latest: &lance::Dataset,
        table: &str,
        version: u64,
        sink: &mut SortedRuns<Scanned>,
    ) -> Result<ScanEnd, LanceEngineError> {
        let lance_err = |action: &'static str| {
            move |source: lance::Error| LanceEngineError::Lance { table: table.into(), action, source }
        };
        let ds = latest.checkout_version(version).await.map_err(lance_err("checkout"))?;
        let unreadable = |e: &dyn std::fmt::Display| {
            ScanEnd::Unreadable(format!(
                "table `{table}` version {version}: a reference column cannot be read, so this version's references \
                 were not compared with the journal: {e}"
            ))
        };
        let columns = match reference_columns(&ds, table) {
            Ok(columns) => columns,
            Err(LanceEngineError::Unreadable { source, .. }) => return Ok(unreadable(&source)),
            Err(e) => return Err(e),
        };
        if columns.is_empty() {
            return Ok(ScanEnd::Complete(0));
        }
        let mut scanner = ds.scan();
        scanner.io_buffer_size(crate::scan::scan_io_buffer_bytes(self.memory_budget()));
        scanner.project(&columns.names()).map_err(lance_err("scan"))?;
        let mut stream = scanner.try_into_stream().await.map_err(lance_err("scan"))?;
        let root = self.store().root();
        let mut references = 0u64;
        let mut batch_ids: Vec<ObjectIdentity> = Vec::new();
        while let Some(batch) = stream.try_next().await.map_err(lance_err("scan"))? {
            batch_ids.clear();
            if let Err(e) = columns.visit(&batch, root, |id| batch_ids.push(id)) {
                return Ok(unreadable(&e));
            }
            references += batch_ids.len() as u64;
            // One record per identity and batch (rows sharing an object are counted here).
            batch_ids.sort_unstable();
            let mut ids = batch_ids.drain(..).peekable();
            while let Some(identity) = ids.next() {
                let mut count = 1u64;
                while ids.next_if_eq(&identity).is_some() {
                    count += 1;
                }
                sink.push(Scanned { identity, version, count }).map_err(spill)?;
            }
        }
        Ok(ScanEnd::Complete(references))
    }

    /// HEADs every distinct managed identity of `referenced`, in ascending order.
    async fn check_objects(
        &self,
        referenced: SortedRuns<Referenced>,
        report: &mut VerifyReport,
    ) -> Result<(), LanceEngineError> {
        let mut merged = referenced.finish().map_err(spill)?;
        let mut last: Option<ObjectIdentity> = None;
        // The distinct managed identities, ascending (external URIs are not checked).
        let distinct = std::iter::from_fn(move || loop {
            match merged.next_record() {
                Ok(Some(Referenced(identity))) => {
                    if last.as_ref() == Some(&identity) {
                        continue;
                    }
                    last = Some(identity.clone());
                    if lake_common::is_external_identity(&identity.uri) {
                        continue;
                    }
                    return Some(Ok(identity));
                }
                Ok(None) => return None,
                Err(e) => return Some(Err(spill(e))),
            }
        });
        let store = self.store();
        let mut heads = futures::stream::iter(distinct)
            .map(move |item| async move {
                let identity = item?;
                let meta = store.head(&identity.uri).await?;
                Ok::<_, LanceEngineError>((identity, meta.map(|m| m.size)))
            })
            .buffered(HEAD_CONCURRENCY);
        while let Some(checked) = heads.next().await {
            let (identity, size) = checked?;
            report.objects_checked += 1;
            match size {
                None => {
                    report.missing_object_count += 1;
                    listed(&mut report.missing_objects, || identity.uri.clone());
                }
                Some(found) if found != identity.size => {
                    report.size_mismatch_count += 1;
                    listed(&mut report.size_mismatches, || {
                        format!("{}: expected {} bytes, found {found}", identity.uri, identity.size)
                    });
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
