//! The candidate list of a plan, in memory or spilled to a local temporary file.
//!
//! The sweep produces candidates in key order. [`CandidateWriter`] keeps them in memory up to a
//! budget (bytes); past it, they move to one temporary file and every later candidate is
//! appended there, so planning never holds every candidate. A [`CandidateList`] serialises the
//! same way from either place (the plan's bytes and digest do not depend on where its
//! candidates were kept), deserialises the same way (a plan document read back spills past
//! [`LOADED_LIST_BUDGET_BYTES`]), and is read in order by a [`CandidateCursor`] (apply).

use crate::error::GcError;
use crate::plan::Candidate;
use crate::plan_time::PlanTime;
use lake_engine::spill::{read_exact_or_end, write_str, SpillRecord};
use lake_store::StoreError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::io::{BufReader, BufWriter, Read, Write};
use std::ops::ControlFlow;
use std::sync::Arc;

impl SpillRecord for Candidate {
    fn memory_bytes(&self) -> usize {
        self.key.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        write_str(self.key.as_str(), out)?;
        out.write_all(&self.size.to_le_bytes())?;
        out.write_all(&self.last_modified.timestamp_millis().to_le_bytes())
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        let Some(key) = String::read_from(input)? else {
            return Ok(None);
        };
        let (mut size, mut time) = ([0u8; 8], [0u8; 8]);
        let truncated = || std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated candidate record");
        if !read_exact_or_end(input, &mut size)? || !read_exact_or_end(input, &mut time)? {
            return Err(truncated());
        }
        let last_modified = PlanTime::from_timestamp_millis(i64::from_le_bytes(time))
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "a candidate's time out of range"))?;
        Ok(Some(Candidate { key: key.into(), size: u64::from_le_bytes(size), last_modified }))
    }
}

fn io(path: &str) -> impl Fn(std::io::Error) -> GcError + '_ {
    move |source| GcError::from(StoreError::Io { path: path.to_string(), source })
}

#[derive(Clone)]
enum Repr {
    Memory(Arc<Vec<Candidate>>),
    /// Every candidate, in order, in a temporary file (removed when the last clone drops).
    Spilled(Arc<tempfile::NamedTempFile>),
}

/// A plan's candidates, ascending by key: in memory, or in a local temporary file.
#[derive(Clone)]
pub struct CandidateList {
    repr: Repr,
    len: usize,
    bytes: u64,
}

impl std::fmt::Debug for CandidateList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match &self.repr {
            Repr::Memory(_) => "memory".to_string(),
            Repr::Spilled(file) => file.path().display().to_string(),
        };
        f.debug_struct("CandidateList").field("len", &self.len).field("bytes", &self.bytes).field("in", &place).finish()
    }
}

impl CandidateList {
    /// A list held in memory; `candidates` must be sorted by key (the plan's order).
    pub fn from_sorted(candidates: Vec<Candidate>) -> Self {
        let bytes = candidates.iter().map(|c| c.size).sum();
        Self { len: candidates.len(), bytes, repr: Repr::Memory(Arc::new(candidates)) }
    }

    /// Number of candidates.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total size of the candidates in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.bytes
    }

    /// Whether the list lives in a temporary file.
    pub fn is_spilled(&self) -> bool {
        matches!(self.repr, Repr::Spilled(_))
    }

    /// Visits the candidates in order until `visit` breaks.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be read.
    pub fn visit(&self, mut visit: impl FnMut(&Candidate) -> ControlFlow<()>) -> Result<(), GcError> {
        match &self.repr {
            Repr::Memory(v) => {
                for c in v.iter() {
                    if visit(c).is_break() {
                        break;
                    }
                }
            }
            Repr::Spilled(file) => {
                let path = file.path().display().to_string();
                let mut reader = BufReader::new(file.reopen().map_err(io(&path))?);
                while let Some(c) = Candidate::read_from(&mut reader).map_err(io(&path))? {
                    if visit(&c).is_break() {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Up to `n` first candidates.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be read.
    pub fn first(&self, n: usize) -> Result<Vec<Candidate>, GcError> {
        let mut out = Vec::new();
        self.visit(|c| {
            if out.len() == n {
                return ControlFlow::Break(());
            }
            out.push(c.clone());
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Every candidate as a vector (reads a spilled list whole).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be read.
    pub fn to_vec(&self) -> Result<Vec<Candidate>, GcError> {
        self.first(usize::MAX)
    }

    /// The candidates' keys, in order (reads a spilled list whole).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be read.
    pub fn keys(&self) -> Result<Vec<String>, GcError> {
        Ok(self.to_vec()?.into_iter().map(|c| c.key.into_string()).collect())
    }

    /// A cursor over the candidates from index `skip` (0-based) on: one sequential pass, holding
    /// one candidate at a time (an in-memory list is shared, not copied).
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be opened or read.
    pub fn cursor(&self, skip: u64) -> Result<CandidateCursor, GcError> {
        let skip = usize::try_from(skip).unwrap_or(usize::MAX);
        match &self.repr {
            Repr::Memory(v) => {
                Ok(CandidateCursor { source: CursorSource::Memory(v.clone(), skip), path: "memory".into() })
            }
            Repr::Spilled(file) => {
                let path = file.path().display().to_string();
                let mut cursor = CandidateCursor {
                    source: CursorSource::Spilled(BufReader::new(file.reopen().map_err(io(&path))?)),
                    path,
                };
                for _ in 0..skip {
                    if cursor.next_candidate()?.is_none() {
                        break;
                    }
                }
                Ok(cursor)
            }
        }
    }
}

impl PartialEq for CandidateList {
    fn eq(&self, other: &Self) -> bool {
        if self.len != other.len || self.bytes != other.bytes {
            return false;
        }
        match (self.to_vec(), other.to_vec()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for CandidateList {}

/// Serialises as a JSON array of candidates, streamed from the file of a spilled list.
impl Serialize for CandidateList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.len))?;
        let mut failed = None;
        let visited = self.visit(|c| match seq.serialize_element(c) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        visited.map_err(|e| S::Error::custom(format!("cannot read the spilled candidate list: {e}")))?;
        seq.end()
    }
}

/// Bytes of candidates a deserialised list (a plan document read back) holds in memory before
/// the rest goes to a temporary file: about 800,000 candidates of the lake's keys (a key of
/// about 60 bytes and its record's fixed 40).
pub const LOADED_LIST_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// Deserialises a JSON array of candidates through a [`CandidateWriter`] of
/// [`LOADED_LIST_BUDGET_BYTES`]: a long list spills to a temporary file as it is read, and
/// candidates out of strictly ascending key order are refused.
impl<'de> Deserialize<'de> for CandidateList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Candidates;
        impl<'de> serde::de::Visitor<'de> for Candidates {
            type Value = CandidateList;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of candidates in ascending key order")
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<CandidateList, A::Error> {
                use serde::de::Error;
                let mut writer = CandidateWriter::new(LOADED_LIST_BUDGET_BYTES);
                while let Some(candidate) = seq.next_element::<Candidate>()? {
                    writer.push(candidate).map_err(A::Error::custom)?;
                }
                writer.finish().map_err(A::Error::custom)
            }
        }
        deserializer.deserialize_seq(Candidates)
    }
}

/// Reads a [`CandidateList`] in order from a position, one candidate at a time (see
/// [`CandidateList::cursor`]).
pub struct CandidateCursor {
    source: CursorSource,
    path: String,
}

enum CursorSource {
    /// The list and the index of the next candidate.
    Memory(Arc<Vec<Candidate>>, usize),
    Spilled(BufReader<std::fs::File>),
}

impl std::fmt::Debug for CandidateCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandidateCursor").field("path", &self.path).finish()
    }
}

impl CandidateCursor {
    /// The next candidate; `None` after the last.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a spilled list cannot be read.
    pub fn next_candidate(&mut self) -> Result<Option<Candidate>, GcError> {
        match &mut self.source {
            CursorSource::Memory(list, next) => {
                let candidate = list.get(*next).cloned();
                *next += usize::from(candidate.is_some());
                Ok(candidate)
            }
            CursorSource::Spilled(reader) => Candidate::read_from(reader).map_err(io(&self.path)),
        }
    }
}

/// Builds a [`CandidateList`] from candidates pushed in ascending key order, spilling to a
/// temporary file past a memory budget.
pub struct CandidateWriter {
    budget: usize,
    held: usize,
    memory: Vec<Candidate>,
    file: Option<(tempfile::NamedTempFile, BufWriter<std::fs::File>)>,
    len: usize,
    bytes: u64,
    /// The previous candidate's key (its buffer reused, no allocation per candidate).
    last: String,
}

impl std::fmt::Debug for CandidateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandidateWriter").field("len", &self.len).field("spilled", &self.file.is_some()).finish()
    }
}

impl CandidateWriter {
    /// A writer holding candidates estimated at up to `budget_bytes` in memory.
    pub fn new(budget_bytes: usize) -> Self {
        Self { budget: budget_bytes, held: 0, memory: Vec::new(), file: None, len: 0, bytes: 0, last: String::new() }
    }

    /// Appends a candidate.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`](lake_store::StoreError::Corrupt) when `candidate` does not sort after the previous one (the
    /// inventory broke its order; nothing is planned from it); [`StoreError::Io`](lake_store::StoreError::Io) when the
    /// temporary file cannot be written.
    pub fn push(&mut self, candidate: Candidate) -> Result<(), GcError> {
        if self.len > 0 && self.last.as_str() >= candidate.key.as_str() {
            return Err(GcError::from(StoreError::Corrupt {
                path: candidate.key.into_string(),
                what: "inventory listing",
                message: "keys did not come in strictly ascending order; nothing was planned".into(),
            }));
        }
        self.last.clear();
        self.last.push_str(candidate.key.as_str());
        self.len += 1;
        self.bytes += candidate.size;
        if let Some((file, w)) = self.file.as_mut() {
            return candidate.write_to(w).map_err(io(&file.path().display().to_string()));
        }
        self.held += candidate.memory_bytes() + std::mem::size_of::<Candidate>();
        self.memory.push(candidate);
        if self.held >= self.budget {
            let file = tempfile::Builder::new()
                .prefix("lake-candidates-")
                .tempfile()
                .map_err(io(&std::env::temp_dir().display().to_string()))?;
            let path = file.path().display().to_string();
            let mut w = BufWriter::with_capacity(64 * 1024, file.reopen().map_err(io(&path))?);
            for c in self.memory.drain(..) {
                c.write_to(&mut w).map_err(io(&path))?;
            }
            self.memory = Vec::new();
            self.file = Some((file, w));
        }
        Ok(())
    }

    /// The finished list.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when the temporary file cannot be flushed.
    pub fn finish(self) -> Result<CandidateList, GcError> {
        let repr = match self.file {
            None => Repr::Memory(Arc::new(self.memory)),
            Some((file, mut w)) => {
                w.flush().map_err(io(&file.path().display().to_string()))?;
                Repr::Spilled(Arc::new(file))
            }
        };
        Ok(CandidateList { repr, len: self.len, bytes: self.bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(i: usize) -> Candidate {
        Candidate {
            key: format!("objects/{i:05}/x").into(),
            size: i as u64,
            last_modified: "2026-01-01T00:00:00.000Z".parse().unwrap(),
        }
    }

    #[test]
    fn a_spilled_list_equals_and_serialises_like_the_memory_one() {
        let all: Vec<Candidate> = (0..500).map(c).collect();
        let memory = CandidateList::from_sorted(all.clone());
        let mut w = CandidateWriter::new(2048);
        for x in &all {
            w.push(x.clone()).unwrap();
        }
        let spilled = w.finish().unwrap();
        assert!(spilled.is_spilled() && !memory.is_spilled());
        assert_eq!(spilled.len(), 500);
        assert_eq!(spilled.total_bytes(), memory.total_bytes());
        assert_eq!(spilled, memory);
        assert_eq!(serde_json::to_vec(&spilled).unwrap(), serde_json::to_vec(&memory).unwrap());
        assert_eq!(spilled.first(3).unwrap(), all[..3].to_vec());
        let mut cursor = spilled.cursor(498).unwrap();
        assert_eq!(cursor.next_candidate().unwrap(), Some(all[498].clone()));
        assert_eq!(cursor.next_candidate().unwrap(), Some(all[499].clone()));
        assert_eq!(cursor.next_candidate().unwrap(), None);
        let mut cursor = memory.cursor(499).unwrap();
        assert_eq!(cursor.next_candidate().unwrap(), Some(all[499].clone()));
        assert_eq!(cursor.next_candidate().unwrap(), None);
        assert_eq!(spilled.cursor(900).unwrap().next_candidate().unwrap(), None);
        let back: CandidateList = serde_json::from_slice(&serde_json::to_vec(&spilled).unwrap()).unwrap();
        assert_eq!(back, memory);
    }

    #[test]
    fn out_of_order_candidates_are_refused() {
        let mut w = CandidateWriter::new(0);
        w.push(c(2)).unwrap();
        assert!(matches!(w.push(c(1)), Err(GcError::Store(lake_store::StoreError::Corrupt { .. }))));
        assert!(matches!(w.push(c(2)), Err(GcError::Store(lake_store::StoreError::Corrupt { .. }))));
    }
}
