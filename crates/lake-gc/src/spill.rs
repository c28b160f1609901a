//! A set of keys larger than memory: keys buffered up to a budget, spilled as sorted runs to a
//! local temporary folder, and merged back ascending and deduplicated.
//!
//! A thin layer over [`lake_engine::spill`] (the external sort the engine's bounded replay also
//! uses) that drops repeated keys while merging.

use crate::error::GcError;
use lake_engine::spill::Merged;

/// A key set built from unsorted inserts, spilled in sorted runs past a budget.
#[derive(Debug)]
pub struct SortedRuns {
    inner: lake_engine::spill::SortedRuns<String>,
}

impl SortedRuns {
    /// An empty set holding keys estimated at up to `budget_bytes` in memory (about 24 bytes
    /// plus the key's length each); the temporary folder is created on the first spill.
    pub fn new(budget_bytes: usize) -> Self {
        Self { inner: lake_engine::spill::SortedRuns::new(budget_bytes) }
    }

    /// Adds a key.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a run cannot be written.
    pub fn push(&mut self, key: String) -> Result<(), GcError> {
        Ok(self.inner.push(key)?)
    }

    /// Number of runs written to disk so far.
    pub fn runs(&self) -> usize {
        self.inner.runs()
    }

    /// The merged, ascending, deduplicated keys.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a run cannot be reopened.
    pub fn finish(self) -> Result<MergedKeys, GcError> {
        Ok(MergedKeys { merged: self.inner.finish()?, last: None })
    }
}

/// The merge of sorted runs: an iterator of ascending, distinct keys.
#[derive(Debug)]
pub struct MergedKeys {
    merged: Merged<String>,
    last: Option<String>,
}

impl MergedKeys {
    /// The next key, ascending and distinct.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a run cannot be read.
    pub fn next_key(&mut self) -> Result<Option<String>, GcError> {
        while let Some(key) = self.merged.next_record()? {
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
        for budget in [0, 300, 4096, 1 << 30] {
            let mut runs = SortedRuns::new(budget);
            for k in &input {
                runs.push(k.clone()).unwrap();
            }
            if budget < 4096 {
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
