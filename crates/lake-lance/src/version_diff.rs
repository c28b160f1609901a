//! The journal entry of one committed version computed from Lance's manifests: what changed
//! between version `v - 1` and version `v`, whoever's commit `v - 1` was.
//!
//! Lance builds manifest `v` from manifest `v - 1` and `v`'s transaction, so the fragments that
//! differ between the two (by id, data files, deletion file or row count) hold every row the
//! commit wrote or removed, and no other. The entry is a `delta` of removed and added references,
//! netted, read at the cost of what changed, fragment by fragment:
//! - a fragment in both versions with the same data files and physical rows whose deletion
//!   vector grew (a delete, or the old copies of the rows an update or upsert rewrote): removed =
//!   the references of exactly the rows the new deletion vector removes (its offsets minus the
//!   old one's, both read through Lance's `FileFragment::get_deletion_vector`), read from
//!   `v - 1` by row address (`(fragment_id << 32) | row_offset`, Lance's `TakeBuilder`). Data
//!   files are immutable, so every other row of the fragment is the same in both versions. When
//!   the removed rows are more than a quarter of the fragment's live rows, one scan of the
//!   fragment at `v - 1` with row addresses, keeping the removed rows, reads them instead;
//! - a fragment only in `v` (new rows): added = its rows' references (its deletion vector
//!   applied);
//! - a fragment only in `v - 1` (a delete that removed all its rows drops it; a rewrite):
//!   removed = its live rows' references at `v - 1`;
//! - any other change of a fragment (the same id with other data files or physical rows, a
//!   deletion vector that shrank): removed = its live rows at `v - 1`, added = its live rows at
//!   `v` (a scan of both).
//!
//! When the two versions' reference columns differ (a column added, dropped or renamed), the
//! entry is a `snapshot` of `v` instead: a full scan of its reference columns. Cost of a delta:
//! the removed rows' references (by address) plus the new fragments' references, so a one-row
//! update of a 500,000-row fragment reads one row of it and the one-row fragment the update wrote.
//!
//! Size: about 715 lines, 160 of them unit tests on real Lance datasets that check each fragment
//! rule's entry against full scans and the rows it read; the rules share one reader of removed rows
//! (`RemovedRowReader`: take by address or scan), so they stay together.

use crate::error::LanceEngineError;
use crate::journaling::JournalLog;
use crate::log_upload::RowLogWriter;
use crate::scan::{count_references, count_scanned, reference_columns};
use futures::TryStreamExt;
use lake_common::{DeltaKind, LakeRootUri, LogHead, LogRef, ObjectReferenceDelta, ReferenceColumns, ReferenceCounts};
use lake_store::store::LakeStore;
use lance::dataset::{ProjectionRequest, TakeBuilder};
use lance::deps::arrow_array::{Array, BooleanArray, RecordBatch, UInt64Array};
use lance::deps::datafusion::arrow::compute::filter_record_batch;
use lance::index::DatasetIndexExt;
use lance::table::format::Fragment;
use lance::Dataset;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Rows of one fragment read by address in one take (bounds the batch a take holds).
const TAKE_CHUNK: usize = 8192;

/// A version's journal entry and the net number of references it added and removed.
pub(crate) struct VersionEntry {
    /// The entry to publish.
    pub entry: ObjectReferenceDelta,
    /// References added, net of removals (sum of counts).
    pub added: u64,
    /// References removed, net of additions (sum of counts).
    pub removed: u64,
    /// What computing the entry read (the tests pin it; the debug event logs it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub reads: DiffReads,
}

/// What computing a version's entry read, for tests and the `version journal entry computed`
/// debug event: the cost of the entry in rows and fragments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DiffReads {
    /// Per fragment id, the rows of version `v - 1` read by row address
    /// (`(fragment_id << 32) | row_offset`): the rows its grown deletion vector removed.
    pub taken: BTreeMap<u64, u64>,
    /// Fragments of `v - 1` scanned once with row addresses to read the rows their grown
    /// deletion vector removed (more than a quarter of their live rows), and those rows' count.
    pub filtered: Vec<(u64, u64)>,
    /// Fragments of `v - 1` whose live rows were scanned (removed whole, or changed otherwise).
    pub scanned_before: Vec<u64>,
    /// Fragments of `v` whose live rows were scanned (new, or changed otherwise).
    pub scanned_after: Vec<u64>,
    /// The whole version was scanned (reference columns changed: the entry is a snapshot).
    pub full_scan: bool,
}

/// The journal entry of `ds`'s checked-out version `v` relative to `v - 1` (a snapshot for
/// version 1), read at the cost of what changed (see the module documentation).
///
/// # Errors
/// Lance errors (version `v - 1` no longer exists, a row it lists cannot be read); invalid
/// references.
pub(crate) async fn diff_entry(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
) -> Result<VersionEntry, LanceEngineError> {
    let version = ds.version().version;
    let started = std::time::Instant::now();
    let lance_err =
        |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
    let full_scan = DiffReads { full_scan: true, ..DiffReads::default() };
    if version < 2 {
        let counts = count_references(ds, table, root, None).await?;
        let added = counts.total();
        let entry = ObjectReferenceDelta::snapshot(table, version, &counts);
        return Ok(VersionEntry { entry, added, removed: 0, reads: full_scan });
    }
    let previous = ds.checkout_version(version - 1).await.map_err(lance_err("open the previous version"))?;
    let (before_columns, after_columns) = (reference_columns(&previous, table)?, reference_columns(ds, table)?);
    if before_columns.columns() != after_columns.columns() {
        let now = count_references(ds, table, root, None).await?;
        let then = count_references(&previous, table, root, None).await?;
        let net = ObjectReferenceDelta::delta(table, version, &now, &then);
        let (added, removed) = (sum(&net.added), sum(&net.removed));
        let entry = ObjectReferenceDelta::snapshot(table, version, &now);
        return Ok(VersionEntry { entry, added, removed, reads: full_scan });
    }
    let previous = Arc::new(previous);
    let opened = started.elapsed();
    let changes = compare_fragments(&previous, ds, table).await?;
    let compared = started.elapsed();
    let mut scan_before = changes.dropped;
    let mut scan_after: Vec<Fragment> = changes.added.into_iter().cloned().collect();
    for (old, new) in changes.rewritten {
        scan_before.push(old);
        scan_after.push(new);
    }
    let mut reads = DiffReads {
        scanned_before: scan_before.iter().map(|f| f.id).collect(),
        scanned_after: scan_after.iter().map(|f| f.id).collect(),
        ..DiffReads::default()
    };
    // The removed and the added references are read side by side.
    let removed = async {
        let reader = RemovedRowReader { previous: &previous, table, root, columns: &before_columns };
        let mut removed = ReferenceCounts::new();
        let mut counts = Removed::Counts(&mut removed);
        for (fragment, rows) in &changes.grown {
            reader.read(fragment, rows, &mut counts, &mut reads).await?;
        }
        reader.scan_whole(scan_before, &mut counts).await?;
        Ok::<_, LanceEngineError>(removed)
    };
    let added = count_scanned(ds, table, root, None, Some(scan_after));
    let (removed, added) = futures::try_join!(removed, added)?;
    let read = started.elapsed();
    let entry = ObjectReferenceDelta::delta(table, version, &added, &removed);
    let (added, removed) = (sum(&entry.added), sum(&entry.removed));
    tracing::debug!(
        table,
        version,
        taken_rows = reads.taken.values().sum::<u64>(),
        filtered_fragments = reads.filtered.len(),
        scanned_before = reads.scanned_before.len(),
        scanned_after = reads.scanned_after.len(),
        open_s = opened.as_secs_f64(),
        compare_s = (compared - opened).as_secs_f64(),
        read_s = (read - compared).as_secs_f64(),
        net_s = (started.elapsed() - read).as_secs_f64(),
        "version journal entry computed"
    );
    Ok(VersionEntry { entry, added, removed, reads })
}

/// The rows of one fragment that its grown deletion vector removed.
struct RemovedRows {
    /// The fragment's id as the high half of a row address.
    fragment: u32,
    /// Offsets in the fragment's data files deleted at `v` and not at `v - 1`, ascending.
    offsets: Vec<u32>,
    /// The fragment's live rows at `v - 1`.
    live_before: u64,
}

/// How the fragments of `v` differ from those of `v - 1`, by fragment id.
struct FragmentChanges<'a> {
    /// Fragments in both whose deletion vector only grew, with the rows it removed.
    grown: Vec<(&'a Fragment, RemovedRows)>,
    /// Fragments of `v - 1` that `v` no longer has.
    dropped: Vec<Fragment>,
    /// Fragments in both changed otherwise (other data files, data overlays or physical rows, a
    /// deletion vector that shrank): `(old, new)`.
    rewritten: Vec<(Fragment, Fragment)>,
    /// Fragments only in `v`.
    added: Vec<&'a Fragment>,
}

/// Compares the fragments of `previous` (`v - 1`) and `ds` (`v`); unchanged ones are left out.
///
/// # Errors
/// Lance errors reading a deletion vector.
async fn compare_fragments<'a>(
    previous: &'a Dataset,
    ds: &'a Dataset,
    table: &str,
) -> Result<FragmentChanges<'a>, LanceEngineError> {
    let before: BTreeMap<u64, &Fragment> = previous.manifest().fragments.iter().map(|f| (f.id, f)).collect();
    let after: BTreeMap<u64, &Fragment> = ds.manifest().fragments.iter().map(|f| (f.id, f)).collect();
    let mut changes =
        FragmentChanges { grown: Vec::new(), dropped: Vec::new(), rewritten: Vec::new(), added: Vec::new() };
    for (id, old) in &before {
        match after.get(id) {
            Some(new) if new == old => {}
            Some(new) => match grown_deletions(previous, ds, old, new, table).await? {
                Some(rows) => changes.grown.push((*old, rows)),
                None => changes.rewritten.push(((*old).clone(), (*new).clone())),
            },
            None => changes.dropped.push((*old).clone()),
        }
    }
    changes.added = after.iter().filter(|(id, _)| !before.contains_key(id)).map(|(_, f)| *f).collect();
    Ok(changes)
}

/// The rows `new`'s deletion vector removes from `old` when the two are the same rows (same data
/// files, same data overlays, same physical rows: data files are immutable) and the deletion
/// vector only grew. `None` for any other change (the caller scans the fragment in both
/// versions): a data overlay (Lance 14 `Fragment::overlays`, `Operation::DataOverlay`) changes
/// cell values without changing the data files, the row count or the deletion vector.
///
/// # Errors
/// Lance errors reading a deletion file.
async fn grown_deletions(
    previous: &Dataset,
    ds: &Dataset,
    old: &Fragment,
    new: &Fragment,
    table: &str,
) -> Result<Option<RemovedRows>, LanceEngineError> {
    if old.files != new.files || old.overlays != new.overlays || old.physical_rows != new.physical_rows {
        return Ok(None);
    }
    let (Ok(fragment), Some(physical), Ok(index)) = (u32::try_from(old.id), old.physical_rows, usize::try_from(old.id))
    else {
        return Ok(None);
    };
    let (Some(then), Some(now)) = (previous.get_fragment(index), ds.get_fragment(index)) else {
        return Ok(None);
    };
    let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "read a deletion vector", source };
    let deleted_then = then.get_deletion_vector().await.map_err(lance_err)?;
    let deleted_now = now.get_deletion_vector().await.map_err(lance_err)?;
    let offsets: Vec<u32> = match (&deleted_then, &deleted_now) {
        (_, None) if deleted_then.as_ref().is_some_and(|d| !d.is_empty()) => return Ok(None),
        (_, None) => Vec::new(),
        (None, Some(now)) => now.to_sorted_iter().collect(),
        (Some(then), Some(now)) => {
            if !then.iter().all(|offset| now.contains(offset)) {
                return Ok(None);
            }
            now.to_sorted_iter().filter(|offset| !then.contains(*offset)).collect()
        }
    };
    let deleted_before = deleted_then.map_or(0, |d| d.len());
    let live_before = physical.saturating_sub(deleted_before) as u64;
    Ok(Some(RemovedRows { fragment, offsets, live_before }))
}

/// Reads the references of rows of version `v - 1` by row address.
struct RemovedRowReader<'a> {
    previous: &'a Arc<Dataset>,
    table: &'a str,
    root: &'a LakeRootUri,
    columns: &'a ReferenceColumns,
}

impl RemovedRowReader<'_> {
    /// Counts into `removed` the references of `rows` of `fragment` (at `v - 1`, where they are
    /// live): by address in chunks of [`TAKE_CHUNK`], or by one scan of the fragment keeping
    /// them when they are more than a quarter of its live rows.
    ///
    /// # Errors
    /// Lance errors; a read that does not return every row asked for; invalid references.
    async fn read(
        &self,
        fragment: &Fragment,
        rows: &RemovedRows,
        removed: &mut Removed<'_>,
        reads: &mut DiffReads,
    ) -> Result<(), LanceEngineError> {
        if rows.offsets.is_empty() || self.columns.is_empty() {
            return Ok(());
        }
        let wanted = rows.offsets.len() as u64;
        let read = if wanted.saturating_mul(4) > rows.live_before {
            let read = self.scan_keeping(fragment, &rows.offsets, removed).await?;
            reads.filtered.push((fragment.id, read));
            read
        } else {
            let read = self.take(rows, removed).await?;
            *reads.taken.entry(fragment.id).or_default() += read;
            read
        };
        if read != wanted {
            return Err(self.error(
                "read the removed rows",
                format!(
                    "fragment {} of the previous version returned {read} of the {wanted} rows its deletion vector removed",
                    fragment.id
                ),
            ));
        }
        Ok(())
    }

    /// Takes `rows` by row address; the number of rows read.
    async fn take(&self, rows: &RemovedRows, removed: &mut Removed<'_>) -> Result<u64, LanceEngineError> {
        let lance_err =
            |source| LanceEngineError::Lance { table: self.table.into(), action: "read the removed rows", source };
        let schema = self.previous.schema().project(&self.columns.names()).map_err(lance_err)?;
        let plan = Arc::new(
            ProjectionRequest::from_schema(schema).into_projection_plan(self.previous.clone()).map_err(lance_err)?,
        );
        let mut read = 0;
        for chunk in rows.offsets.chunks(TAKE_CHUNK) {
            let addresses: Vec<u64> = chunk.iter().map(|o| (u64::from(rows.fragment) << 32) | u64::from(*o)).collect();
            let batch = TakeBuilder::try_new_from_addresses(self.previous.clone(), addresses, plan.clone())
                .map_err(lance_err)?
                .execute()
                .await
                .map_err(lance_err)?;
            read += removed.batch(self, &batch).await?;
        }
        Ok(read)
    }

    /// Scans `fragment` at `v - 1` with row addresses and counts the rows at `offsets`
    /// (ascending); the number of rows kept.
    async fn scan_keeping(
        &self,
        fragment: &Fragment,
        offsets: &[u32],
        removed: &mut Removed<'_>,
    ) -> Result<u64, LanceEngineError> {
        let lance_err = |source| LanceEngineError::Lance { table: self.table.into(), action: "scan", source };
        let mut scanner = self.previous.scan();
        scanner.project(&self.columns.names()).map_err(lance_err)?;
        scanner.with_row_address();
        scanner.with_fragments(vec![fragment.clone()]);
        let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
        let mut read = 0;
        while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
            let addresses = batch
                .column_by_name("_rowaddr")
                .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
                .ok_or_else(|| self.error("scan", "the scan returned no row addresses".into()))?;
            let keep: BooleanArray =
                addresses.values().iter().map(|a| Some(offsets.binary_search(&(*a as u32)).is_ok())).collect();
            let kept = filter_record_batch(&batch, &keep).map_err(|e| self.error("scan", e.to_string()))?;
            read += removed.batch(self, &kept).await?;
        }
        Ok(read)
    }

    /// Hands every live row of `fragments` at `v - 1` (fragments `v` no longer has) to
    /// `removed`; the number of rows.
    async fn scan_whole(&self, fragments: Vec<Fragment>, removed: &mut Removed<'_>) -> Result<u64, LanceEngineError> {
        if fragments.is_empty() || self.columns.is_empty() {
            return Ok(0);
        }
        let lance_err = |source| LanceEngineError::Lance { table: self.table.into(), action: "scan", source };
        let mut scanner = self.previous.scan();
        scanner.io_buffer_size(crate::scan::SCAN_IO_BUFFER_BYTES);
        scanner.project(&self.columns.names()).map_err(lance_err)?;
        scanner.with_fragments(fragments);
        let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
        let mut read = 0;
        while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
            read += removed.batch(self, &batch).await?;
        }
        Ok(read)
    }

    fn error(&self, action: &'static str, message: String) -> LanceEngineError {
        LanceEngineError::Lance { table: self.table.into(), action, source: lance::Error::internal(message) }
    }
}

/// Where the references of removed rows go: counted in memory (an entry computed whole), or
/// written to a row log as they are read ([`logged_entry`]).
enum Removed<'a> {
    Counts(&'a mut ReferenceCounts),
    Log(&'a mut RowLogWriter),
}

impl Removed<'_> {
    /// Takes `batch`'s references (rows read by `reader`); its number of rows.
    ///
    /// # Errors
    /// [`LanceEngineError::Unreadable`] for invalid references; a failed log upload.
    async fn batch(&mut self, reader: &RemovedRowReader<'_>, batch: &RecordBatch) -> Result<u64, LanceEngineError> {
        match self {
            Removed::Counts(counts) => {
                reader
                    .columns
                    .visit(batch, reader.root, |id| counts.add(id, 1))
                    .map_err(|source| LanceEngineError::Unreadable { table: reader.table.into(), source })?;
                Ok(batch.num_rows() as u64)
            }
            Removed::Log(log) => log.push_batch(batch).await,
        }
    }
}

/// An upsert's journal entry that names the write's own row log as its additions
/// ([`logged_entry`]), not yet bound to its Lance version.
pub(crate) struct LoggedEntry {
    /// The head: the write's row log as `log`, a row log of the replaced rows' references as
    /// `removed` (none when no row was replaced).
    pub head: LogHead,
    /// References the written rows hold (the write's row log), not netted against `removed`.
    pub added: u64,
    /// References the replaced rows held, not netted against `added`.
    pub removed: u64,
}

/// The journal entry of the version `ds` is at, committed by a merge insert (Lance's
/// `WhenMatched::UpdateAll`, `WhenNotMatched::InsertAll`, duplicate source rows refused) whose
/// source streamed through a [`crate::journaling::JournalingReader`] into `log`: the additions
/// are `log` itself (no read of the new fragments, no second copy), the removals a row log of
/// the replaced rows' references, read by row address from `v - 1` as [`diff_entry`] reads
/// them. `None` when that would not be exact, and the caller computes the entry with
/// [`committed_entry`]. It is exact when all of these hold, each checked from the manifests:
/// - the reference columns of `v - 1`, of `v` and of the source are the same columns (so every
///   reference of a written row came from the source, none from the row it replaced);
/// - every fragment of `v - 1` is in `v` unchanged, or with the same data files and a deletion
///   vector that only grew, or not at all (its rows removed): no fragment rewritten in place
///   (a partial-column update);
/// - no source row has a null key (`log.null_key_rows`: Lance's index-based merge drops a
///   source row whose keys are all null), and no index of `v - 1` covers a key column (Lance
///   then takes that older plan; found by the attack pass: a dropped null-key row and a row
///   written twice would cancel out in the count below);
/// - the fragments new in `v` hold exactly as many live rows as the source streamed. Under
///   `UpdateAll` and `InsertAll` every source row with a non-null key yields at least one written
///   row (one per target row it matches, or one insert), so equal counts mean each source row
///   was written once: the multiset of the new rows' references is the log's. A source row that
///   matched two target rows (a table with duplicate keys) makes the counts differ.
///
/// A head's two logs may name the same identity (a row replaced by one referencing the same
/// object); readers sum them per identity (docs/journal-format.md).
///
/// # Errors
/// Lance errors; invalid references in the replaced rows; a failed log upload (the removals'
/// log is aborted).
pub(crate) async fn logged_entry(
    ds: &Dataset,
    table: &str,
    store: &LakeStore,
    log: &JournalLog,
    on: &[String],
) -> Result<Option<LoggedEntry>, LanceEngineError> {
    let version = ds.version().version;
    if version < 2 || log.null_key_rows > 0 {
        return Ok(None);
    }
    let lance_err =
        |action: &'static str| move |source| LanceEngineError::Lance { table: table.into(), action, source };
    let previous = ds.checkout_version(version - 1).await.map_err(lance_err("open the previous version"))?;
    let key_fields: Vec<i32> = on.iter().filter_map(|k| previous.schema().field(k).map(|f| f.id)).collect();
    if key_fields.len() != on.len() {
        return Ok(None);
    }
    let indices = previous.load_indices().await.map_err(lance_err("list the indexes"))?;
    if indices.iter().any(|index| index.fields.iter().any(|f| key_fields.contains(f))) {
        return Ok(None);
    }
    let (before_columns, after_columns) = (reference_columns(&previous, table)?, reference_columns(ds, table)?);
    let (mut table_names, mut source_names) = (after_columns.names(), log.columns.clone());
    table_names.sort();
    source_names.sort();
    if before_columns.columns() != after_columns.columns() || table_names != source_names {
        return Ok(None);
    }
    let previous = Arc::new(previous);
    let changes = compare_fragments(&previous, ds, table).await?;
    if !changes.rewritten.is_empty() {
        return Ok(None);
    }
    let mut written = 0u64;
    for fragment in &changes.added {
        match fragment.num_rows() {
            Some(rows) => written += rows as u64,
            None => return Ok(None),
        }
    }
    if written != log.rows {
        return Ok(None);
    }
    let dropped_fragments = changes.dropped.len();
    let mut writer = RowLogWriter::start(store, table, version, &before_columns).await?;
    let reader = RemovedRowReader { previous: &previous, table, root: store.root(), columns: &before_columns };
    let mut reads = DiffReads::default();
    let read = async {
        let mut removed = Removed::Log(&mut writer);
        for (fragment, rows) in &changes.grown {
            reader.read(fragment, rows, &mut removed, &mut reads).await?;
        }
        reader.scan_whole(changes.dropped, &mut removed).await
    }
    .await;
    if let Err(e) = read {
        writer.abort().await;
        return Err(e);
    }
    let removed = writer.references();
    let removed_log = match removed {
        0 => {
            writer.abort().await;
            None
        }
        _ => Some(writer.finish().await?),
    };
    let mut head = LogHead::new(table, version, DeltaKind::Delta, LogRef::of(log.write_id.clone(), &log.totals, false));
    if let Some(removed_log) = removed_log {
        head = head.with_removed(removed_log);
    }
    tracing::debug!(
        table,
        version,
        taken_rows = reads.taken.values().sum::<u64>(),
        filtered_fragments = reads.filtered.len(),
        dropped_fragments,
        "upsert journal entry named its row log"
    );
    Ok(Some(LoggedEntry { head, added: log.totals.references, removed }))
}

/// The journal entry of the version `ds` is at, which the calling write just committed: as
/// [`diff_entry`]; when that fails (a row of the previous version that cannot be read, written
/// by another client), a snapshot of the version from a full scan, which is exact on its own
/// (`added` is then every reference of the version, `removed` 0).
///
/// # Errors
/// [`LanceEngineError::Unjournaled`] naming the committed version when neither can be computed.
pub(crate) async fn committed_entry(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
) -> Result<VersionEntry, LanceEngineError> {
    let version = ds.version().version;
    let diffed = match diff_entry(ds, table, root).await {
        Ok(entry) => return Ok(entry),
        Err(e) => e,
    };
    match count_references(ds, table, root, None).await {
        Ok(now) => {
            tracing::warn!(table, version, "journaling the version as a snapshot: {diffed}");
            let added = now.total();
            let entry = ObjectReferenceDelta::snapshot(table, version, &now);
            Ok(VersionEntry { entry, added, removed: 0, reads: DiffReads { full_scan: true, ..DiffReads::default() } })
        }
        Err(scanned) => Err(LanceEngineError::Unjournaled {
            table: table.into(),
            version,
            reason: format!("{diffed}; a scan of version {version} failed too: {scanned}"),
        }),
    }
}

/// Whether the version `ds` is at holds another schema than the one its write read at
/// `read_version`. Lance rebases an `Append` over a concurrent `Project` or `Merge` (lance
/// `check_append_txn` lets them pass): the appended fragments keep the data of a column the version
/// no longer has, or lack one it gained, so the counts a write took from its own rows are not the
/// version's. Such a version is journaled from the two manifests ([`committed_entry`]) instead.
/// A version right after `read_version` was not rebased; a read version that can no longer be
/// opened counts as moved (the manifests are the safe source).
pub(crate) async fn schema_moved(ds: &Dataset, read_version: u64) -> bool {
    if ds.version().version <= read_version.saturating_add(1) {
        return false;
    }
    match ds.checkout_version(read_version).await {
        Ok(read) => read.schema() != ds.schema(),
        Err(_) => true,
    }
}

fn sum(counts: &[lake_common::ReferenceCount]) -> u64 {
    counts.iter().map(|r| r.count).sum()
}

#[cfg(test)]
mod tests {
    //! The entry of each version written by plain Lance (deletes, updates, merge inserts, a
    //! rebased delete and update) equals the netted full scans of `v - 1` and `v`, and reads only
    //! what changed.

    use super::*;
    use arrow_array::{ArrayRef, RecordBatchIterator, RecordBatchReader, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use lake_common::{data_location_field, DataLocationBuilder};
    use lance::dataset::{MergeInsertBuilder, UpdateBuilder, WhenMatched, WhenNotMatched, WriteMode, WriteParams};

    const TABLE: &str = "t";

    fn schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![Field::new("id", DataType::UInt64, false), data_location_field("file", true)]))
    }

    /// Rows `ids`, row `i` referencing `objects/<ULID>/<tag><i % 97>` (references repeat: counts
    /// above 1).
    fn rows(ids: impl Iterator<Item = u64>, tag: &str) -> Box<dyn RecordBatchReader + Send> {
        let ids: Vec<u64> = ids.collect();
        let mut files = DataLocationBuilder::new();
        for i in &ids {
            files.append(&format!("objects/01ARZ3NDEKTSV4RRFFQ69G5FAV/{tag}{}", i % 97), [7; 32], 1);
        }
        let columns: Vec<ArrayRef> = vec![Arc::new(UInt64Array::from(ids)), Arc::new(files.finish())];
        let batch = RecordBatch::try_new(schema(), columns).unwrap();
        Box::new(RecordBatchIterator::new(vec![Ok(batch)], schema()))
    }

    struct Table {
        _dir: tempfile::TempDir,
        root: LakeRootUri,
    }

    /// A table of rows `0..n` in fragments of `per_fragment` rows, at version 1.
    async fn table(n: u64, per_fragment: usize) -> (Table, Dataset) {
        let dir = tempfile::tempdir().unwrap();
        let root = LakeRootUri::parse(dir.path().to_str().unwrap()).unwrap();
        let uri = dir.path().join("tables/t.lance").display().to_string();
        let params = WriteParams { mode: WriteMode::Create, max_rows_per_file: per_fragment, ..Default::default() };
        let ds = Dataset::write(rows(0..n, "r"), uri.as_str(), Some(params)).await.unwrap();
        (Table { _dir: dir, root }, ds)
    }

    /// The entry of `ds`'s version, checked against full scans of both versions; what it read.
    async fn exact(t: &Table, ds: &Dataset) -> DiffReads {
        let version = ds.version().version;
        let previous = ds.checkout_version(version - 1).await.unwrap();
        let now = count_references(ds, TABLE, &t.root, None).await.unwrap();
        let then = count_references(&previous, TABLE, &t.root, None).await.unwrap();
        let full = ObjectReferenceDelta::delta(TABLE, version, &now, &then);
        let diffed = diff_entry(ds, TABLE, &t.root).await.unwrap();
        assert_eq!(diffed.entry, full, "version {version}: the entry is not the full scans' difference");
        assert_eq!((diffed.added, diffed.removed), (sum(&full.added), sum(&full.removed)));
        assert!(!diffed.reads.full_scan);
        diffed.reads
    }

    fn taken(pairs: &[(u64, u64)]) -> BTreeMap<u64, u64> {
        pairs.iter().copied().collect()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_one_row_delete_of_a_large_fragment_reads_that_row_only() {
        let (t, mut ds) = table(50_000, 1_000_000).await;
        ds.delete("id = 31337").await.unwrap();
        let reads = exact(&t, &ds).await;
        assert_eq!(reads, DiffReads { taken: taken(&[(0, 1)]), ..DiffReads::default() });
        // A deletion vector that already had rows grows by two: two rows read.
        ds.delete("id = 7 OR id = 49999").await.unwrap();
        let reads = exact(&t, &ds).await;
        assert_eq!(reads, DiffReads { taken: taken(&[(0, 2)]), ..DiffReads::default() });
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_one_row_update_of_a_large_fragment_reads_that_row_and_the_new_fragment() {
        let (t, ds) = table(50_000, 1_000_000).await;
        let job = UpdateBuilder::new(Arc::new(ds)).update_where("id = 123").unwrap().set("file", "NULL").unwrap();
        let ds = job.build().unwrap().execute().await.unwrap().new_dataset;
        let reads = exact(&t, &ds).await;
        let new: Vec<u64> = ds.manifest().fragments.iter().map(|f| f.id).filter(|id| *id != 0).collect();
        assert_eq!(new.len(), 1);
        assert_eq!(reads, DiffReads { taken: taken(&[(0, 1)]), scanned_after: new, ..DiffReads::default() });
        // Another column updated: the row is rewritten, its reference removed and added (net 0).
        let job = UpdateBuilder::new(ds).update_where("id = 40000").unwrap().set("id", "id + 1000000");
        let ds = job.unwrap().build().unwrap().execute().await.unwrap().new_dataset;
        let reads = exact(&t, &ds).await;
        assert_eq!(reads.taken, taken(&[(0, 1)]));
        assert_eq!((reads.scanned_before.len(), reads.scanned_after.len()), (0, 1));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn deletes_spanning_fragments_and_removing_whole_fragments_are_exact() {
        let (t, mut ds) = table(3_000, 1_000).await;
        let ids: Vec<u64> = ds.manifest().fragments.iter().map(|f| f.id).collect();
        assert_eq!(ids.len(), 3);
        // 100 rows of the first fragment (by address), all of the second (Lance drops it).
        ds.delete("id >= 900 AND id < 2000").await.unwrap();
        assert_eq!(ds.manifest().fragments.len(), 2);
        let reads = exact(&t, &ds).await;
        assert_eq!(
            reads,
            DiffReads { taken: taken(&[(ids[0], 100)]), scanned_before: vec![ids[1]], ..DiffReads::default() }
        );
        // A third of what is left in each: more than a quarter, one filtered scan each.
        ds.delete("id % 3 = 0").await.unwrap();
        let reads = exact(&t, &ds).await;
        assert_eq!(reads, DiffReads { filtered: vec![(ids[0], 300), (ids[2], 333)], ..DiffReads::default() });
        // Everything left: both fragments dropped.
        ds.delete("id >= 0").await.unwrap();
        let reads = exact(&t, &ds).await;
        assert_eq!(reads, DiffReads { scanned_before: vec![ids[0], ids[2]], ..DiffReads::default() });
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn merge_inserts_with_and_without_duplicate_keys_are_exact() {
        let (t, ds) = table(2_000, 1_000).await;
        let merge = |ds: Dataset, source: Box<dyn RecordBatchReader + Send>| async move {
            let job = MergeInsertBuilder::try_new(Arc::new(ds), vec!["id".into()])
                .unwrap()
                .when_matched(WhenMatched::UpdateAll)
                .when_not_matched(WhenNotMatched::InsertAll)
                .try_build()
                .unwrap();
            job.execute_reader(source).await.map(|(ds, _)| ds)
        };
        // Ten rows of the first fragment replaced, five inserted.
        let ds = merge(ds, rows((990..1_005).chain(2_000..2_005), "u")).await.unwrap();
        let reads = exact(&t, &ds).await;
        assert_eq!(reads.taken, taken(&[(0, 10), (1, 5)]));
        assert!(reads.scanned_before.is_empty() && reads.scanned_after.len() == 1, "{reads:?}");
        // Duplicate keys in the source: two source rows matching one row are refused (Lance:
        // "Ambiguous merge inserts are prohibited"); a new key twice inserts both rows.
        let ambiguous = rows([5, 5, 9_000].into_iter(), "d");
        assert!(merge((*ds).clone(), ambiguous).await.is_err());
        let ds = merge((*ds).clone(), rows([1_500, 9_000, 9_000].into_iter(), "d")).await.unwrap();
        assert_eq!(ds.count_rows(Some("id = 9000".into())).await.unwrap(), 2);
        let reads = exact(&t, &ds).await;
        assert_eq!(reads.taken, taken(&[(1, 1)]));
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_delete_and_an_update_rebased_onto_a_concurrent_delete_are_exact() {
        let (t, ds) = table(10_000, 1_000_000).await;
        let (mut first, mut second) = (ds.clone(), ds.clone());
        first.delete("id = 1").await.unwrap();
        // Read at version 1, committed after version 2: Lance rebases it (deletion vectors merged).
        second.delete("id = 2").await.unwrap();
        assert_eq!(second.version().version, 3);
        let reads = exact(&t, &second).await;
        assert_eq!(reads, DiffReads { taken: taken(&[(0, 1)]), ..DiffReads::default() });
        // An update read at version 1 too, rebased onto both deletes.
        let job = UpdateBuilder::new(Arc::new(ds)).update_where("id = 3 OR id = 4").unwrap().set("file", "NULL");
        let updated = job.unwrap().build().unwrap().execute().await.unwrap().new_dataset;
        assert_eq!(updated.version().version, 4);
        let reads = exact(&t, &updated).await;
        assert_eq!(reads.taken, taken(&[(0, 2)]));
    }
}
