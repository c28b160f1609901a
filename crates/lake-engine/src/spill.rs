//! External sorting: records buffered up to a memory budget, spilled as sorted runs to a local
//! temporary folder, and merged back in order.
//!
//! [`SortedRuns`] takes records in any order. While the records it holds are estimated (by
//! [`SpillRecord::memory_bytes`]) at less than the budget they stay in memory; past it they are
//! sorted and written as one run file (a buffered stream of [`SpillRecord::write_to`]
//! encodings) in a temporary folder that is removed when the sorter (or its merge) is dropped.
//! [`SortedRuns::finish`] merges the runs and what is still buffered into one ascending stream,
//! holding one record per run plus one read buffer (64 KiB) per run in memory.
//!
//! Memory: at most about the budget plus 64 KiB per run, whatever the number of records; at most
//! [`MAX_RUNS`] runs exist at once (past it they are merged into one run first, a multi-pass
//! merge). Disk: the encoded records. Duplicates are kept (callers that want a set skip
//! repeats).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// Read and write buffer of one run file, in bytes.
const RUN_BUFFER: usize = 64 * 1024;

/// Runs open at once: when a spill would make more, the existing runs are first merged into
/// one (so a merge never holds more than this many files and read buffers, 4 MiB).
pub const MAX_RUNS: usize = 64;

/// A record that can be spilled: a total order, an in-memory size estimate and an encoding.
pub trait SpillRecord: Ord + Sized {
    /// Estimated bytes this record takes in memory (heap and inline), for the budget.
    fn memory_bytes(&self) -> usize;
    /// Appends the record's encoding to `out`.
    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()>;
    /// Reads one record written by [`SpillRecord::write_to`]; `Ok(None)` at a clean end of the
    /// run.
    ///
    /// # Errors
    /// I/O errors, and [`std::io::ErrorKind::InvalidData`] for a truncated or malformed record.
    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>>;
}

/// A failure to spill or merge: the temporary folder or a run file could not be used.
#[derive(Debug, thiserror::Error)]
#[error("spill folder {path}: {source}")]
pub struct SpillError {
    /// The folder or run file.
    pub path: String,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

fn spill_error(path: &std::path::Path) -> impl Fn(std::io::Error) -> SpillError + '_ {
    move |source| SpillError { path: path.display().to_string(), source }
}

/// Records in any order in, sorted runs on disk past a memory budget.
pub struct SortedRuns<T: SpillRecord> {
    budget: usize,
    held: usize,
    buffer: Vec<T>,
    runs: Vec<PathBuf>,
    dir: Option<tempfile::TempDir>,
    spilled: u64,
}

impl<T: SpillRecord> std::fmt::Debug for SortedRuns<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedRuns").field("budget", &self.budget).field("runs", &self.runs.len()).finish()
    }
}

/// Bytes of a `Vec<T>` slot: the records' inline size counts towards the budget.
fn slot<T>() -> usize {
    std::mem::size_of::<T>()
}

impl<T: SpillRecord> SortedRuns<T> {
    /// An empty sorter holding records estimated at up to `budget_bytes` (at least one record)
    /// in memory. The temporary folder is created on the first spill, in the system's temporary
    /// folder (`TMPDIR`).
    pub fn new(budget_bytes: usize) -> Self {
        Self { budget: budget_bytes, held: 0, buffer: Vec::new(), runs: Vec::new(), dir: None, spilled: 0 }
    }

    /// Adds a record.
    ///
    /// # Errors
    /// [`SpillError`] when a run cannot be written.
    pub fn push(&mut self, record: T) -> Result<(), SpillError> {
        self.held += record.memory_bytes() + slot::<T>();
        self.buffer.push(record);
        if self.held >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Runs written to disk so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    fn spill(&mut self) -> Result<(), SpillError> {
        if self.runs.len() + 1 >= MAX_RUNS {
            self.merge_runs()?;
        }
        if self.dir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("lake-spill-")
                .tempdir()
                .map_err(|source| SpillError { path: std::env::temp_dir().display().to_string(), source })?;
            self.dir = Some(dir);
        }
        let Some(dir) = self.dir.as_ref() else { return Ok(()) };
        let path = dir.path().join(format!("run-{:06}", self.runs.len()));
        let err = spill_error(&path);
        self.buffer.sort_unstable();
        let file = std::fs::File::create(&path).map_err(&err)?;
        let mut w = BufWriter::with_capacity(RUN_BUFFER, file);
        for record in self.buffer.drain(..) {
            record.write_to(&mut w).map_err(&err)?;
            self.spilled += 1;
        }
        w.flush().map_err(&err)?;
        drop(err);
        self.held = 0;
        self.buffer.shrink_to(1024);
        self.runs.push(path);
        Ok(())
    }

    /// Merges every run on disk into one (the buffer stays in memory).
    fn merge_runs(&mut self) -> Result<(), SpillError> {
        let Some(dir) = self.dir.as_ref() else { return Ok(()) };
        let path = dir.path().join(format!("merged-{:06}", self.spilled));
        let err = spill_error(&path);
        let mut merged = open_runs::<T>(&self.runs, Vec::new(), None)?;
        let file = std::fs::File::create(&path).map_err(&err)?;
        let mut w = BufWriter::with_capacity(RUN_BUFFER, file);
        while let Some(record) = merged.next_record()? {
            record.write_to(&mut w).map_err(&err)?;
        }
        w.flush().map_err(&err)?;
        drop(err);
        drop(merged);
        for old in self.runs.drain(..) {
            std::fs::remove_file(&old).map_err(spill_error(&old))?;
        }
        self.runs.push(path);
        Ok(())
    }

    /// The records in ascending order (duplicates kept).
    ///
    /// # Errors
    /// [`SpillError`] when a run cannot be reopened or its first record read.
    pub fn finish(mut self) -> Result<Merged<T>, SpillError> {
        self.buffer.sort_unstable();
        open_runs(&self.runs, std::mem::take(&mut self.buffer), self.dir.take())
    }
}

/// Opens `runs` (and the sorted `memory`) for merging; `dir` is kept alive with the merge.
fn open_runs<T: SpillRecord>(
    runs: &[PathBuf],
    memory: Vec<T>,
    dir: Option<tempfile::TempDir>,
) -> Result<Merged<T>, SpillError> {
    let mut readers = Vec::with_capacity(runs.len());
    for path in runs {
        let file = std::fs::File::open(path).map_err(spill_error(path))?;
        readers.push((BufReader::with_capacity(RUN_BUFFER, file), path.clone()));
    }
    let mut merged = Merged { readers, memory: memory.into_iter(), heap: BinaryHeap::new(), _dir: dir };
    for i in 0..merged.readers.len() {
        merged.refill(i)?;
    }
    merged.refill_memory();
    Ok(merged)
}

/// The merge of sorted runs: the records in ascending order.
pub struct Merged<T: SpillRecord> {
    readers: Vec<(BufReader<std::fs::File>, PathBuf)>,
    memory: std::vec::IntoIter<T>,
    /// (record, source): source `usize::MAX` is the in-memory buffer.
    heap: BinaryHeap<Reverse<(T, usize)>>,
    _dir: Option<tempfile::TempDir>,
}

impl<T: SpillRecord> std::fmt::Debug for Merged<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Merged").field("runs", &self.readers.len()).finish()
    }
}

impl<T: SpillRecord> Merged<T> {
    fn refill(&mut self, i: usize) -> Result<(), SpillError> {
        let (reader, path) = &mut self.readers[i];
        if let Some(record) = T::read_from(reader).map_err(spill_error(path))? {
            self.heap.push(Reverse((record, i)));
        }
        Ok(())
    }

    fn refill_memory(&mut self) {
        if let Some(record) = self.memory.next() {
            self.heap.push(Reverse((record, usize::MAX)));
        }
    }

    /// The next record in ascending order; `None` at the end.
    ///
    /// # Errors
    /// [`SpillError`] when a run cannot be read.
    pub fn next_record(&mut self) -> Result<Option<T>, SpillError> {
        let Some(Reverse((record, source))) = self.heap.pop() else {
            return Ok(None);
        };
        if source == usize::MAX {
            self.refill_memory();
        } else {
            self.refill(source)?;
        }
        Ok(Some(record))
    }

    /// The next record without taking it.
    pub fn peek(&self) -> Option<&T> {
        self.heap.peek().map(|Reverse((record, _))| record)
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the input ends before the first byte.
///
/// # Errors
/// [`std::io::ErrorKind::InvalidData`] when the input ends inside `buf` (a truncated record).
pub fn read_exact_or_end(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated spill record")),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Writes `text` as a [`String`] record writes it (its length as 4 bytes little-endian, then
/// its UTF-8 bytes), for records that hold a string in another type.
///
/// # Errors
/// The writer's errors, and [`std::io::ErrorKind::InvalidInput`] past 4 GiB.
pub fn write_str(text: &str, out: &mut impl Write) -> std::io::Result<()> {
    let len = u32::try_from(text.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "string longer than 4 GiB"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(text.as_bytes())
}

/// Strings spill as a little-endian u32 length and their bytes ([`write_str`]).
impl SpillRecord for String {
    fn memory_bytes(&self) -> usize {
        self.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        write_str(self, out)
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        let mut len = [0u8; 4];
        if !read_exact_or_end(input, &mut len)? {
            return Ok(None);
        }
        let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
        if !bytes.is_empty() && !read_exact_or_end(input, &mut bytes)? {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated spill record"));
        }
        String::from_utf8(bytes).map(Some).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_runs_equal_a_sort_of_the_input() {
        let input: Vec<String> = (0..1000).map(|i| format!("k{:04}", (i * 7919) % 613)).collect();
        for budget in [0, 100, 4096, 1 << 30] {
            let mut runs = SortedRuns::new(budget);
            for k in &input {
                runs.push(k.clone()).unwrap();
            }
            if budget < 4096 {
                assert!(runs.runs() > 1, "budget {budget}");
            }
            assert!(runs.runs() < MAX_RUNS);
            if budget == 1 << 30 {
                assert_eq!(runs.runs(), 0);
            }
            let mut merged = runs.finish().unwrap();
            let mut got = Vec::new();
            while let Some(k) = merged.next_record().unwrap() {
                got.push(k);
            }
            let mut want = input.clone();
            want.sort();
            assert_eq!(got, want, "budget {budget}");
        }
    }

    #[test]
    fn a_truncated_run_is_an_error_not_an_end() {
        let mut bytes = Vec::new();
        "hello".to_string().write_to(&mut bytes).unwrap();
        bytes.pop();
        assert!(String::read_from(&mut bytes.as_slice()).is_err());
        assert!(String::read_from(&mut &b""[..]).unwrap().is_none());
    }
}
