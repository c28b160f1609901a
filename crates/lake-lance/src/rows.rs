//! Reading rows back: [`LanceEngine::read_rows`] and [`LanceEngine::read_rows_stream`] read the
//! rows a [`RowSelection`] names from the latest version of a table, with the columns asked
//! for, through Lance's own reads (`Dataset::take` for row offsets, a filtered and projected
//! scan otherwise). Reads only: nothing is written, nothing journaled.
//!
//! The row order is the table's scan order (fragment by fragment, rows in each fragment in
//! order, deleted rows skipped), the order in which Lance's `take` counts row offsets; for
//! [`RowSelection::Indices`], the rows come in the order of the offsets given.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::scan::SCAN_IO_BUFFER_BYTES;
use arrow_array::RecordBatch;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use lance::dataset::ProjectionRequest;
use lance::Dataset;

/// Which rows of a table's latest version to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowSelection {
    /// Row offsets in the latest version (0-based, in the table's scan order, as Lance's `take`
    /// counts them: deleted rows are not counted). Duplicates are allowed; the rows come back
    /// in the order given.
    Indices(Vec<u64>),
    /// A Lance SQL predicate, e.g. `episode = 'Asia'`: exactly one SQL expression, checked as
    /// [`LanceEngine::delete`] checks its predicate ([`crate::sql::check_predicate`]).
    Filter(String),
    /// Every row.
    All,
}

impl LanceEngine {
    /// The rows of `selection` of the latest version of `table`, with `columns` (top-level
    /// names, or nested paths such as `file.uri`; every column when `None`), as record batches
    /// in scan order; for [`RowSelection::Indices`], one batch holding the rows in the order
    /// given (duplicates repeated). Memory: the selected rows (use
    /// [`LanceEngine::read_rows_stream`] for large selections).
    ///
    /// # Errors
    /// - [`LanceEngineError::NoSuchTable`] when `table` has no dataset;
    /// - [`LanceEngineError::InvalidInput`] for a row offset at or past the version's row count
    ///   (naming the offset and the count), a column the table does not have (naming it), or a
    ///   predicate that is not exactly one SQL expression;
    /// - [`LanceEngineError::Lance`] when Lance fails (a predicate it cannot plan, such as one
    ///   naming an unknown column, or a failed read).
    pub async fn read_rows(
        &self,
        table: &str,
        selection: &RowSelection,
        columns: Option<&[String]>,
    ) -> Result<Vec<RecordBatch>, LanceEngineError> {
        self.read_rows_stream(table, selection, columns).await?.try_collect().await
    }

    /// The rows of [`LanceEngine::read_rows`] as a stream of record batches, read as the stream
    /// is polled: for [`RowSelection::Filter`] and [`RowSelection::All`], memory is about one
    /// batch plus Lance's read-ahead (at most [`SCAN_IO_BUFFER_BYTES`]);
    /// [`RowSelection::Indices`] is read in one `take`, before this returns, and streamed as
    /// that one batch.
    ///
    /// # Errors
    /// As [`LanceEngine::read_rows`]: every check (table, offsets, columns, predicate) and the
    /// scan's planning fail here, before the stream; a read that fails later is the stream's
    /// [`LanceEngineError::Lance`] item, after which it ends.
    pub async fn read_rows_stream(
        &self,
        table: &str,
        selection: &RowSelection,
        columns: Option<&[String]>,
    ) -> Result<BoxStream<'static, Result<RecordBatch, LanceEngineError>>, LanceEngineError> {
        if let RowSelection::Filter(predicate) = selection {
            crate::sql::check_predicate(predicate)?;
        }
        let ds = self.open(table).await?;
        if let Some(columns) = columns {
            check_columns(&ds, table, columns)?;
        }
        let lance_err = |action| lance_error(table, action);
        match selection {
            RowSelection::Indices(indices) => {
                check_indices(&ds, table, indices).await?;
                let projection = match columns {
                    Some(columns) => ProjectionRequest::from_schema(
                        ds.schema().project(columns).map_err(lance_err("project columns"))?,
                    ),
                    None => ProjectionRequest::from_schema(ds.schema().clone()),
                };
                let batch = ds.take(indices, projection).await.map_err(lance_err("take rows"))?;
                Ok(futures::stream::once(async move { Ok(batch) }).boxed())
            }
            RowSelection::Filter(_) | RowSelection::All => {
                let mut scanner = ds.scan();
                scanner.io_buffer_size(SCAN_IO_BUFFER_BYTES);
                if let Some(columns) = columns {
                    scanner.project(columns).map_err(lance_err("project columns"))?;
                }
                if let RowSelection::Filter(predicate) = selection {
                    scanner.filter(predicate).map_err(lance_err("filter rows"))?;
                }
                let stream = scanner.try_into_stream().await.map_err(lance_err("scan rows"))?;
                Ok(stream.map_err(lance_err("scan rows")).boxed())
            }
        }
    }
}

/// The engine's error for Lance's failure to `action` on `table`.
fn lance_error(table: &str, action: &'static str) -> impl Fn(lance::Error) -> LanceEngineError + Send + 'static {
    let table = table.to_string();
    move |source| LanceEngineError::Lance { table: table.clone(), action, source }
}

/// Refuses a column `ds`'s schema does not have, by name.
fn check_columns(ds: &Dataset, table: &str, columns: &[String]) -> Result<(), LanceEngineError> {
    let schema = ds.schema();
    if let Some(unknown) = columns.iter().find(|c| schema.field(c).is_none()) {
        let known: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
        return Err(LanceEngineError::InvalidInput(format!(
            "table `{table}` has no column `{unknown}` (its columns: {}); nothing was read",
            known.join(", ")
        )));
    }
    Ok(())
}

/// Refuses a row offset at or past the row count of `ds`'s version (Lance's `take` would
/// return a null row for it), naming the offset and the count.
async fn check_indices(ds: &Dataset, table: &str, indices: &[u64]) -> Result<(), LanceEngineError> {
    let Some(largest) = indices.iter().copied().max() else { return Ok(()) };
    let rows = ds.count_rows(None).await.map_err(lance_error(table, "count rows"))? as u64;
    if largest >= rows {
        let valid = match rows {
            0 => "no row index is valid".to_string(),
            n => format!("indices 0 to {}", n - 1),
        };
        return Err(LanceEngineError::InvalidInput(format!(
            "row index {largest} is out of range: table `{table}` version {} has {rows} rows ({valid}); nothing was read",
            ds.version().version
        )));
    }
    Ok(())
}
