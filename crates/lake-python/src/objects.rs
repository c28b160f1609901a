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

    /// Copies the object a reference names to a fresh managed key (a server-side copy on S3):
    /// `(uri, sha256, size)` of the copy. Its size is checked against the store; its bytes are
    /// not hashed (the copy holds the source's bytes; the SHA-256 returned is the reference's).
    fn copy_fresh(&self, py: Python<'_>, uri: String, sha256: Vec<u8>, size: u64) -> PyResult<(String, Vec<u8>, u64)> {
        let reference = identity(uri, &sha256, size)?;
        let writer = ManagedObjectWriter::new(self.store()?);
        run(py, async move { Ok(writer.copy_fresh(&reference).await.map(|o| location_tuple(&o))?) })
    }

    /// Uploads what the binary file object `reader` gives (its `read(n)` until it returns no
    /// bytes) as a managed object named `name`, streamed: a few chunks of 1 MiB in memory.
    fn put_reader(&self, py: Python<'_>, name: String, reader: Py<PyAny>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        let stream = PyFileReader::start(runtime()?, reader);
        run(py, async move { Ok(writer.upload(&name, stream).await.map(|o| location_tuple(&o))?) })
    }
}

/// The largest object, in bytes, that `object_read` reads on the calling thread on a local root
/// (8 MiB); larger ones run on the runtime, where Ctrl-C stops them within 100 ms.
const INLINE_READ_BYTES: u64 = 8 << 20;

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
    /// there is no object). The bytes land in the returned `bytes` object directly (held once
    /// in memory), read with the GIL released. On a local root an object of at most
    /// `INLINE_READ_BYTES` is read on the calling thread (no task of the runtime; a read of
    /// 8 MiB takes a few milliseconds, so Ctrl-C waits no longer than that), into a `bytes`
    /// object made before the GIL is released: taking the GIL again mid-read made threads
    /// reading at once wait for each other (up to the interpreter's 5 ms switch interval). So a
    /// location claiming up to 8 MiB more than its object has allocates that much until the
    /// size check refuses it; larger claims allocate only once the store's size matched.
    fn object_read<'py>(
        &self,
        py: Python<'py>,
        uri: String,
        sha256: Vec<u8>,
        size: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let reference = identity(uri, &sha256, size)?;
        python_bytes_len(&reference)?;
        let reader = self.reader()?;
        if reader.is_local() && reference.size <= INLINE_READ_BYTES {
            let buffer = BytesBuffer::new(python_bytes_len(&reference)?).map_err(|e| Failure::from(e).into_py(py))?;
            let filled = py.detach(|| reader.read_verified_blocking(&reference, move |_len| Ok(buffer)));
            return Ok(filled.map_err(|e| Failure::from(e).into_py(py))?.into_bytes(py));
        }
        let filled = run(py, async move { Ok(reader.read_verified_into(&reference, BytesBuffer::new).await?) })?;
        Ok(filled.into_bytes(py))
    }

    /// The whole objects `references` (`(uri, sha256, size)` each) name, verified as
    /// `object_read` verifies one, read concurrently (the reader's bound on requests in flight,
    /// at most `budget_bytes` bytes of objects read ahead of the one the list waits for): their
    /// `bytes` in input order. The first failure in input order is raised, and the reads still
    /// in flight are stopped; no object's bytes are returned then. GIL released while reading;
    /// Ctrl-C is checked every 100 ms.
    fn object_read_many<'py>(
        &self,
        py: Python<'py>,
        references: Vec<(String, Vec<u8>, u64)>,
        budget_bytes: u64,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let mut identities = Vec::with_capacity(references.len());
        for (uri, sha256, size) in references {
            let reference = identity(uri, &sha256, size)?;
            python_bytes_len(&reference)?;
            identities.push(reference);
        }
        let count = identities.len();
        let reader = self.reader()?;
        let rt = runtime()?;
        let mut stream = reader.read_many_with(identities, budget_bytes, BytesBuffer::new);
        let mut out: Vec<BytesBuffer> = Vec::with_capacity(count);
        loop {
            let step = py.detach(|| {
                rt.block_on(async {
                    tokio::time::timeout(std::time::Duration::from_millis(100), async {
                        while let Some(item) = stream.next().await {
                            out.push(item?);
                        }
                        Ok::<(), ::lake::store::StoreError>(())
                    })
                    .await
                })
            });
            match step {
                Ok(done) => {
                    done.map_err(|e| Failure::from(e).into_py(py))?;
                    break;
                }
                Err(_elapsed) => py.check_signals()?,
            }
        }
        Ok(out.into_iter().map(|b| b.into_bytes(py)).collect())
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

/// The SHA-256 of `data` as lake's verified reads compute it (the `sha2` crate with the
/// workspace's features: SHA-NI on x86_64, the ARMv8 SHA2 instructions on aarch64, detected at
/// run time), with the GIL released: for checks, and the `sha256_vs_hardware` benchmark against
/// `hashlib.sha256`. 32 bytes.
#[pyfunction]
pub(crate) fn sha256<'py>(py: Python<'py>, data: &Bound<'py, PyBytes>) -> Bound<'py, PyBytes> {
    use sha2::Digest;
    let bytes = data.as_bytes();
    let digest: [u8; 32] = py.detach(|| sha2::Sha256::digest(bytes).into());
    PyBytes::new(py, &digest)
}

/// The length of the Python `bytes` object that holds `reference`'s object, or why none can: a
/// `bytes` holds at most `isize::MAX` bytes.
fn python_bytes_len(reference: &::lake::common::ObjectIdentity) -> Result<usize, Failure> {
    usize::try_from(reference.size).ok().filter(|n| isize::try_from(*n).is_ok()).ok_or_else(|| {
        Failure::new(
            ErrorKind::InvalidInput,
            format!(
                "`{}` has {} bytes, more than one Python bytes object holds; read it with Objects.open",
                reference.uri, reference.size
            ),
        )
    })
}

/// A new Python `bytes` object that a verified read fills with the GIL released, before anyone
/// else sees it (`ObjectReader::read_verified_into`): the object's bytes land in it directly,
/// with no copy of the whole object.
struct BytesBuffer {
    object: Py<PyBytes>,
    data: *mut u8,
    len: usize,
}

// SAFETY: the `bytes` object is new and referenced only by this buffer until `into_bytes` hands
// it to Python, so no other thread reads or writes its storage; its storage never moves (a
// `bytes` object's data is part of its allocation), and `Py` may be sent between threads.
unsafe impl Send for BytesBuffer {}

impl BytesBuffer {
    /// A `bytes` object of `len` bytes, not yet written (the GIL is taken to make it).
    fn new(len: usize) -> Result<Self, ::lake::store::StoreError> {
        let too_large =
            || ::lake::store::StoreError::storage("bytes", format!("{len} bytes exceed a Python bytes object"));
        let size = isize::try_from(len).map_err(|_| too_large())?;
        Python::attach(|py| {
            // SAFETY: `PyBytes_FromStringAndSize(NULL, n)` makes a `bytes` object of `n`
            // uninitialised bytes, meant to be written before it is used; it is zeroed below and
            // written in full (a verified read fills the whole buffer) before `into_bytes` hands
            // it out.
            let raw = unsafe { pyo3::ffi::PyBytes_FromStringAndSize(std::ptr::null(), size) };
            if raw.is_null() {
                let _ = PyErr::take(py);
                return Err(::lake::store::StoreError::storage("bytes", format!("cannot allocate {len} bytes")));
            }
            // SAFETY: `raw` is a new, owned reference to a `bytes` object.
            let object: Py<PyBytes> = unsafe { Bound::from_owned_ptr(py, raw).cast_into_unchecked() }.unbind();
            // SAFETY: `raw` is a `bytes` object; its data has `len` bytes (and a trailing NUL).
            let data = unsafe { pyo3::ffi::PyBytes_AsString(raw) }.cast::<u8>();
            if data.is_null() {
                let _ = PyErr::take(py);
                return Err(too_large());
            }
            // SAFETY: `data` points at the object's `len` bytes, which only this buffer sees.
            // Zeroed once (memset speed, a small part of a verified read's hashing) so that the
            // `&mut [u8]` of `as_mut` never views uninitialised memory.
            unsafe { std::ptr::write_bytes(data, 0, len) };
            Ok(Self { object, data, len })
        })
    }

    /// The filled `bytes` object, for Python.
    fn into_bytes(self, py: Python<'_>) -> Bound<'_, PyBytes> {
        self.object.into_bound(py)
    }
}

impl AsMut<[u8]> for BytesBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `data` points at the `len` bytes of the `bytes` object this buffer owns alone
        // (see `Send` above); `&mut self` makes this the only view of them.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}
