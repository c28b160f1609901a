//! Tables: the writes that commit a version and journal it (append, overwrite, upsert, delete,
//! update, compact, restore, tag, cleanup, and the two phases of a distributed write: prepare a
//! piece, commit pieces), each run by [`run_write`] so that Ctrl-C never separates a commit
//! from its journal entry; the versions; and `refs verify`.

use crate::arrow_ffi::ArrowStream;
use crate::errors::Failure;
use crate::json;
use crate::lake::NativeLake;
use crate::marking::MarkingReader;
use crate::runtime::{committed, committed_if_some, parse_duration, run, run_write};
use ::lake::common::ErrorKind;
use ::lake::lance::update::Assignment;
use ::lake::lance::{PieceMode, PreparedPiece, RowSelection};
use arrow_array::{RecordBatchReader, StructArray};
use pyo3::prelude::*;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A batch source from any Arrow stream producer, its plain DataLocation columns marked
/// ([`crate::marking`]).
fn source(data: ArrowStream, stop: &Arc<AtomicBool>) -> Box<dyn RecordBatchReader + Send> {
    Box::new(MarkingReader::new(Box::new(data.0), stop.clone()))
}

/// A commit as JSON (`{table, version, rows, references_added, references_removed, rebased}`).
/// The version has landed: a failure to encode the report says so (never inviting a retry that
/// would write the rows twice).
pub(crate) fn commit_json(o: &::lake::lance::CommitOutcome) -> Result<String, Failure> {
    json(o).map_err(|f| {
        Failure::after_commit(o.version, format!("version {} was committed and journaled, but {f}", o.version))
    })
}

#[pymethods]
impl NativeLake {
    /// The rows of `table`'s latest version chosen by `indices` (row offsets, in the order
    /// given) or `filter` (a Lance SQL predicate), every row when neither is given, with
    /// `columns` (all when `None`): pyarrow struct arrays, one per batch, at least one (empty
    /// when no row matched, so that the schema is known).
    #[pyo3(signature = (table, indices=None, filter=None, columns=None))]
    fn table_rows<'py>(
        &self,
        py: Python<'py>,
        table: String,
        indices: Option<Vec<u64>>,
        filter: Option<String>,
        columns: Option<Vec<String>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let selection = match (indices, filter) {
            (Some(_), Some(_)) => {
                return Err(Failure::new(ErrorKind::InvalidInput, "give indices or a filter, not both".into()).into())
            }
            (Some(indices), None) => RowSelection::Indices(indices),
            (None, Some(filter)) => RowSelection::Filter(filter),
            (None, None) => RowSelection::All,
        };
        let engine = self.engine()?;
        let batches = run(py, async move {
            let mut batches = engine.read_rows(&table, &selection, columns.as_deref()).await?;
            if batches.is_empty() {
                batches = engine.read_rows(&table, &RowSelection::Indices(Vec::new()), columns.as_deref()).await?;
            }
            Ok(batches)
        })?;
        batches.into_iter().map(|b| crate::arrow_ffi::to_pyarrow(py, &StructArray::from(b))).collect()
    }
}

#[pymethods]
impl NativeLake {
    /// Appends (or, with `overwrite`, replaces the content with) the rows of an Arrow stream.
    /// Returns the commit as JSON.
    fn write(&self, py: Python<'_>, table: String, data: ArrowStream, overwrite: bool) -> PyResult<String> {
        let engine = self.engine()?;
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write = async move {
            let out =
                if overwrite { engine.overwrite(&table, batches).await } else { engine.append(&table, batches).await };
            commit_json(&out?)
        };
        run_write(py, write, Some(stop), committed)
    }

    /// Phase 1 of a two-phase write (`docs/distributed-writes.md`): writes the rows of an Arrow
    /// stream as uncommitted data files of `table` (which must exist; the rows have its schema),
    /// journaling their references as an append does. Returns the prepared piece as JSON, for
    /// [`NativeLake::commit_pieces`] in any process; nothing is committed.
    fn prepare_append(&self, py: Python<'_>, table: String, data: ArrowStream) -> PyResult<String> {
        let engine = self.engine()?;
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let prepare = async move { json(&engine.prepare_append(&table, batches).await?) };
        run_write(py, prepare, Some(stop), |_| "lake: the piece was prepared; nothing was committed")
    }

    /// Phase 2 of a two-phase write: commits the prepared `pieces` (their JSON, as
    /// [`NativeLake::prepare_append`] returned them) as one version of `table`, appended or,
    /// with `overwrite`, replacing its content. Returns the commit as JSON. A piece that is not
    /// a piece's JSON is an `InputError` naming its index; nothing is committed.
    fn commit_pieces(&self, py: Python<'_>, table: String, pieces: Vec<String>, overwrite: bool) -> PyResult<String> {
        let parsed = pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                serde_json::from_str::<PreparedPiece>(piece).map_err(|e| {
                    Failure::new(
                        ErrorKind::InvalidInput,
                        format!("piece {i} is not a prepared piece's JSON ({e}); nothing was committed"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mode = if overwrite { PieceMode::Overwrite } else { PieceMode::Append };
        let engine = self.engine()?;
        run_write(py, async move { commit_json(&engine.commit_pieces(&table, parsed, mode).await?) }, None, committed)
    }

    /// Upserts the rows of an Arrow stream keyed on `on`.
    fn merge_insert(&self, py: Python<'_>, table: String, data: ArrowStream, on: Vec<String>) -> PyResult<String> {
        let engine = self.engine()?;
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write = async move { commit_json(&engine.upsert(&table, &on, batches).await?) };
        run_write(py, write, Some(stop), committed)
    }

    /// Deletes the rows matching `predicate`; `None` when none matched.
    fn delete(&self, py: Python<'_>, table: String, predicate: String) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        run_write(
            py,
            async move { engine.delete(&table, &predicate).await?.map(|o| commit_json(&o)).transpose() },
            None,
            committed_if_some,
        )
    }

    /// Sets `assignments` (`COLUMN=EXPRESSION`) on the rows matching `predicate`.
    fn update(
        &self,
        py: Python<'_>,
        table: String,
        assignments: Vec<String>,
        predicate: Option<String>,
    ) -> PyResult<Option<String>> {
        let parsed = assignments
            .iter()
            .map(|a| a.parse::<Assignment>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::from)?;
        let engine = self.engine()?;
        run_write(
            py,
            async move { engine.update(&table, &parsed, predicate.as_deref()).await?.map(|o| commit_json(&o)).transpose() },
            None,
            committed_if_some,
        )
    }

    /// Compacts the table's fragments; `None` when there was nothing to compact.
    fn compact(&self, py: Python<'_>, table: String) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        run_write(
            py,
            async move { engine.compact(&table).await?.map(|o| commit_json(&o)).transpose() },
            None,
            committed_if_some,
        )
    }

    /// Removes versions older than `older_than` (humantime); `(versions, bytes)` removed.
    fn cleanup(&self, py: Python<'_>, table: String, older_than: String) -> PyResult<(u64, u64)> {
        let older = parse_duration("older_than", &older_than)?;
        let engine = self.engine()?;
        run_write(
            py,
            async move {
                let o = engine.cleanup(&table, older).await?;
                Ok((o.old_versions, o.bytes_removed))
            },
            None,
            |_| "lake: the cleanup had finished when the interrupt arrived",
        )
    }

    /// Tags `version`.
    fn tag(&self, py: Python<'_>, table: String, name: String, version: u64) -> PyResult<()> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.create_tag(&table, version, &name).await?) }, None, |_| {
            "lake: the tag had been created when the interrupt arrived"
        })
    }

    /// Restores `version` as a new latest version.
    fn restore(&self, py: Python<'_>, table: String, version: u64) -> PyResult<String> {
        let engine = self.engine()?;
        run_write(py, async move { commit_json(&engine.restore(&table, version).await?) }, None, committed)
    }

    /// The latest version of a table: one open of its latest manifest (`NoSuchTable` when the
    /// table does not exist), no journal read.
    fn latest_version(&self, py: Python<'_>, table: String) -> PyResult<u64> {
        let engine = self.engine()?;
        run(py, async move { Ok(engine.open(&table).await?.version().version) })
    }

    /// The versions of a table as JSON (`[{version, timestamp, tags, journaled}]`).
    fn versions(&self, py: Python<'_>, table: String) -> PyResult<String> {
        let engine = self.engine()?;
        run(py, async move { json(&engine.versions(&table).await?) })
    }

    /// Compares the journal with full scans of every retained version; the report as JSON.
    fn refs_verify(&self, py: Python<'_>) -> PyResult<String> {
        let engine = self.engine()?;
        run(py, async move { json(&engine.verify_refs(&[]).await?) })
    }

    /// Resolves the write intents of `table` (every table when `None`) as `lake refs recover`
    /// does: a commit that landed is journaled, one that never will is abandoned, fencing each.
    /// An intent whose deadline has not passed is waited for when `wait`, else reported
    /// pending. Returns the report as JSON.
    #[pyo3(signature = (table=None, wait=true))]
    fn refs_recover(&self, py: Python<'_>, table: Option<String>, wait: bool) -> PyResult<String> {
        if let Some(table) = &table {
            ::lake::store::layout::validate_table_name(table).map_err(Failure::from)?;
        }
        let engine = self.engine()?;
        let options = ::lake::lance::commit::RecoverOptions {
            wait: if wait { ::lake::lance::commit::Wait::UntilDue } else { ::lake::lance::commit::Wait::No },
            progress: None,
        };
        run_write(py, async move { json(&engine.recover_writes_with(table.as_deref(), &options).await?) }, None, |_| {
            "lake: the recovery had finished when the interrupt arrived; run it again for its report"
        })
    }
}
