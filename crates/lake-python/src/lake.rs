//! The opened lake (`NativeLake`): its store per process, `init` and `open`, and what describes it
//! (root, table dataset URIs, storage options for Lance). The operations are in [`crate::objects`],
//! [`crate::tables`] and [`crate::gc`].

use crate::errors::Failure;
use crate::runtime::{parse_duration, run};
use ::lake::lance::LanceEngine;
use ::lake::store::descriptor::LakeDescriptor;
use ::lake::store::layout::validate_table_name;
use ::lake::store::{LakeStore, ObjectReader};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// An opened lake: its root and storage options, and its store as opened by this process.
#[pyclass(module = "lake._lake", frozen)]
pub(crate) struct NativeLake {
    root: String,
    options: HashMap<String, String>,
    /// The process that opened `store`, the store, and its object reader.
    opened: Mutex<(u32, LakeStore, ObjectReader)>,
}

impl NativeLake {
    fn new(root: &str, options: HashMap<String, String>, store: LakeStore) -> Self {
        let reader = ObjectReader::new(store.clone());
        Self { root: root.to_string(), options, opened: Mutex::new((std::process::id(), store, reader)) }
    }

    /// The lake's store and object reader (one per process: its bound on reads in flight holds
    /// across calls and threads). In a process forked from the one that opened it, the store is
    /// opened again: its HTTP connections belong to the parent's runtime (see
    /// [`crate::runtime::runtime`]).
    fn opened(&self) -> Result<(LakeStore, ObjectReader), Failure> {
        let pid = std::process::id();
        let mut opened = self.opened.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if opened.0 != pid {
            let store = open_store(&self.root, &self.options)?;
            *opened = (pid, store.clone(), ObjectReader::new(store));
        }
        Ok((opened.1.clone(), opened.2.clone()))
    }

    /// The lake's store (see [`NativeLake::opened`]).
    pub(crate) fn store(&self) -> Result<LakeStore, Failure> {
        Ok(self.opened()?.0)
    }

    /// The lake's object reader (see [`NativeLake::opened`]).
    pub(crate) fn reader(&self) -> Result<ObjectReader, Failure> {
        Ok(self.opened()?.1)
    }

    pub(crate) fn engine(&self) -> Result<LanceEngine, Failure> {
        Ok(LanceEngine::new(self.store()?))
    }

    /// The collector of this lake, with its engine.
    pub(crate) fn gc_parts(&self) -> Result<(LakeStore, LanceEngine), Failure> {
        let store = self.store()?;
        Ok((store.clone(), LanceEngine::new(store)))
    }
}

/// The store of `root`, with S3 `storage_options` over the `AWS_*` environment.
fn open_store(root: &str, storage_options: &HashMap<String, String>) -> Result<LakeStore, Failure> {
    Ok(LakeStore::open_with_options(root, storage_options)?)
}

/// Creates a lake at `root` with GC policy floor `min_age` (humantime), or opens it when it
/// exists with the same floor.
#[pyfunction]
#[pyo3(signature = (root, min_age, storage_options=None))]
pub(crate) fn init(
    py: Python<'_>,
    root: &str,
    min_age: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<NativeLake> {
    let min_age = parse_duration("min_age", min_age)?;
    let options = storage_options.unwrap_or_default();
    let store = open_store(root, &options)?;
    let opened = store.clone();
    run(py, async move { Ok(LakeDescriptor::create(&opened, min_age).await.map(|_| ())?) })?;
    Ok(NativeLake::new(root, options, store))
}

/// Opens the lake at `root`.
#[pyfunction]
#[pyo3(signature = (root, storage_options=None))]
pub(crate) fn open(
    py: Python<'_>,
    root: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<NativeLake> {
    let options = storage_options.unwrap_or_default();
    let store = open_store(root, &options)?;
    let opened = store.clone();
    run(py, async move { Ok(LakeDescriptor::load(&opened).await.map(|_| ())?) })?;
    Ok(NativeLake::new(root, options, store))
}

#[pymethods]
impl NativeLake {
    /// The lake's root as lake spells it.
    #[getter]
    fn root(&self) -> PyResult<String> {
        Ok(self.store()?.root().to_string())
    }

    /// The dataset URI of a table (for `lance.dataset`); `InputError` for an invalid table name
    /// (`../x` would name a folder outside the lake's tables).
    fn dataset_uri(&self, table: String) -> PyResult<String> {
        validate_table_name(&table).map_err(Failure::from)?;
        Ok(self.engine()?.dataset_uri(&table))
    }

    /// The lake's storage options for Lance: its resolved S3 settings (the `AWS_*` environment
    /// read when the lake was opened, overlaid by its storage options); empty for a local root.
    fn storage_options(&self) -> PyResult<HashMap<String, String>> {
        Ok(self.store()?.storage_options().clone())
    }
}
