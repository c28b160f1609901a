//! `lake._lake`: the native module behind the Python package `lake` (`python/lake/__init__.py`
//! wraps it in the documented API). Every call that does I/O releases the GIL; long calls (GC
//! apply, appends) poll for signals every 100 ms so that Ctrl-C stops them at an await point,
//! which for apply leaves the checkpoint of the last finished group (resumable).
//!
//! One module per concern:
//! - [`errors`]: lake's errors as `lake.LakeError` subclasses;
//! - [`runtime`]: the Tokio runtime and how a call runs on it;
//! - [`lake`]: the opened lake (`init`, `open`);
//! - [`objects`]: uploads and DataLocation arrays;
//! - [`tables`]: the journaled writes, versions and `refs verify`;
//! - [`lineage`]: the table list, branches, tags, `refs repair` and `refs bind`;
//! - [`gc`]: plans, applies and plan files;
//! - [`arrow_ffi`], [`marking`], [`reader`]: Arrow streams in and arrays out, the marking of plain
//!   DataLocation columns, and Python file objects as upload streams.
//!
//! Reports come back as JSON text that the Python layer decodes.

mod arrow_ffi;
mod errors;
mod gc;
mod lake;
mod lineage;
mod marking;
mod objects;
mod reader;
mod runtime;
mod tables;

use errors::Failure;

/// `value` as JSON text.
fn json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value)
        .map_err(|e| Failure::new(::lake::common::ErrorKind::Internal, format!("cannot encode the report: {e}")))
}

/// The native module.
#[pyo3::pymodule]
fn _lake(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    m.add_class::<lake::NativeLake>()?;
    m.add_function(wrap_pyfunction!(lake::init, m)?)?;
    m.add_function(wrap_pyfunction!(lake::open, m)?)?;
    m.add_function(wrap_pyfunction!(objects::locations, m)?)?;
    m.add_function(wrap_pyfunction!(objects::sha256, m)?)?;
    m.add_function(wrap_pyfunction!(gc::plan_save, m)?)?;
    m.add_function(wrap_pyfunction!(gc::sharded_save, m)?)?;
    m.add_function(wrap_pyfunction!(gc::sharded_load, m)?)?;
    m.add_function(wrap_pyfunction!(gc::plan_digest, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::write_receipt, m)?)?;
    Ok(())
}
