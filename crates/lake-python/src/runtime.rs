//! The process's Tokio runtime and the two ways a Python call runs a future on it: [`run`] (a
//! read, or a GC step: Ctrl-C drops it at an await point) and [`run_write`] (a call that may
//! commit a table version: Ctrl-C stops its input, never the commit).

use crate::errors::{Committed, Failure};
use ::lake::common::ErrorKind;
use pyo3::prelude::*;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The process's Tokio runtime (Lance needs one), built by the process that uses it.
///
/// A process forked from one that used lake (`multiprocessing`'s default start method on
/// Linux) inherits the runtime's memory but none of its worker threads: a task spawned on it
/// would never run. The runtime is therefore owned by a process id; a call from another process
/// builds a fresh one, and the inherited one is leaked (dropping it would wait for threads that
/// do not exist in this process). Lance's own CPU runtime resets itself in a forked child
/// (`pthread_atfork`, lance-core `utils::tokio`).
pub(crate) fn runtime() -> Result<&'static tokio::runtime::Runtime, Failure> {
    static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut current = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, rt)) = *current {
        if owner == pid {
            return Ok(rt);
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(ErrorKind::Internal, format!("cannot start the I/O runtime: {e}")))?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *current = Some((pid, rt));
    Ok(rt)
}

/// Runs `future` on the runtime with the GIL released, checking for signals (Ctrl-C) every
/// 100 ms; a signal drops the future at its next await point and raises in Python.
pub(crate) fn run<T: Send + 'static>(
    py: Python<'_>,
    future: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<T> {
    let rt = runtime()?;
    let mut handle = rt.spawn(future);
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut handle).await.ok() }));
        match done {
            Some(Ok(result)) => return result.map_err(|f| f.into_py(py)),
            Some(Err(e)) => return Err(Failure::task_failed(&e).into_py(py)),
            None => {
                if let Err(interrupted) = py.check_signals() {
                    handle.abort();
                    return Err(interrupted);
                }
            }
        }
    }
}

/// Runs a write (a call that may commit a table version) on the runtime with the GIL released.
/// Ctrl-C never drops it mid-way: dropped between its Lance commit and its journal entry, a
/// write would leave a version GC refuses until `refs repair`. A signal instead sets `stop`,
/// which ends the write's input stream (when it has one) so that Lance commits nothing if it has
/// not read it all, waits for the write to end, and raises the interrupt with a note saying
/// whether the write committed.
///
/// Every write leaves its [`Receipt`] on the calling thread, whatever its outcome: the Python
/// layer reads it when a `KeyboardInterrupt` reaches it after this call returned (a signal that
/// arrived while the result was on its way back), so that every interrupt of a write says what
/// the write did.
///
/// `finished` is the note of a write that ended without an error: [`COMMITTED`], or what the
/// write did instead ([`committed_if_some`] for a change that may match no row).
pub(crate) fn run_write<T: Send + 'static>(
    py: Python<'_>,
    future: impl Future<Output = Result<T, Failure>> + Send + 'static,
    stop: Option<Arc<AtomicBool>>,
    finished: fn(&T) -> &'static str,
) -> PyResult<T> {
    let rt = runtime()?;
    let mut handle = rt.spawn(future);
    let mut interrupted: Option<PyErr> = None;
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut handle).await.ok() }));
        let result = match done {
            Some(Ok(result)) => result,
            Some(Err(e)) => Err(Failure::task_failed(&e)),
            None => {
                if interrupted.is_none() {
                    if let Err(signal) = py.check_signals() {
                        if let Some(stop) = &stop {
                            stop.store(true, Ordering::SeqCst);
                        }
                        interrupted = Some(signal);
                    }
                }
                continue;
            }
        };
        // Whether anything was committed is what the write's own error states.
        let note = match &result {
            Ok(value) => finished(value).to_string(),
            Err(f) => match f.committed() {
                Committed::Nothing => format!("lake: the write was stopped; nothing was committed ({f})"),
                Committed::Version(v) => format!("lake: the write was stopped after it committed version {v}: {f}"),
                Committed::Unknown => format!("lake: the write was stopped; its commit's outcome is unknown: {f}"),
            },
        };
        Receipt::leave(note.clone());
        let Some(signal) = interrupted else { return result.map_err(|f| f.into_py(py)) };
        let _ = signal.value(py).call_method1("add_note", (note,));
        return Err(signal);
    }
}

/// The note of a write that committed a version and its journal entry.
pub(crate) fn committed<T>(_: &T) -> &'static str {
    COMMITTED
}

/// The note of a write that committed a version.
pub(crate) const COMMITTED: &str =
    "lake: the write had committed (and was journaled) when the interrupt arrived; see Table.versions()";

/// The note of a change that commits a version only when a row matched (`None` otherwise).
pub(crate) fn committed_if_some<T>(value: &Option<T>) -> &'static str {
    match value {
        Some(_) => COMMITTED,
        None => "lake: the write had ended without a new version (no row matched); nothing was committed",
    }
}

/// What the last write on this thread did, as the note an interrupt of it carries: the number of
/// writes this thread ran ([`run_write`]) and the last one's note.
pub(crate) struct Receipt;

thread_local! {
    static RECEIPT: std::cell::RefCell<(u64, Option<String>)> = const { std::cell::RefCell::new((0, None)) };
}

impl Receipt {
    fn leave(note: String) {
        RECEIPT.with(|r| {
            let mut r = r.borrow_mut();
            r.0 = r.0.wrapping_add(1);
            r.1 = Some(note);
        });
    }

    /// `(writes run on this thread, the last one's note)`.
    pub(crate) fn read() -> (u64, Option<String>) {
        RECEIPT.with(|r| r.borrow().clone())
    }
}

/// `(writes run on this thread, the last one's note)`: the Python layer compares the count
/// before and after a write to tell whether an interrupt came before the write began.
#[pyfunction]
pub(crate) fn write_receipt() -> (u64, Option<String>) {
    Receipt::read()
}

/// `text` as a duration (humantime: `7d`, `12h`, `90s`); `PolicyError` naming `what` otherwise.
pub(crate) fn parse_duration(what: &str, text: &str) -> Result<Duration, Failure> {
    humantime::parse_duration(text).map_err(|e| {
        Failure::new(
            ErrorKind::InvalidInput,
            format!("{what} `{text}` is not a duration ({e}); write e.g. `7d`, `12h`, `90s`"),
        )
    })
}
