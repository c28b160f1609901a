//! Arrow data across the Python boundary through the Arrow C interfaces: streams come in by the
//! PyCapsule interface (`__arrow_c_stream__`: pyarrow tables and readers, polars frames and any
//! other producer, without copies) and arrays go out through pyarrow's `Array._import_from_c`.
//!
//! Written here instead of with arrow's `pyarrow` feature (which does the same through the same
//! C structures): that feature makes the `arrow` crate, and so Lance and DataFusion above it,
//! depend on pyo3, so the extension compiled its own copy of Lance beside the one the `lake`
//! binary and the workspace's tests share. `scripts/check-builds.sh` checks that the three
//! builds select one feature set for everything Lance depends on.

use arrow::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::Array;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi::Py_uintptr_t;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// The capsule name the Arrow PyCapsule interface gives a stream
/// (<https://arrow.apache.org/docs/format/CDataInterface/PyCapsuleInterface.html>).
const STREAM_CAPSULE: &std::ffi::CStr = c"arrow_array_stream";

/// An Arrow stream taken from a Python producer: any object with `__arrow_c_stream__`.
pub(crate) struct ArrowStream(pub ArrowArrayStreamReader);

impl FromPyObject<'_, '_> for ArrowStream {
    type Error = PyErr;

    /// Calls `__arrow_c_stream__()` and takes the stream out of the capsule it returns (the
    /// capsule is left with a released stream, which its destructor ignores). `TypeError` for an
    /// object without the method, `ValueError` for a capsule of another name or a stream whose
    /// schema cannot be read.
    fn extract(value: Borrowed<'_, '_, PyAny>) -> PyResult<Self> {
        if !value.hasattr("__arrow_c_stream__")? {
            let type_name = value.get_type().name().map(|n| n.to_string()).unwrap_or_default();
            return Err(PyTypeError::new_err(format!(
                "expected an Arrow stream producer (an object with __arrow_c_stream__, such as a pyarrow Table or \
                 RecordBatchReader or a polars DataFrame), not {type_name}"
            )));
        }
        let capsule = value.call_method0("__arrow_c_stream__")?;
        let capsule = capsule
            .cast::<PyCapsule>()
            .map_err(|_| PyTypeError::new_err("__arrow_c_stream__() did not return a PyCapsule"))?;
        let pointer = capsule.pointer_checked(Some(STREAM_CAPSULE)).map_err(|_| {
            PyValueError::new_err("__arrow_c_stream__() returned a capsule that is not named `arrow_array_stream`")
        })?;
        // SAFETY: the capsule is named `arrow_array_stream`, so by the PyCapsule interface it
        // holds an `ArrowArrayStream` C struct, which `from_raw` moves out (marking the one in the
        // capsule released) while the capsule is alive (`capsule` borrows it).
        let stream = unsafe { FFI_ArrowArrayStream::from_raw(pointer.cast::<FFI_ArrowArrayStream>().as_ptr()) };
        let reader = ArrowArrayStreamReader::try_new(stream)
            .map_err(|e| PyValueError::new_err(format!("cannot read the Arrow stream's schema: {e}")))?;
        Ok(Self(reader))
    }
}

/// `array` as a pyarrow array, through pyarrow's `Array._import_from_c` (which moves the two C
/// structs out; what it leaves behind is released when they drop here). Field metadata does not
/// travel: the caller marks the array's type on the Python side.
pub(crate) fn to_pyarrow<'py>(py: Python<'py>, array: &dyn Array) -> PyResult<Bound<'py, PyAny>> {
    let data = array.to_data();
    let mut ffi_array = FFI_ArrowArray::new(&data);
    let mut ffi_schema = FFI_ArrowSchema::try_from(data.data_type())
        .map_err(|e| PyValueError::new_err(format!("cannot export the Arrow type {}: {e}", data.data_type())))?;
    // SAFETY: both structs live until this function returns, after pyarrow's call: it moves
    // their contents out and marks them released (writing through these pointers, hence `mut`),
    // so their `Drop` here releases nothing twice; if it fails before moving them, `Drop`
    // releases them once.
    py.import("pyarrow")?
        .getattr("Array")?
        .call_method1("_import_from_c", (&raw mut ffi_array as Py_uintptr_t, &raw mut ffi_schema as Py_uintptr_t))
}
