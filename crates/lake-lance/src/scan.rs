//! Reference counts by scanning a version's DataLocation columns.
//!
//! This is the full-scan path: `delete` uses it (restricted by the predicate) to record the
//! counts of the rows it removes, and verification and repair compare it with the journal.

use crate::error::LanceEngineError;
use futures::TryStreamExt;
use lake_common::{LakeRootUri, LocationError, ReferenceColumns, ReferenceCounts};
use lance::Dataset;

/// The reference columns of `ds`'s schema (at its checked-out version).
///
/// # Errors
/// [`LanceEngineError::Unreadable`] when a column cannot be read with certainty (a marked
/// column of the wrong layout, a look-alike, a nested DataLocation, a blob v2 column).
pub fn reference_columns(ds: &Dataset, table: &str) -> Result<ReferenceColumns, LanceEngineError> {
    let schema = arrow_schema::Schema::from(ds.schema());
    ReferenceColumns::from_stored_schema(&schema)
        .map_err(|source| LanceEngineError::Unreadable { table: table.into(), source })
}

/// The reference columns of `ds`'s schema, for a write about to commit a version that starts
/// from `ds` (or has its schema): every write checks this before its commit, so that it never
/// commits a version it cannot journal.
///
/// # Errors
/// [`LanceEngineError::UnreadableTable`] (nothing was committed), which names the top-level
/// column to fix ([`top_level_column`]).
pub(crate) fn writable_columns(ds: &Dataset, table: &str) -> Result<ReferenceColumns, LanceEngineError> {
    reference_columns(ds, table).map_err(|e| match e {
        LanceEngineError::Unreadable { table, source } => {
            LanceEngineError::UnreadableTable { table, version: ds.version().version, source: Box::new(source) }
        }
        other => other,
    })
}

/// The top-level column a [`LocationError`] of a schema is about (`meta` for `meta.file`).
pub(crate) fn top_level_column(e: &LocationError) -> &str {
    let column = match e {
        LocationError::BadLayout { column, .. }
        | LocationError::LocationLike { column, .. }
        | LocationError::Nested { column, .. }
        | LocationError::Unsupported { column, .. }
        | LocationError::BadUri { column, .. }
        | LocationError::MissingColumn { column } => column.as_str(),
    };
    column.split('.').next().unwrap_or(column)
}

/// Bytes of storage reads a scan of reference columns holds ahead of decoding (Lance's
/// `Scanner::io_buffer_size`). Lance's default is 2 GiB (`LANCE_DEFAULT_IO_BUFFER_SIZE`), so a
/// scan of a large version (repair, verify) read ahead up to that much: repair's peak RSS grew
/// from 175 MB to 458 MB between versions of 1 and 10 million references with it. 64 MiB keeps
/// a local or S3 scan busy (many requests of a few MiB in flight) at a bounded cost.
pub const SCAN_IO_BUFFER_BYTES: u64 = 64 * 1024 * 1024;

/// The read-ahead of a full scan run under a memory budget of `budget` bytes (repair, verify):
/// a quarter of the budget, between 8 MiB and [`SCAN_IO_BUFFER_BYTES`], so Lance's buffered
/// reads count against the budget they run under (16 MiB at `--memory-budget-mib 64`; a version
/// of 10 million references filled the 64 MiB one, adding 40 MB to repair's peak RSS).
pub fn scan_io_buffer_bytes(budget: usize) -> u64 {
    (budget as u64 / 4).clamp(8 * 1024 * 1024, SCAN_IO_BUFFER_BYTES)
}

/// Counts the references of the rows of `ds` (at its checked-out version) that match `filter`
/// (one Lance SQL expression, [`crate::sql::check_predicate`]), or of every row.
///
/// # Errors
/// [`LanceEngineError::InvalidInput`] for a filter that is not one SQL expression; Lance errors;
/// [`LanceEngineError::Unreadable`] for references that cannot be read.
pub async fn count_references(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    filter: Option<&str>,
) -> Result<ReferenceCounts, LanceEngineError> {
    count_scanned(ds, table, root, filter, None).await
}

/// As [`count_references`], restricted to `fragments` of `ds` when given (deletion vectors
/// applied as `ds`'s manifest has them).
///
/// # Errors
/// As [`count_references`].
pub(crate) async fn count_scanned(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    filter: Option<&str>,
    fragments: Option<Vec<lance::table::format::Fragment>>,
) -> Result<ReferenceCounts, LanceEngineError> {
    let mut counts = ReferenceCounts::new();
    if let Some(f) = filter {
        crate::sql::check_predicate(f)?;
    }
    scan_filtered(ds, table, root, filter, fragments, SCAN_IO_BUFFER_BYTES, |id| {
        counts.add(id, 1);
        Ok(())
    })
    .await?;
    Ok(counts)
}

/// Hands every reference of the rows of `ds` (at its checked-out version) to `visit`, one per
/// row and reference column, in scan order, reading ahead at most `io_buffer` bytes
/// ([`scan_io_buffer_bytes`]): memory is one batch plus the read-ahead, whatever the version's
/// size.
///
/// # Errors
/// Lance errors; [`LanceEngineError::Unreadable`] for references that cannot be read; what
/// `visit` returns.
pub(crate) async fn visit_scanned(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    io_buffer: u64,
    visit: impl FnMut(lake_common::ObjectIdentity) -> Result<(), LanceEngineError>,
) -> Result<(), LanceEngineError> {
    scan_filtered(ds, table, root, None, None, io_buffer, visit).await
}

async fn scan_filtered(
    ds: &Dataset,
    table: &str,
    root: &LakeRootUri,
    filter: Option<&str>,
    fragments: Option<Vec<lance::table::format::Fragment>>,
    io_buffer: u64,
    mut visit: impl FnMut(lake_common::ObjectIdentity) -> Result<(), LanceEngineError>,
) -> Result<(), LanceEngineError> {
    let columns = reference_columns(ds, table)?;
    if columns.is_empty() || fragments.as_ref().is_some_and(Vec::is_empty) {
        return Ok(());
    }
    let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "scan", source };
    let mut scanner = ds.scan();
    scanner.io_buffer_size(io_buffer);
    scanner.project(&columns.names()).map_err(lance_err)?;
    if let Some(f) = filter {
        scanner.filter(f).map_err(lance_err)?;
    }
    if let Some(fragments) = fragments {
        scanner.with_fragments(fragments);
    }
    let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
    while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
        let mut failed = None;
        columns
            .visit(&batch, root, |id| {
                if failed.is_none() {
                    if let Err(e) = visit(id) {
                        failed = Some(e);
                    }
                }
            })
            .map_err(|source| LanceEngineError::Unreadable { table: table.into(), source })?;
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}
