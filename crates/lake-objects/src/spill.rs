//! Sorted runs spilled to local disk and merged: a set of keys larger than memory.
//!
//! Keys are buffered up to a budget (a count of keys), then sorted and written as a run file
//! (one key per line) in a temporary folder; [`SortedRuns::finish`] merges the runs (and what is
//! still buffered) into one ascending, deduplicated stream, holding one key per run in memory.
//! Keys must not contain a newline (identity URIs never do: normalisation refuses control
//! characters).

use crate::error::ObjectsError;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, BufReader, BufWriter, Write};

/// Default number of keys held in memory before a run is spilled.
pub const DEFAULT_BUDGET: usize = 1_000_000;

/// A key set built from unsorted inserts, spilled in sorted runs past a budget.
pub struct SortedRuns {
    budget: usize,
    buffer: Vec<String>,
    runs: Vec<tempfile::NamedTempFile>,
    dir: tempfile::TempDir,
    spilled: u64,
}

impl std::fmt::Debug for SortedRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedRuns").field("budget", &self.budget).field("runs", &self.runs.len()).finish()
    }
}

fn io(e: std::io::Error) -> ObjectsError {
    ObjectsError::Io { path: "spill folder".into(), source: e }
}

impl SortedRuns {
    /// An empty set holding at most `budget` (>= 1) keys in memory.
    ///
    /// # Errors
    /// [`ObjectsError::Io`] when the temporary folder cannot be created.
    pub fn new(budget: usize) -> Result<Self, ObjectsError> {
        Ok(Self {
            budget: budget.max(1),
            buffer: Vec::new(),
            runs: Vec::new(),
            dir: tempfile::tempdir().map_err(io)?,
            spilled: 0,
        })
    }

    /// Adds a key.
    ///
    /// # Errors
    /// [`ObjectsError::Io`] when a run cannot be written.
    pub fn push(&mut self, key: String) -> Result<(), ObjectsError> {
        self.buffer.push(key);
        if self.buffer.len() >= self.budget {
            self.spill()?;
        }
        Ok(())
    }

    /// Number of runs written to disk so far.
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Keys written to disk so far.
    pub fn spilled_keys(&self) -> u64 {
        self.spilled
    }

    fn spill(&mut self) -> Result<(), ObjectsError> {
        self.buffer.sort_unstable();
        self.buffer.dedup();
        let file = tempfile::NamedTempFile::new_in(self.dir.path()).map_err(io)?;
        {
            let mut w = BufWriter::new(file.as_file());
            for k in self.buffer.drain(..) {
                w.write_all(k.as_bytes()).map_err(io)?;
                w.write_all(b"\n").map_err(io)?;
                self.spilled += 1;
            }
            w.flush().map_err(io)?;
        }
        self.runs.push(file);
        Ok(())
    }

    /// The merged, ascending, deduplicated keys.
    ///
    /// # Errors
    /// [`ObjectsError::Io`] when a run cannot be reopened.
    pub fn finish(mut self) -> Result<MergedKeys, ObjectsError> {
        self.buffer.sort_unstable();
        self.buffer.dedup();
        let mut readers = Vec::new();
        for run in &self.runs {
            let f = std::fs::File::open(run.path()).map_err(io)?;
            readers.push(BufReader::new(f).lines());
        }
        let memory = std::mem::take(&mut self.buffer).into_iter();
        let mut merged = MergedKeys { readers, memory, heap: BinaryHeap::new(), last: None, _runs: self };
        for i in 0..merged.readers.len() {
            merged.refill(i)?;
        }
        merged.refill_memory();
        Ok(merged)
    }
}

/// The merge of sorted runs: an iterator of ascending, distinct keys.
pub struct MergedKeys {
    readers: Vec<std::io::Lines<BufReader<std::fs::File>>>,
    memory: std::vec::IntoIter<String>,
    /// (key, source): source `usize::MAX` is the in-memory buffer.
    heap: BinaryHeap<Reverse<(String, usize)>>,
    last: Option<String>,
    _runs: SortedRuns,
}

impl MergedKeys {
    fn refill(&mut self, i: usize) -> Result<(), ObjectsError> {
        if let Some(line) = self.readers[i].next() {
            self.heap.push(Reverse((line.map_err(io)?, i)));
        }
        Ok(())
    }

    fn refill_memory(&mut self) {
        if let Some(k) = self.memory.next() {
            self.heap.push(Reverse((k, usize::MAX)));
        }
    }

    /// The next key, ascending and distinct.
    ///
    /// # Errors
    /// [`ObjectsError::Io`] when a run cannot be read.
    pub fn next_key(&mut self) -> Result<Option<String>, ObjectsError> {
        while let Some(Reverse((key, source))) = self.heap.pop() {
            if source == usize::MAX {
                self.refill_memory();
            } else {
                self.refill(source)?;
            }
            if self.last.as_deref() != Some(key.as_str()) {
                self.last = Some(key.clone());
                return Ok(Some(key));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_runs_equal_a_sorted_dedup_of_the_input() {
        let input: Vec<String> = (0..1000).map(|i| format!("k{:04}", (i * 7919) % 613)).collect();
        for budget in [1, 3, 64, 10_000] {
            let mut runs = SortedRuns::new(budget).unwrap();
            for k in &input {
                runs.push(k.clone()).unwrap();
            }
            if budget < input.len() {
                assert!(runs.runs() > 0);
            }
            let mut merged = runs.finish().unwrap();
            let mut got = Vec::new();
            while let Some(k) = merged.next_key().unwrap() {
                got.push(k);
            }
            let mut want = input.clone();
            want.sort();
            want.dedup();
            assert_eq!(got, want, "budget {budget}");
        }
    }
}
