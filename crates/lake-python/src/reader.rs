//! A Python binary file object as an `AsyncRead`, for streaming uploads (`Objects.put` of a file
//! object): a blocking task calls its `read(CHUNK)` (holding the GIL only for that call) and
//! hands the chunks over a channel of [`IN_FLIGHT`] chunks, so at most a few chunks are in memory
//! whatever the object's size. The upload ends when `read` returns no bytes; an exception in
//! `read` (or a `read` that returns something other than bytes) fails the upload as an I/O
//! error naming it. Dropping the reader (a failed upload, Ctrl-C) stops the task at its next
//! chunk.

use pyo3::prelude::*;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::mpsc;

/// Bytes asked of `read` at a time.
const CHUNK: usize = 1024 * 1024;
/// Chunks read ahead of the upload.
const IN_FLIGHT: usize = 2;

/// The chunks of a Python file object, read by a blocking task.
pub(crate) struct PyFileReader {
    chunks: mpsc::Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    offset: usize,
}

impl PyFileReader {
    /// Starts reading `file` (an object with `read(n)` returning bytes) on `runtime`'s
    /// blocking threads.
    pub(crate) fn start(runtime: &tokio::runtime::Runtime, file: Py<PyAny>) -> Self {
        let (tx, rx) = mpsc::channel(IN_FLIGHT);
        runtime.spawn_blocking(move || loop {
            let chunk = Python::attach(|py| -> PyResult<Vec<u8>> {
                let data = file.bind(py).call_method1("read", (CHUNK,))?;
                if data.is_none() {
                    // A non-blocking stream with no data yet: lake reads files, not sockets.
                    return Err(pyo3::exceptions::PyTypeError::new_err(
                        "read() returned None (a non-blocking stream); give a blocking binary file",
                    ));
                }
                data.extract::<Vec<u8>>().map_err(|_| {
                    pyo3::exceptions::PyTypeError::new_err(format!(
                        "read() returned {}, not bytes; open the file in binary mode ('rb')",
                        data.get_type().name().map(|n| n.to_string()).unwrap_or_default()
                    ))
                })
            });
            let (done, item) = match chunk {
                Ok(bytes) if bytes.is_empty() => (true, None),
                Ok(bytes) => (false, Some(Ok(bytes))),
                Err(e) => (true, Some(Err(io::Error::other(format!("reading the file object failed: {e}"))))),
            };
            if let Some(item) = item {
                if tx.blocking_send(item).is_err() {
                    return;
                }
            }
            if done {
                return;
            }
        });
        Self { chunks: rx, current: Vec::new(), offset: 0 }
    }
}

impl AsyncRead for PyFileReader {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if self.offset < self.current.len() {
                let n = buf.remaining().min(self.current.len() - self.offset);
                let start = self.offset;
                buf.put_slice(&self.current[start..start + n]);
                self.offset += n;
                return Poll::Ready(Ok(()));
            }
            match self.chunks.poll_recv(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    self.current = chunk;
                    self.offset = 0;
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                // The end of the file.
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
