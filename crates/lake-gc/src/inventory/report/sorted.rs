//! A report's entries sorted by key in one local file, read from any key.
//!
//! AWS's data files are in no order (neither across files nor within one), so the entries go
//! through an external sort ([`lake_engine::spill::SortedRuns`], within a memory budget) and the
//! merge is written to one temporary file, with every [`INDEX_STRIDE`]th key and its offset kept
//! in memory: a listing from a key seeks to the last indexed key at or before it and reads on.
//! Memory: the sort's budget while building; then the index, about 100 bytes per
//! [`INDEX_STRIDE`] entries (1.5 MB for a billion keys), and one 64 KiB read buffer per listing.

use crate::error::GcError;
use lake_engine::spill::{read_exact_or_end, SortedRuns, SpillRecord};
use lake_store::StoreError;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};

/// Entries between two indexed keys.
pub const INDEX_STRIDE: u64 = 65_536;
/// Read and write buffer of the sorted file, in bytes.
const BUFFER: usize = 64 * 1024;

/// One entry of a report: a key relative to the lake root, its size and `last_modified`.
/// Ordered by key, then time, then size (the newest of two rows of one key sorts last).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReportRecord {
    /// Key relative to the lake root (`objects/...`).
    pub key: String,
    /// `LastModifiedDate`, milliseconds since the Unix epoch (UTC).
    pub last_modified_ms: i64,
    /// `Size`, bytes.
    pub size: u64,
}

impl SpillRecord for ReportRecord {
    fn memory_bytes(&self) -> usize {
        self.key.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        self.key.write_to(out)?;
        out.write_all(&self.last_modified_ms.to_le_bytes())?;
        out.write_all(&self.size.to_le_bytes())
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        let Some(key) = String::read_from(input)? else { return Ok(None) };
        let truncated = || std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated report record");
        let mut time = [0u8; 8];
        let mut size = [0u8; 8];
        if !read_exact_or_end(input, &mut time)? || !read_exact_or_end(input, &mut size)? {
            return Err(truncated());
        }
        Ok(Some(Self { key, last_modified_ms: i64::from_le_bytes(time), size: u64::from_le_bytes(size) }))
    }
}

/// A report's entries, ascending and one per key, in a temporary file (removed on drop).
#[derive(Debug)]
pub struct SortedReport {
    file: tempfile::NamedTempFile,
    /// `(key, offset of its record)` of every [`INDEX_STRIDE`]th entry, ascending.
    index: Vec<(String, u64)>,
    len: u64,
}

fn io_error(path: &std::path::Path) -> impl Fn(std::io::Error) -> GcError + '_ {
    move |source| GcError::from(StoreError::Io { path: path.display().to_string(), source })
}

impl SortedReport {
    /// Writes the merge of `runs`, keeping the last record of each key (the newest).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a run or the file cannot be read or written.
    pub fn build(runs: SortedRuns<ReportRecord>) -> Result<Self, GcError> {
        Self::build_with_stride(runs, INDEX_STRIDE)
    }

    fn build_with_stride(runs: SortedRuns<ReportRecord>, stride: u64) -> Result<Self, GcError> {
        let stride = stride.max(1);
        let mut merged = runs.finish()?;
        let file = tempfile::Builder::new().prefix("lake-inventory-report-").tempfile().map_err(|source| {
            GcError::from(StoreError::Io { path: std::env::temp_dir().display().to_string(), source })
        })?;
        let path = file.path().to_path_buf();
        let err = io_error(&path);
        let mut out = BufWriter::with_capacity(BUFFER, file.as_file());
        let mut index = Vec::new();
        let (mut len, mut offset) = (0u64, 0u64);
        let mut current: Option<ReportRecord> = None;
        let mut write = |record: ReportRecord, len: &mut u64, offset: &mut u64| -> Result<(), GcError> {
            if len.is_multiple_of(stride) {
                index.push((record.key.clone(), *offset));
            }
            let mut bytes = Vec::with_capacity(record.key.len() + 20);
            record.write_to(&mut bytes).map_err(&err)?;
            out.write_all(&bytes).map_err(&err)?;
            *offset += bytes.len() as u64;
            *len += 1;
            Ok(())
        };
        while let Some(record) = merged.next_record()? {
            if let Some(previous) = current.take() {
                if previous.key != record.key {
                    write(previous, &mut len, &mut offset)?;
                }
            }
            current = Some(record);
        }
        if let Some(last) = current {
            write(last, &mut len, &mut offset)?;
        }
        out.flush().map_err(&err)?;
        drop(out);
        drop(err);
        Ok(Self { file, index, len })
    }

    /// Entries (distinct keys).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when the report has no entry.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A reader of the entries whose keys are strictly greater than `after` (all when `None`).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when the file cannot be reopened.
    pub fn reader(&self, after: Option<&str>) -> Result<SortedReader, GcError> {
        let err = io_error(self.file.path());
        let mut file = self.file.reopen().map_err(&err)?;
        let start = match after {
            // The last indexed key at or before `after`: every later key is after it.
            Some(a) => match self.index.partition_point(|(k, _)| k.as_str() <= a) {
                0 => 0,
                i => self.index[i - 1].1,
            },
            None => 0,
        };
        file.seek(SeekFrom::Start(start)).map_err(&err)?;
        Ok(SortedReader {
            input: BufReader::with_capacity(BUFFER, file),
            after: after.map(str::to_string),
            path: self.file.path().display().to_string(),
        })
    }
}

/// Entries of a [`SortedReport`] after a key, ascending.
#[derive(Debug)]
pub struct SortedReader {
    input: BufReader<std::fs::File>,
    /// Records up to this key are skipped (then `None`).
    after: Option<String>,
    path: String,
}

impl SortedReader {
    /// The next entry, or `None` at the end.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when the file cannot be read.
    pub fn next_record(&mut self) -> Result<Option<ReportRecord>, GcError> {
        loop {
            let record = ReportRecord::read_from(&mut self.input)
                .map_err(|source| GcError::from(StoreError::Io { path: self.path.clone(), source }))?;
            match (record, &self.after) {
                (Some(r), Some(a)) if r.key.as_str() <= a.as_str() => continue,
                (record, _) => {
                    self.after = None;
                    return Ok(record);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, ms: i64) -> ReportRecord {
        ReportRecord { key: key.to_string(), last_modified_ms: ms, size: ms as u64 }
    }

    #[test]
    fn sorted_keeps_the_newest_of_a_key_and_reads_from_any_key() {
        let keys: Vec<String> = (0..20_000u64).map(|i| format!("objects/k{:06}", (i * 7919) % 15_000)).collect();
        let mut runs = SortedRuns::new(128 * 1024);
        for (i, k) in keys.iter().enumerate() {
            runs.push(record(k, i as i64)).unwrap();
        }
        assert!(runs.runs() > 1);
        let sorted = SortedReport::build_with_stride(runs, 1000).unwrap();
        assert_eq!(sorted.len(), 15_000);
        assert!(sorted.index.len() > 2);
        let mut all = sorted.reader(None).unwrap();
        let mut previous: Option<ReportRecord> = None;
        while let Some(r) = all.next_record().unwrap() {
            if let Some(p) = &previous {
                assert!(p.key < r.key);
            }
            // The newest of the two rows of a key written twice (later rows have larger times).
            let newest = keys.iter().rposition(|k| *k == r.key).unwrap() as i64;
            assert_eq!(r.last_modified_ms, newest);
            previous = Some(r);
        }
        for after in ["", "objects/k000000", "objects/k000999", "objects/k001000", "objects/k007000x", "objects/z"] {
            let mut reader = sorted.reader(Some(after)).unwrap();
            let first = reader.next_record().unwrap().map(|r| r.key);
            let want = (0..15_000u64).map(|i| format!("objects/k{i:06}")).find(|k| k.as_str() > after);
            assert_eq!(first, want, "after {after}");
        }
        let empty = SortedReport::build(SortedRuns::new(1024)).unwrap();
        assert!(empty.is_empty() && empty.reader(Some("a")).unwrap().next_record().unwrap().is_none());
    }
}
