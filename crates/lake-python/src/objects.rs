//! Objects: uploads of managed objects (`Objects.put` of bytes, a file or a file object) and the
//! DataLocation array that references them (`lake.locations`).

use crate::arrow_ffi;
use crate::errors::{Failure, Kind};
use crate::lake::NativeLake;
use crate::reader::PyFileReader;
use crate::runtime::{run, runtime};
use lake_common::DataLocationBuilder;
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use pyo3::prelude::*;

/// A managed object as the Python layer takes it: `(uri, sha256, size)`.
fn location_tuple(o: &ManagedObject) -> (String, Vec<u8>, u64) {
    (o.key.clone(), o.sha256.to_vec(), o.size)
}

#[pymethods]
impl NativeLake {
    /// Uploads `data` (bytes) as a managed object named `name`: `(uri, sha256, size)`.
    fn put_bytes(&self, py: Python<'_>, name: String, data: Vec<u8>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        run(py, async move { Ok(writer.upload(&name, &data[..]).await.map(|o| location_tuple(&o))?) })
    }

    /// Uploads the file at `path` as a managed object named `name` (default: the file's name),
    /// streamed from disk (memory: a few parts of 8 MiB, whatever the file's size).
    #[pyo3(signature = (path, name=None))]
    fn put_file(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        name: Option<String>,
    ) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        run(py, async move {
            let uploaded = match name {
                None => writer.upload_file(&path).await,
                Some(name) => match tokio::fs::File::open(&path).await {
                    Ok(file) => writer.upload(&name, file).await,
                    Err(e) => Err(lake_store::StoreError::Io { path: path.display().to_string(), source: e }),
                },
            };
            Ok(uploaded.map(|o| location_tuple(&o))?)
        })
    }

    /// Uploads what the binary file object `reader` gives (its `read(n)` until it returns no
    /// bytes) as a managed object named `name`, streamed: a few chunks of 1 MiB in memory.
    fn put_reader(&self, py: Python<'_>, name: String, reader: Py<PyAny>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        let stream = PyFileReader::start(runtime()?, reader);
        run(py, async move { Ok(writer.upload(&name, stream).await.map(|o| location_tuple(&o))?) })
    }
}

/// A pyarrow array of the DataLocation type (marked) from `(uri, sha256, size)` tuples.
#[pyfunction]
pub(crate) fn locations(py: Python<'_>, items: Vec<(String, Vec<u8>, u64)>) -> PyResult<Py<PyAny>> {
    let mut builder = DataLocationBuilder::new();
    for (uri, sha, size) in items {
        let sha: [u8; 32] = sha
            .as_slice()
            .try_into()
            .map_err(|_| Failure::new(Kind::Input, format!("the sha256 of `{uri}` has {} bytes, not 32", sha.len())))?;
        builder.append(&uri, sha, size);
    }
    let array = builder.finish();
    Ok(arrow_ffi::to_pyarrow(py, &array)?.unbind())
}
