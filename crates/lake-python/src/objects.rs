//! Objects: uploads of managed objects (`Objects.put` of bytes, a file or a file object), reads
//! of the objects references name (verified whole reads, unverified ranges and sizes, for
//! `Objects.read` and `Objects.open`), and the DataLocation array that references them
//! (`lake.locations`).

use crate::arrow_ffi;
use crate::errors::Failure;
use crate::lake::NativeLake;
use crate::reader::PyFileReader;
use crate::runtime::{run, runtime};
use ::lake::common::DataLocationBuilder;
use ::lake::common::ErrorKind;
use ::lake::store::reader::VerifiedStream;
use ::lake::store::writer::{ManagedObject, ManagedObjectWriter};
use futures::StreamExt;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

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
                    Err(e) => Err(::lake::store::StoreError::Io { path: path.display().to_string(), source: e }),
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

/// The identity of a reference as Python gives it: `uri`, `sha256` (32 bytes), `size` (bytes).
fn identity(uri: String, sha256: &[u8], size: u64) -> Result<::lake::common::ObjectIdentity, Failure> {
    let sha: [u8; 32] = sha256.try_into().map_err(|_| {
        Failure::new(ErrorKind::InvalidInput, format!("the sha256 of `{uri}` has {} bytes, not 32", sha256.len()))
    })?;
    Ok(::lake::common::ObjectIdentity::new(uri, sha, size))
}

#[pymethods]
impl NativeLake {
    /// The whole object a reference names, verified against its size and SHA-256 as it streams
    /// (`ObjectMismatchError` instead of the bytes when they differ; `ObjectMissingError` when
    /// there is no object).
    fn object_read<'py>(
        &self,
        py: Python<'py>,
        uri: String,
        sha256: Vec<u8>,
        size: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let reference = identity(uri, &sha256, size)?;
        let len = usize::try_from(size).map_err(|_| {
            Failure::new(
                ErrorKind::InvalidInput,
                format!("`{}` has {size} bytes, more than this process can address", reference.uri),
            )
        })?;
        let reader = self.reader()?;
        let mut stream = run(py, async move { Ok(reader.open_verified(&reference).await?) })?;
        // The bytes go straight into the `bytes` object returned (held once in memory: the
        // object's size and one chunk of the response), pulled with the GIL released.
        let mut failure: Option<PyErr> = None;
        let bytes = PyBytes::new_with(py, len, |buf| {
            if let Err(e) = fill_verified(py, &mut stream, buf) {
                failure = Some(e);
            }
            Ok(())
        })?;
        match failure {
            Some(e) => Err(e),
            None => Ok(bytes),
        }
    }

    /// Bytes `start..end` of the object `uri` names (a key or a URI the lake's store reaches),
    /// NOT verified; fewer when the object ends first.
    fn object_read_range<'py>(
        &self,
        py: Python<'py>,
        uri: String,
        start: u64,
        end: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let reader = self.reader()?;
        let bytes = run(py, async move { Ok(reader.read_range(&uri, start..end).await?) })?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// The size in bytes the store reports for the object `uri` names (a HEAD).
    fn object_size(&self, py: Python<'_>, uri: String) -> PyResult<u64> {
        let reader = self.reader()?;
        run(py, async move { Ok(reader.size(&uri).await?) })
    }
}

/// A pyarrow array of the DataLocation type (marked) from `(uri, sha256, size)` tuples.
#[pyfunction]
pub(crate) fn locations(py: Python<'_>, items: Vec<(String, Vec<u8>, u64)>) -> PyResult<Py<PyAny>> {
    let mut builder = DataLocationBuilder::new();
    for (uri, sha, size) in items {
        let reference = identity(uri, &sha, size)?;
        builder.append(&reference.uri, reference.sha256, reference.size);
    }
    let array = builder.finish();
    Ok(arrow_ffi::to_pyarrow(py, &array)?.unbind())
}

/// Fills `buf` with the verified stream's bytes, pulling them with the GIL released and checking
/// for signals (Ctrl-C) every 100 ms. The stream ends without an error only after exactly the
/// reference's size in bytes whose SHA-256 matched ([`VerifiedStream`]), and `buf` has that
/// size, so a stream that would overflow it has failed already; it is refused all the same.
fn fill_verified(py: Python<'_>, stream: &mut VerifiedStream, buf: &mut [u8]) -> PyResult<()> {
    let rt = runtime()?;
    let mut filled = 0usize;
    loop {
        let step = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(std::time::Duration::from_millis(100), async {
                    while let Some(chunk) = stream.next().await {
                        let chunk = chunk?;
                        let Some(into) = buf.get_mut(filled..filled + chunk.len()) else {
                            return Err(Failure::new(
                                ErrorKind::ObjectMismatch,
                                format!("`{}` holds more bytes than its reference's {}", stream.key(), buf.len()),
                            ));
                        };
                        into.copy_from_slice(&chunk);
                        filled += chunk.len();
                    }
                    Ok(())
                })
                .await
            })
        });
        match step {
            Ok(done) => return done.map_err(|f| f.into_py(py)),
            Err(_elapsed) => py.check_signals()?,
        }
    }
}
