//! Standard output and error that never panic, and never land in a file of the lake.
//!
//! std's `print!`/`println!`/`eprint!`/`eprintln!` panic when a write fails: a pipe whose reader
//! exited (`lake gc ... | head -c1`, EPIPE; Rust ignores SIGPIPE, so the write fails instead of
//! the process dying), a full disk. A panic exits 101 after the command's work is done, hiding
//! its outcome. This module's macros of the same names, in scope for the whole crate (declared
//! before the command modules), write through [`out`] and [`err`] instead:
//! - standard output: a failed write is recorded and later output is dropped; at exit
//!   ([`stdout_failure`]) a reader that went away (a broken pipe) leaves the command's exit code
//!   as it is (the reader asked for no more), any other failure is reported and the command
//!   exits 1, because its output (a plan, a report) was lost;
//! - standard error: a failed write is ignored (there is nowhere left to say so).
//!
//! [`reserve_standard_descriptors`] runs first: when lake is started with a standard descriptor
//! closed (`lake ... 2>&-`), the next file it opened would take that number, and every later
//! message would be written into that file (a checkpoint, a plan). Each closed one is opened on
//! `/dev/null` instead.

use std::io::{ErrorKind, Write};
use std::sync::Mutex;

/// The first failure to write standard output, if any.
static STDOUT_FAILURE: Mutex<Option<std::io::Error>> = Mutex::new(None);

/// Opens `/dev/null` on every standard descriptor (0, 1, 2) that is closed, so that no file
/// the command opens later takes its number. Uses only the lowest-free-number rule of `open`:
/// `/dev/null` is opened until it lands above 2; the copies that landed on 0, 1 or 2 are kept.
pub(crate) fn reserve_standard_descriptors() {
    use std::os::fd::{AsRawFd, IntoRawFd};
    for _ in 0..3 {
        let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return };
        if null.as_raw_fd() > 2 {
            return;
        }
        // It took a closed standard descriptor's number: keep it open for the process's life.
        let _ = null.into_raw_fd();
    }
}

/// Writes `args` to standard output unless an earlier write failed; records a failure.
pub(crate) fn out(args: std::fmt::Arguments<'_>) {
    let Ok(mut failure) = STDOUT_FAILURE.lock() else { return };
    if failure.is_some() {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        *failure = Some(e);
    }
}

/// Writes raw `bytes` to standard output (`lake cat`) unless an earlier write failed; records a
/// failure as [`out`] does. Returns whether standard output still takes bytes: `false` once a
/// write failed (a reader that went away, a full disk), so the caller stops reading what it
/// would write.
pub(crate) fn out_bytes(bytes: &[u8]) -> bool {
    let Ok(mut failure) = STDOUT_FAILURE.lock() else { return false };
    if failure.is_some() {
        return false;
    }
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => true,
        Err(e) => {
            *failure = Some(e);
            false
        }
    }
}

/// Writes `args` to standard error; a failure is ignored.
pub(crate) fn err(args: std::fmt::Arguments<'_>) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_fmt(args).and_then(|()| stderr.flush());
}

/// Records a failure to write standard output that happened outside [`out`] (a streamed JSON
/// document), so that the exit code accounts for it.
pub(crate) fn record_stdout_failure(e: std::io::Error) {
    if let Ok(mut failure) = STDOUT_FAILURE.lock() {
        failure.get_or_insert(e);
    }
}

/// The failure to write standard output that must change the exit code: any but a broken pipe
/// (the reader went away: it asked for no more).
pub(crate) fn stdout_failure() -> Option<String> {
    let failure = STDOUT_FAILURE.lock().ok()?;
    failure.as_ref().filter(|e| e.kind() != ErrorKind::BrokenPipe).map(|e| e.to_string())
}

/// `print!` that never panics (see the module documentation).
macro_rules! print {
    ($($arg:tt)*) => { $crate::stdio::out(format_args!($($arg)*)) };
}

/// `println!` that never panics (see the module documentation).
macro_rules! println {
    () => { $crate::stdio::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stdio::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that never panics (see the module documentation).
macro_rules! eprintln {
    () => { $crate::stdio::err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::stdio::err(format_args!("{}\n", format_args!($($arg)*))) };
}
