//! Reference counts by scanning a version's DataLocation columns.
//!
//! This is the full-scan path: `delete` uses it (restricted by the predicate) to record the
//! counts of the rows it removes, and verification and repair compare it with the journal.

use crate::error::LanceEngineError;
use futures::TryStreamExt;
use lake_common::{LakeRootUri, ReferenceColumns, ReferenceCounts};
use lance::Dataset;

/// The reference columns of `ds`'s schema.
///
/// # Errors
/// [`LanceEngineError::Location`] when a marked column has the wrong layout.
pub fn reference_columns(ds: &Dataset, table: &str) -> Result<ReferenceColumns, LanceEngineError> {
    let schema = arrow_schema::Schema::from(ds.schema());
    ReferenceColumns::from_stored_schema(&schema)
        .map_err(|source| LanceEngineError::Location { table: table.into(), source })
}

/// Counts the references of the rows of `ds` (at its checked-out version) that match `filter`
/// (Lance SQL), or of every row.
///
/// # Errors
/// Lance errors, invalid references.
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
    let columns = reference_columns(ds, table)?;
    let mut counts = ReferenceCounts::new();
    if columns.is_empty() || fragments.as_ref().is_some_and(Vec::is_empty) {
        return Ok(counts);
    }
    let lance_err = |source| LanceEngineError::Lance { table: table.into(), action: "scan", source };
    let mut scanner = ds.scan();
    scanner.project(&columns.names()).map_err(lance_err)?;
    if let Some(f) = filter {
        scanner.filter(f).map_err(lance_err)?;
    }
    if let Some(fragments) = fragments {
        scanner.with_fragments(fragments);
    }
    let mut stream = scanner.try_into_stream().await.map_err(lance_err)?;
    while let Some(batch) = stream.try_next().await.map_err(lance_err)? {
        columns
            .visit(&batch, root, |id| counts.add(id, 1))
            .map_err(|source| LanceEngineError::Location { table: table.into(), source })?;
    }
    Ok(counts)
}
