//! The identities a range of a lineage's journal entries removed
//! ([`lake_engine::Engine::references_removed_between`]): what an incremental GC plan examines
//! as the keys released since its state. Only the entries of the range are read, sidecars of
//! versions a cleanup removed included (the journal outlives its versions, `crate::sidecar`);
//! a reference checkpoint plays no part.
//!
//! Of each entry, the document and its removals are read, not the log of what it added
//! ([`EntrySink::wants`]): an append's entry is a head naming a log of every row it wrote, and
//! after a cleanup the range starts at the oldest version the state retained, so reading those
//! logs would read every reference the lake added since. A key an entry in the range added is
//! released only by a later entry's removal (read here) or by a snapshot (noted from the
//! document, and replayed by the planner); while a version that added it is retained, the
//! plan's live set holds it: that replay reads (and checks) the reference checkpoint, which
//! stands for the versions up to it, and the logs of every version after it. So an incremental
//! plan reads of the journal what changed since its state, whatever a cleanup dropped.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use crate::sidecar::{self, EntryHead, EntrySink};
use lake_common::{DecodeError, DeltaKind, EntryList, ObjectIdentity};
use lake_engine::{EngineError, Removals, UriRange};

/// The sink that hands the removed identities of the entries after `lower` to `visit`, notes
/// those that are snapshots, and stops at the first entry missing (a gap in the versions) or
/// undecodable.
struct Removed<'a> {
    /// Removals of versions after this are handed over (`None`: the first entry read sets it).
    lower: Option<u64>,
    /// The version whose entry comes next.
    expected: Option<u64>,
    /// The versions after `lower` whose entry is a snapshot.
    snapshots: Vec<u64>,
    range: &'a UriRange,
    visit: &'a mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    /// Why reading stopped early.
    outcome: Option<Removals>,
    /// What `visit` failed with.
    failed: Option<EngineError>,
}

impl Removed<'_> {
    fn stop(&mut self, outcome: Removals) -> Result<(), LanceEngineError> {
        self.outcome = Some(outcome);
        Err(LanceEngineError::InvalidInput("reading the journal's removals stopped".into()))
    }
}

impl EntrySink for Removed<'_> {
    fn begin(&mut self, head: &EntryHead) -> Result<(), LanceEngineError> {
        let v = head.version;
        let Some(lower) = self.lower else {
            // A lineage read from its first entry: version 1, or the snapshot a branch starts with.
            if v != 1 && head.kind != DeltaKind::Snapshot {
                return self.stop(Removals::Unreadable {
                    version: v,
                    reason: "the lineage's first journal entry is neither version 1 nor a snapshot".into(),
                });
            }
            self.lower = Some(v);
            self.expected = Some(v);
            return Ok(());
        };
        if let Some(expected) = self.expected.filter(|e| *e != v) {
            return self.stop(Removals::Unreadable { version: expected, reason: "it has no journal entry".into() });
        }
        if v > lower && head.kind == DeltaKind::Snapshot {
            self.snapshots.push(v);
        }
        Ok(())
    }

    fn reference(
        &mut self,
        version: u64,
        list: EntryList,
        identity: ObjectIdentity,
        _count: u64,
    ) -> Result<(), LanceEngineError> {
        let after_lower = self.lower.is_some_and(|l| version > l);
        if list != EntryList::Removed || !after_lower || !(self.range.is_all() || self.range.concerns(&identity.uri)) {
            return Ok(());
        }
        if let Err(e) = (self.visit)(identity) {
            self.failed = Some(e);
            return Err(LanceEngineError::InvalidInput("the reader of the journal's removals stopped".into()));
        }
        Ok(())
    }

    fn range(&self) -> Option<&UriRange> {
        Some(self.range)
    }

    fn wants(&self, list: EntryList) -> bool {
        list == EntryList::Removed
    }

    fn end(&mut self, version: u64, entry: Result<EntryHead, DecodeError>) -> Result<(), LanceEngineError> {
        match entry {
            Ok(_) => {
                self.expected = Some(version.saturating_add(1));
                Ok(())
            }
            Err(e) => self.stop(Removals::Unreadable { version, reason: format!("its entry cannot be decoded ({e})") }),
        }
    }
}

impl LanceEngine {
    /// See [`lake_engine::Engine::references_removed_between`].
    ///
    /// # Errors
    /// Storage and Lance errors; whatever `visit` returns.
    pub(crate) async fn removed_between(
        &self,
        table: &str,
        after: Option<u64>,
        upto: u64,
        range: &UriRange,
        visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
    ) -> Result<Removals, EngineError> {
        let mut listing = sidecar::list(self.store(), table).await?;
        let from = match after {
            Some(after) => after.saturating_add(1),
            None => match listing.files.keys().next() {
                Some(first) => *first,
                None => return Ok(Removals::Read { after: 0, snapshots: Vec::new() }),
            },
        };
        if from > upto {
            return Ok(Removals::Read { after: from.saturating_sub(1), snapshots: Vec::new() });
        }
        // The dataset is read only when a version in the range has no sidecar (an implied entry
        // of another client's content-preserving commit, judged from its Lance transaction).
        if (from..=upto).any(|v| !listing.files.contains_key(&v)) {
            let ds = self.open(table).await?;
            crate::foreign::imply_entries(&ds, table, self.store().root(), &mut listing, from..=upto).await;
        }
        let mut sink = Removed {
            lower: after,
            expected: after.map(|a| a.saturating_add(1)),
            snapshots: Vec::new(),
            range,
            visit,
            outcome: None,
            failed: None,
        };
        let streamed = sidecar::stream_listed(self.store(), table, &listing, from..=upto, &mut sink).await;
        if let Some(e) = sink.failed.take() {
            return Err(e);
        }
        if let Some(outcome) = sink.outcome.take() {
            return Ok(outcome);
        }
        streamed?;
        match sink.expected {
            Some(next) if next <= upto => {
                Ok(Removals::Unreadable { version: next, reason: "it has no journal entry".into() })
            }
            _ => Ok(Removals::Read { after: sink.lower.unwrap_or(from), snapshots: sink.snapshots }),
        }
    }
}
