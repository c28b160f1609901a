//! A lake's tables and their lines of versions: the table list, branches, tags, and the
//! journal's maintenance (`Refs.repair`, `Refs.bind`), each one engine call.

use crate::json;
use crate::lake::NativeLake;
use crate::runtime::{committed, run, run_write};
use ::lake::lance::branch::BranchSource;
use pyo3::prelude::*;

#[pymethods]
impl NativeLake {
    /// The lake's tables (registered lineages, branches as `table@branch`), sorted.
    fn tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = self.store()?;
        run(py, async move { Ok(::lake::store::registry::tables(&store).await?) })
    }

    /// The branches of `table` (their names, without the table's).
    fn branches(&self, py: Python<'_>, table: String) -> PyResult<Vec<String>> {
        let engine = self.engine()?;
        run(py, async move { Ok(engine.branches(&table).await?) })
    }

    /// Creates branch `branch` of `table` from a version of its main line (`version`) or a tag
    /// (`tag`): the branch's first version, journaled. Returns the commit as JSON.
    #[pyo3(signature = (table, branch, version=None, tag=None))]
    fn create_branch(
        &self,
        py: Python<'_>,
        table: String,
        branch: String,
        version: Option<u64>,
        tag: Option<String>,
    ) -> PyResult<String> {
        let from = match (version, tag) {
            (Some(v), None) => BranchSource::Version(v),
            (None, Some(t)) => BranchSource::Tag(t),
            _ => {
                return Err(crate::errors::Failure::new(
                    ::lake::common::ErrorKind::InvalidInput,
                    "a branch starts from one version or one tag".into(),
                )
                .into())
            }
        };
        let engine = self.engine()?;
        run_write(
            py,
            async move { crate::tables::commit_json(&engine.create_branch(&table, &branch, &from).await?) },
            None,
            committed,
        )
    }

    /// Deletes branch `branch` of `table` (its versions are dropped; their objects become
    /// orphans once no retained version references them).
    fn delete_branch(&self, py: Python<'_>, table: String, branch: String) -> PyResult<()> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.delete_branch(&table, &branch).await?) }, None, |_| {
            "lake: the branch had been deleted when the interrupt arrived"
        })
    }

    /// Deletes tag `name` of `table`.
    fn delete_tag(&self, py: Python<'_>, table: String, name: String) -> PyResult<()> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.delete_tag(&table, &name).await?) }, None, |_| {
            "lake: the tag had been deleted when the interrupt arrived"
        })
    }

    /// Journals `version` of `table` from a full scan of it (a version another Lance client
    /// wrote). Returns the entry written as JSON.
    fn refs_repair(&self, py: Python<'_>, table: String, version: u64) -> PyResult<String> {
        let engine = self.engine()?;
        run_write(py, async move { json(&engine.repair_refs(&table, version).await?) }, None, |_| {
            "lake: the repair had finished when the interrupt arrived"
        })
    }

    /// Binds every journal entry of `table` to its version's manifest. Returns the report as
    /// JSON.
    fn refs_bind(&self, py: Python<'_>, table: String) -> PyResult<String> {
        let engine = self.engine()?;
        run_write(py, async move { json(&engine.bind_refs(&table).await?) }, None, |_| {
            "lake: the binding had finished when the interrupt arrived"
        })
    }

    /// Removes the lake settings `keys` from `table`'s Lance config (a version of its own);
    /// `None` when none was set. Returns the commit as JSON.
    fn unset_config(&self, py: Python<'_>, table: String, keys: Vec<String>) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        run_write(
            py,
            async move {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                engine.unset_config(&table, &keys).await?.map(|o| crate::tables::commit_json(&o)).transpose()
            },
            None,
            crate::runtime::committed_if_some,
        )
    }
}
