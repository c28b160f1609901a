//! A read-ahead of the rows a row change removes: while Lance stages a delete or runs an update,
//! a scan of the same version with the same predicate finds the matched rows' addresses and a
//! take by address reads their reference columns (what the entry would otherwise take after
//! Lance's change, now beside it). The journal
//! entry, computed afterwards from the two manifests (`crate::version_diff`), takes the removed
//! rows' references from it instead of reading them again by row address.
//!
//! Exactness never rests on the predicate: the rows the entry removes are still the ones the
//! manifests show removed (deletion vectors that grew, fragments dropped). The read-ahead only
//! serves their references, and only when
//! - the version it read is the committed version's predecessor, by version and manifest path
//!   (not when Lance rebased the change onto a concurrent commit): data files are immutable and
//!   a version's rows are addressed by `(fragment_id << 32) | offset`, so a row read at that
//!   address of that version is the removed row;
//! - it holds every removed row of a fragment (else that fragment is read by address as before):
//!   a predicate that does not evaluate the same way twice (`random()`) makes the two sets
//!   differ, and the fragment falls back;
//! - for a fragment the change dropped, it holds as many rows of the fragment as the fragment had
//!   live rows (each address once, each live at that version: so all of them).
//!
//! A read-ahead that fails, or grows beyond [`READ_AHEAD_MAX_ROWS`] or [`READ_AHEAD_MAX_BYTES`], is dropped (the entry is
//! then computed as without it); it never fails the change.

use crate::scan::reference_columns;
use futures::TryStreamExt;
use lance::dataset::{ProjectionRequest, TakeBuilder};
use lance::deps::arrow_array::{Array, BooleanArray, RecordBatch, UInt32Array, UInt64Array};
use lance::deps::datafusion::arrow::compute::{filter_record_batch, take_record_batch};
use lance::table::format::Fragment;
use lance::Dataset;
use std::collections::HashMap;
use std::sync::Arc;

/// The most memory a read-ahead's batches may hold (Arrow's accounting); a larger one is dropped
/// (a change of that many rows reads them by fragment scans anyway).
pub(crate) const READ_AHEAD_MAX_BYTES: usize = 32 << 20;

/// Rows read by address in one take.
const TAKE_CHUNK: usize = 8192;

/// The most rows a read-ahead reads (a change of more rows reads most of them by fragment scans
/// anyway).
pub(crate) const READ_AHEAD_MAX_ROWS: usize = 100_000;

/// The row addresses of `batch` (its `_rowaddr` column), when it has them, none null.
fn row_addresses(batch: &RecordBatch) -> Option<UInt64Array> {
    let addresses = batch.column_by_name("_rowaddr")?.as_any().downcast_ref::<UInt64Array>()?;
    (addresses.null_count() == 0).then(|| addresses.clone())
}

/// The reference columns of the rows of one version that a predicate matched, by row address.
pub(crate) struct ReadAhead {
    /// The version read.
    version: u64,
    /// Its manifest's path.
    manifest: String,
    /// The rows' reference columns, as a scan returned them (`_rowaddr` removed).
    batches: Vec<RecordBatch>,
    /// Each batch's row addresses.
    addresses: Vec<UInt64Array>,
    /// Row address to (batch, row).
    rows: HashMap<u64, (usize, u32)>,
    /// Rows held per fragment id.
    per_fragment: HashMap<u32, u64>,
}

impl ReadAhead {
    /// Scans `ds` for the addresses of the rows matching `predicate` (the predicate's columns
    /// only, as Lance's delete scans), then takes their reference columns by address, sorted,
    /// in chunks of [`TAKE_CHUNK`]. `None` when the table has no reference column (nothing to
    /// read), when more than [`READ_AHEAD_MAX_ROWS`] rows match or the rows outgrow
    /// [`READ_AHEAD_MAX_BYTES`], or when a row address repeats.
    ///
    /// # Errors
    /// Lance errors (an invalid predicate); an unreadable schema.
    pub(crate) async fn scan(
        ds: &Arc<Dataset>,
        table: &str,
        predicate: &str,
    ) -> Result<Option<Self>, crate::LanceEngineError> {
        let columns = reference_columns(ds, table)?;
        if columns.is_empty() {
            return Ok(None);
        }
        let lance_err = |source| crate::LanceEngineError::Lance { table: table.into(), action: "read ahead", source };
        let mut scanner = ds.scan();
        scanner.project::<&str>(&[]).map_err(lance_err)?;
        scanner.with_row_address();
        scanner.filter(predicate).map_err(lance_err)?;
        let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
        let mut matched: Vec<u64> = Vec::new();
        while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
            let Some(addresses) = row_addresses(&batch) else { return Ok(None) };
            matched.extend(addresses.values().iter().copied());
            if matched.len() > READ_AHEAD_MAX_ROWS {
                return Ok(None);
            }
        }
        drop(stream);
        matched.sort_unstable();
        let names = columns.names();
        let schema = ds.schema().project(&names).map_err(lance_err)?;
        let plan =
            Arc::new(ProjectionRequest::from_schema(schema).into_projection_plan(ds.clone()).map_err(lance_err)?);
        let mut ahead = ReadAhead {
            version: ds.version().version,
            manifest: ds.manifest_location().path.to_string(),
            batches: Vec::new(),
            addresses: Vec::new(),
            rows: HashMap::new(),
            per_fragment: HashMap::new(),
        };
        let mut bytes = 0usize;
        for chunk in matched.chunks(TAKE_CHUNK) {
            let batch = TakeBuilder::try_new_from_addresses(ds.clone(), chunk.to_vec(), plan.clone())
                .map_err(lance_err)?
                .with_row_address(true)
                .execute()
                .await
                .map_err(lance_err)?;
            bytes = bytes.saturating_add(batch.get_array_memory_size());
            if bytes > READ_AHEAD_MAX_BYTES {
                return Ok(None);
            }
            let Some(addresses) = row_addresses(&batch) else { return Ok(None) };
            let keep: Vec<usize> = names.iter().filter_map(|n| batch.schema().index_of(n).ok()).collect();
            if keep.len() != names.len() {
                return Ok(None);
            }
            let Ok(batch) = batch.project(&keep) else { return Ok(None) };
            let index = ahead.batches.len();
            for (row, address) in addresses.values().iter().enumerate() {
                let Ok(row) = u32::try_from(row) else { return Ok(None) };
                if ahead.rows.insert(*address, (index, row)).is_some() {
                    return Ok(None);
                }
                *ahead.per_fragment.entry((*address >> 32) as u32).or_default() += 1;
            }
            ahead.batches.push(batch);
            ahead.addresses.push(addresses);
        }
        Ok(Some(ahead))
    }

    /// Whether this read-ahead read `previous` (the same version, by its manifest).
    pub(crate) fn read(&self, previous: &Dataset) -> bool {
        previous.version().version == self.version && previous.manifest_location().path.as_ref() == self.manifest
    }

    /// The rows at `offsets` of fragment `fragment`, when it holds every one of them.
    pub(crate) fn rows(&self, fragment: u32, offsets: &[u32]) -> Option<Vec<RecordBatch>> {
        let mut picked: Vec<Vec<u32>> = vec![Vec::new(); self.batches.len()];
        for offset in offsets {
            let (batch, row) = self.rows.get(&((u64::from(fragment) << 32) | u64::from(*offset)))?;
            picked.get_mut(*batch)?.push(*row);
        }
        let mut out = Vec::new();
        for (batch, rows) in self.batches.iter().zip(picked) {
            if !rows.is_empty() {
                out.push(take_record_batch(batch, &UInt32Array::from(rows)).ok()?);
            }
        }
        Some(out)
    }

    /// Every live row of `fragment` (of the version read), when it holds all of them: as many
    /// rows of the fragment as its manifest counts live.
    pub(crate) fn whole(&self, fragment: &Fragment) -> Option<Vec<RecordBatch>> {
        let id = u32::try_from(fragment.id).ok()?;
        let live = fragment.num_rows()? as u64;
        if self.per_fragment.get(&id).copied().unwrap_or(0) != live {
            return None;
        }
        let mut out = Vec::new();
        for (batch, addresses) in self.batches.iter().zip(&self.addresses) {
            let keep: BooleanArray = addresses.values().iter().map(|a| Some((*a >> 32) as u32 == id)).collect();
            if keep.true_count() > 0 {
                out.push(filter_record_batch(batch, &keep).ok()?);
            }
        }
        Some(out)
    }
}

/// A read-ahead running beside Lance's change (a spawned task, aborted when dropped).
pub(crate) struct ReadAheadTask(Option<tokio::task::JoinHandle<Option<ReadAhead>>>);

impl ReadAheadTask {
    /// Starts reading ahead the rows of `ds` matching `predicate`.
    pub(crate) fn start(ds: Arc<Dataset>, table: &str, predicate: &str) -> Self {
        let (table, predicate) = (table.to_string(), predicate.to_string());
        let started = std::time::Instant::now();
        ReadAheadTask(Some(tokio::spawn(async move {
            let read = ReadAhead::scan(&ds, &table, &predicate).await;
            match &read {
                Ok(Some(ahead)) => tracing::debug!(
                    table,
                    rows = ahead.rows.len(),
                    read_s = started.elapsed().as_secs_f64(),
                    "read ahead the matched rows"
                ),
                Ok(None) => tracing::debug!(table, "no read-ahead: no reference column, or too many rows"),
                Err(e) => tracing::debug!(table, "no read-ahead: {e}"),
            }
            read.ok().flatten()
        })))
    }

    /// The read-ahead, once it finished (`None` when it failed or gave up).
    pub(crate) async fn finish(mut self) -> Option<ReadAhead> {
        let handle = self.0.take()?;
        handle.await.ok().flatten()
    }
}

impl Drop for ReadAheadTask {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}
