//! Journal replay in bounded memory: the live set of a table whose journal holds more references
//! than fit in memory.
//!
//! [`crate::replay::Replay`] walks versions in order and keeps every identity with a positive
//! count in a map. [`SpilledJournal`] computes the same live set identity by identity instead:
//!
//! 1. Every journal entry becomes events `(identity, version, op)` (a delta's removals and
//!    additions, a snapshot's counts), pushed in any version order into an external sort
//!    ([`crate::spill`]) that spills sorted runs to the temporary folder past a memory budget.
//! 2. Merged in `(identity, version)` order, one identity's events are replayed on their own:
//!    its count changes only at its own events and drops to zero at every snapshot that does not
//!    list it (a snapshot replaces the whole state). That gives the identity's intervals of
//!    versions `[since, until)` with a positive count, and it is live when a retained version
//!    falls in one of them: the rule of `docs/journal-format.md` ("Replay and liveness"), identical to the in-memory replay
//!    (a property test compares the two on random journals).
//!
//! The live identities come out ascending, as a stream ([`LiveIdentities`]), so pages are cut
//! from it without materialising the set. The same per-identity replay also reads out the counts
//! at every retained version ([`SpilledJournal::retained_counts`], a [`RetainedCounts`] stream
//! sorted by identity then version), which `lake refs verify` compares with full scans. Memory: the budget, one read buffer per spilled run,
//! the events of one identity, and one entry per version (its kind). A removal that takes a
//! count below zero is an error for that identity when the stream reaches it (the in-memory
//! replay reports the earliest version; this one the first identity in order): either way the
//! journal is inconsistent and lineage incomplete.
//!
//! (Longer than most modules: the event encoding, the per-identity replay and the two streams
//! read from it (live identities, counts at retained versions) are one algorithm; its property
//! tests against the in-memory replay are a third of it.)

use crate::replay::ReplayError;
use crate::spill::{read_exact_or_end, Merged, SortedRuns, SpillError, SpillRecord};
use lake_common::{DeltaKind, EntryList, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// A spilled replay failed: the journal is inconsistent, or the spill folder failed.
#[derive(Debug, thiserror::Error)]
pub enum SpilledReplayError {
    /// The journal does not replay (a lineage problem).
    #[error(transparent)]
    Replay(#[from] ReplayError),
    /// The temporary folder could not be written or read (not a lineage problem: retry with
    /// space in `TMPDIR`).
    #[error(transparent)]
    Spill(#[from] SpillError),
}

/// What one event does to an identity's count. Within a version, removals come before
/// additions (the order of [`crate::replay::Replay::apply`]); a snapshot's `Set` is alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Op {
    Remove(u64),
    Add(u64),
    Set(u64),
}

/// One journal entry's effect on one identity.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    identity: ObjectIdentity,
    version: u64,
    op: Op,
}

impl SpillRecord for Event {
    fn memory_bytes(&self) -> usize {
        self.identity.uri.capacity()
    }

    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        self.identity.uri.write_to(out)?;
        out.write_all(&self.identity.sha256)?;
        out.write_all(&self.identity.size.to_le_bytes())?;
        out.write_all(&self.version.to_le_bytes())?;
        let (tag, n) = match self.op {
            Op::Remove(n) => (0u8, n),
            Op::Add(n) => (1, n),
            Op::Set(n) => (2, n),
        };
        out.write_all(&[tag])?;
        out.write_all(&n.to_le_bytes())
    }

    fn read_from(input: &mut impl Read) -> std::io::Result<Option<Self>> {
        let Some(uri) = String::read_from(input)? else {
            return Ok(None);
        };
        let mut fixed = [0u8; 32 + 8 + 8 + 1 + 8];
        if !read_exact_or_end(input, &mut fixed)? {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated spill record"));
        }
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&fixed[i..i + 8]);
            u64::from_le_bytes(b)
        };
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(&fixed[..32]);
        let n = u64_at(49);
        let op = match fixed[48] {
            0 => Op::Remove(n),
            1 => Op::Add(n),
            2 => Op::Set(n),
            t => return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("unknown event tag {t}"))),
        };
        Ok(Some(Event { identity: ObjectIdentity { uri, sha256, size: u64_at(32) }, version: u64_at(40), op }))
    }
}

/// A table's journal entries, spilled as events keyed by identity.
#[derive(Debug)]
pub struct SpilledJournal {
    events: SortedRuns<Event>,
    kinds: BTreeMap<u64, DeltaKind>,
}

impl SpilledJournal {
    /// An empty journal that holds events estimated at up to `budget_bytes` in memory.
    pub fn new(budget_bytes: usize) -> Self {
        Self { events: SortedRuns::new(budget_bytes), kinds: BTreeMap::new() }
    }

    /// Adds one version's entry, in any version order (a snapshot's `removed` list, always
    /// empty in a decoded entry, is ignored, as the in-memory replay ignores it).
    ///
    /// # Errors
    /// [`SpilledReplayError::Replay`] ([`ReplayError::NotContiguous`]) when the version was
    /// added already; [`SpilledReplayError::Spill`] when a run cannot be written.
    pub fn add(&mut self, delta: ObjectReferenceDelta) -> Result<(), SpilledReplayError> {
        let v = delta.version;
        self.begin(v, delta.kind)?;
        // The entry is consumed: its identities move into the events, no copy per reference.
        for e in delta.removed {
            self.push(v, EntryList::Removed, e.identity, e.count)?;
        }
        for e in delta.added {
            self.push(v, EntryList::Added, e.identity, e.count)?;
        }
        Ok(())
    }

    /// Starts version `version`'s entry of `kind`, whose references follow by
    /// [`SpilledJournal::push`] (an entry streamed from a reference log, never held whole).
    ///
    /// # Errors
    /// [`SpilledReplayError::Replay`] ([`ReplayError::NotContiguous`]) when the version was
    /// begun already.
    pub fn begin(&mut self, version: u64, kind: DeltaKind) -> Result<(), SpilledReplayError> {
        if self.kinds.insert(version, kind).is_some() {
            return Err(ReplayError::NotContiguous { expected: "each version once".into(), found: version }.into());
        }
        Ok(())
    }

    /// `count` references to `identity` in list `list` of version `version`'s entry (begun by
    /// [`SpilledJournal::begin`]). References may come in any order and an identity may come
    /// several times: a version's additions (a snapshot's references) and removals are summed
    /// per identity. A snapshot's removals are ignored, as in [`SpilledJournal::add`].
    ///
    /// # Errors
    /// [`ReplayError::NotContiguous`] for a version not begun; [`SpilledReplayError::Spill`].
    pub fn push(
        &mut self,
        version: u64,
        list: EntryList,
        identity: ObjectIdentity,
        count: u64,
    ) -> Result<(), SpilledReplayError> {
        let Some(kind) = self.kinds.get(&version) else {
            return Err(ReplayError::NotContiguous { expected: "an entry begun first".into(), found: version }.into());
        };
        if count == 0 {
            return Ok(());
        }
        let op = match (kind, list) {
            (DeltaKind::Snapshot, EntryList::Removed) => return Ok(()),
            (DeltaKind::Snapshot, EntryList::Added) => Op::Set(count),
            (DeltaKind::Delta, EntryList::Added) => Op::Add(count),
            (DeltaKind::Delta, EntryList::Removed) => Op::Remove(count),
        };
        Ok(self.events.push(Event { identity, version, op })?)
    }

    /// Forgets version `version`'s entry after a defect was found partway through it (a
    /// reference log that failed its checks): the version counts as missing, so any replay
    /// over it fails ([`ReplayError::NotContiguous`]), and events already pushed for it are
    /// never replayed.
    pub fn discard(&mut self, version: u64) {
        self.kinds.remove(&version);
    }

    /// The replay's base for reading version `version` alone: the newest snapshot at or below
    /// it, or version 1 (`None` when neither was added; whether the chain from the base to
    /// `version` is whole is checked when it is replayed).
    pub fn base_for(&self, version: u64) -> Option<u64> {
        let snapshot = self.kinds.range(..=version).rev().find(|(_, k)| **k == DeltaKind::Snapshot).map(|(v, _)| *v);
        snapshot.or_else(|| self.kinds.contains_key(&1).then_some(1))
    }

    /// Sorted runs spilled to disk so far.
    pub fn spilled_runs(&self) -> usize {
        self.events.runs()
    }

    /// The identities live at `retained`, replaying versions `base..=latest` (entries outside
    /// that range are ignored). With `counts_at`, the stream also collects the reference counts
    /// at that version (for a reference checkpoint; those counts are held in memory).
    ///
    /// # Errors
    /// [`ReplayError::NotContiguous`] when a version in `base..=latest` was not added or `base`
    /// is neither a snapshot nor version 1; [`ReplayError::RetainedOutsideRange`] when a
    /// retained version lies outside `base..=latest`; [`SpilledReplayError::Spill`].
    pub fn live(
        self,
        base: u64,
        latest: u64,
        retained: &[u64],
        counts_at: Option<u64>,
    ) -> Result<LiveIdentities, SpilledReplayError> {
        let rules = self.rules(base, latest, retained, counts_at)?;
        Ok(LiveIdentities { merged: self.events.finish()?, rules, counts: counts_at.map(|_| ReferenceCounts::new()) })
    }

    /// The reference counts at every retained version, identity by identity: the same
    /// per-identity replay as [`SpilledJournal::live`], read out at each of `retained` instead of
    /// reduced to liveness. Identities come out ascending; each carries `(version, count)` for
    /// every retained version (ascending) at which its count is positive, and identities positive
    /// at no retained version are skipped. Memory: as [`SpilledJournal::live`], plus one entry per
    /// retained version for the identity being read.
    ///
    /// # Errors
    /// As [`SpilledJournal::live`].
    pub fn retained_counts(
        self,
        base: u64,
        latest: u64,
        retained: &[u64],
    ) -> Result<RetainedCounts, SpilledReplayError> {
        let rules = self.rules(base, latest, retained, None)?;
        Ok(RetainedCounts { merged: self.events.finish()?, rules, events: Vec::new() })
    }

    /// Checks the chain `base..=latest` and the retained versions, and returns the rules every
    /// identity is replayed against.
    fn rules(
        &self,
        base: u64,
        latest: u64,
        retained: &[u64],
        counts_at: Option<u64>,
    ) -> Result<Rules, SpilledReplayError> {
        match self.kinds.get(&base) {
            Some(DeltaKind::Snapshot) => {}
            Some(DeltaKind::Delta) if base == 1 => {}
            _ => {
                return Err(
                    ReplayError::NotContiguous { expected: "a snapshot or version 1".into(), found: base }.into()
                )
            }
        }
        let present = self.kinds.range(base..=latest).count() as u64;
        if latest < base || present != latest - base + 1 {
            let missing = (base..=latest).find(|v| !self.kinds.contains_key(v)).unwrap_or(base);
            return Err(ReplayError::NotContiguous { expected: missing.to_string(), found: missing + 1 }.into());
        }
        let mut retained = retained.to_vec();
        retained.sort_unstable();
        retained.dedup();
        if let Some(v) = retained.iter().find(|v| **v < base || **v > latest) {
            return Err(ReplayError::RetainedOutsideRange { version: *v, base, last: latest }.into());
        }
        let snapshots =
            self.kinds.range(base..=latest).filter(|(_, k)| **k == DeltaKind::Snapshot).map(|(v, _)| *v).collect();
        Ok(Rules { base, latest, retained, snapshots, counts_at })
    }
}

/// What every identity is replayed against.
#[derive(Debug)]
struct Rules {
    base: u64,
    latest: u64,
    retained: Vec<u64>,
    snapshots: Vec<u64>,
    counts_at: Option<u64>,
}

impl Rules {
    /// True when a retained version lies in `[since, until)`.
    fn retained_in(&self, since: u64, until: u64) -> bool {
        let i = self.retained.partition_point(|v| *v < since);
        self.retained.get(i).is_some_and(|v| *v < until)
    }

    /// The first snapshot strictly after `after` and strictly before `before`.
    fn snapshot_between(&self, after: u64, before: u64) -> Option<u64> {
        let i = self.snapshots.partition_point(|s| *s <= after);
        self.snapshots.get(i).copied().filter(|s| *s < before)
    }

    /// Replays one identity's events (ascending by version); returns whether it is live and its
    /// count at `counts_at`.
    fn settle(&self, identity: &ObjectIdentity, events: &[(u64, Op)]) -> Result<(bool, u64), ReplayError> {
        let mut state = Settle { count: 0, since: 0, live: false, at: None };
        self.walk(identity, events, |v, count| self.change(&mut state, v, count))?;
        if state.count > 0 {
            self.close(&mut state, u64::MAX);
        }
        let at = state.at.unwrap_or(state.count);
        Ok((state.live, at))
    }

    /// Replays one identity's events (ascending by version) and appends to `out` its count at
    /// every retained version where that count is positive, as `(version, count)` ascending.
    fn counts_at_retained(
        &self,
        identity: &ObjectIdentity,
        events: &[(u64, Op)],
        out: &mut Vec<(u64, u64)>,
    ) -> Result<(), ReplayError> {
        // The count is `count` from the last change at or before a version until the next
        // change: a retained version before a change takes the count before it.
        let (mut count, mut next) = (0u64, 0usize);
        let retained = &self.retained;
        let mut emit_before = |v: u64, count: u64, out: &mut Vec<(u64, u64)>| {
            while next < retained.len() && retained[next] < v {
                if count > 0 {
                    out.push((retained[next], count));
                }
                next += 1;
            }
        };
        self.walk(identity, events, |v, new| {
            emit_before(v, count, out);
            count = new;
        })?;
        // Every retained version from the last change on has the final count.
        if count > 0 {
            out.extend(retained[next..].iter().map(|r| (*r, count)));
        }
        Ok(())
    }

    /// The replay of one identity's events (ascending by version): calls `change(v, count)` at
    /// every point where version `v` sets its count (in order; several calls may share a
    /// version: a removal, then an addition). Its count changes only at its own events and
    /// drops to zero at every snapshot that does not list it.
    fn walk(
        &self,
        identity: &ObjectIdentity,
        events: &[(u64, Op)],
        mut change: impl FnMut(u64, u64),
    ) -> Result<(), ReplayError> {
        let mut count = 0u64;
        let mut set_count = |v: u64, new: u64, count: &mut u64| {
            change(v, new);
            *count = new;
        };
        let mut last = 0;
        let mut i = 0;
        while i < events.len() {
            let v = events[i].0;
            let mut j = i;
            while j < events.len() && events[j].0 == v {
                j += 1;
            }
            if let Some(s) = self.snapshot_between(last, v).filter(|_| count > 0) {
                set_count(s, 0, &mut count);
            }
            let (mut removed, mut added, mut set) = (0u64, 0u64, None::<u64>);
            for (_, op) in &events[i..j] {
                match op {
                    Op::Remove(n) => removed = removed.saturating_add(*n),
                    Op::Add(n) => added = added.saturating_add(*n),
                    Op::Set(n) => set = Some(set.unwrap_or(0).saturating_add(*n)),
                }
            }
            if self.snapshots.binary_search(&v).is_ok() {
                set_count(v, set.unwrap_or(0), &mut count);
            } else {
                if removed > count {
                    return Err(ReplayError::NegativeCount {
                        version: v,
                        uri: identity.uri.clone(),
                        removed,
                        present: count,
                    });
                }
                let after_removal = count - removed;
                if removed > 0 {
                    set_count(v, after_removal, &mut count);
                }
                if added > 0 {
                    set_count(v, after_removal.saturating_add(added), &mut count);
                }
            }
            last = v;
            i = j;
        }
        if let Some(s) = self.snapshot_between(last, u64::MAX).filter(|_| count > 0) {
            set_count(s, 0, &mut count);
        }
        Ok(())
    }

    /// Sets the count to `count` at version `v`, closing or opening a positive interval.
    fn change(&self, state: &mut Settle, v: u64, count: u64) {
        if state.at.is_none() && self.counts_at.is_some_and(|t| t < v) {
            state.at = Some(state.count);
        }
        match (state.count > 0, count > 0) {
            (true, false) => self.close(state, v),
            (false, true) => state.since = v,
            _ => {}
        }
        state.count = count;
    }

    fn close(&self, state: &mut Settle, until: u64) {
        if self.retained_in(state.since, until) {
            state.live = true;
        }
    }
}

struct Settle {
    count: u64,
    since: u64,
    live: bool,
    /// The count at `counts_at`, once a change after it was seen.
    at: Option<u64>,
}

/// The live identities of a [`SpilledJournal`], ascending, computed as they are read.
#[derive(Debug)]
pub struct LiveIdentities {
    merged: Merged<Event>,
    rules: Rules,
    counts: Option<ReferenceCounts>,
}

impl LiveIdentities {
    /// The next live identity; `None` when the journal is exhausted.
    ///
    /// # Errors
    /// [`ReplayError::NegativeCount`] for an identity the journal removes more often than it
    /// adds; [`SpilledReplayError::Spill`] when a run cannot be read.
    pub fn next_live(&mut self) -> Result<Option<ObjectIdentity>, SpilledReplayError> {
        let mut events: Vec<(u64, Op)> = Vec::new();
        while let Some(identity) = next_identity(&mut self.merged, &self.rules, &mut events)? {
            let (live, count_at) = self.rules.settle(&identity, &events)?;
            if let Some(counts) = self.counts.as_mut().filter(|_| count_at > 0) {
                counts.add(identity.clone(), count_at);
            }
            if live {
                return Ok(Some(identity));
            }
        }
        Ok(None)
    }

    /// The counts at the `counts_at` version given to [`SpilledJournal::live`], once the
    /// stream is exhausted (`None` when none were asked for).
    pub fn counts_at(&self) -> Option<&ReferenceCounts> {
        self.counts.as_ref()
    }
}

/// Reads the next identity's events from `merged` into `events` (ascending by version, only
/// those in the replayed range); `None` when the merge is exhausted.
fn next_identity(
    merged: &mut Merged<Event>,
    rules: &Rules,
    events: &mut Vec<(u64, Op)>,
) -> Result<Option<ObjectIdentity>, SpillError> {
    let Some(first) = merged.next_record()? else {
        return Ok(None);
    };
    let identity = first.identity;
    events.clear();
    if (rules.base..=rules.latest).contains(&first.version) {
        events.push((first.version, first.op));
    }
    while merged.peek().is_some_and(|e| e.identity == identity) {
        if let Some(e) = merged.next_record()? {
            if (rules.base..=rules.latest).contains(&e.version) {
                events.push((e.version, e.op));
            }
        }
    }
    Ok(Some(identity))
}

/// The counts of a [`SpilledJournal`] at its retained versions, identity by identity, ascending
/// ([`SpilledJournal::retained_counts`]).
#[derive(Debug)]
pub struct RetainedCounts {
    merged: Merged<Event>,
    rules: Rules,
    events: Vec<(u64, Op)>,
}

impl RetainedCounts {
    /// The next identity positive at a retained version, and its `(version, count)` at every
    /// retained version where its count is positive (ascending, at least one; `counts` is
    /// cleared first, and holds at most one entry per retained version); `None` when the
    /// journal is exhausted.
    ///
    /// # Errors
    /// [`ReplayError::NegativeCount`] for an identity the journal removes more often than it
    /// adds (the stream may be read on past it); [`SpilledReplayError::Spill`] when a run
    /// cannot be read.
    pub fn next_counts(&mut self, counts: &mut Vec<(u64, u64)>) -> Result<Option<ObjectIdentity>, SpilledReplayError> {
        while let Some(identity) = next_identity(&mut self.merged, &self.rules, &mut self.events)? {
            counts.clear();
            self.rules.counts_at_retained(&identity, &self.events, counts)?;
            if !counts.is_empty() {
                return Ok(Some(identity));
            }
        }
        Ok(None)
    }
}

/// Replays consecutive `deltas` from a snapshot or version 1 in bounded memory and returns the
/// live set for `retained`: the spilled counterpart of [`crate::replay::live_set`].
///
/// # Errors
/// As [`SpilledJournal::live`] and [`LiveIdentities::next_live`].
pub fn spilled_live_set<'a>(
    deltas: impl IntoIterator<Item = &'a ObjectReferenceDelta>,
    retained: &[u64],
    budget_bytes: usize,
) -> Result<Vec<ObjectIdentity>, SpilledReplayError> {
    let mut journal = SpilledJournal::new(budget_bytes);
    let (mut first, mut last) = (None, 0);
    for d in deltas {
        if let Some(prev) = first.map(|_| last).filter(|prev| d.version != prev + 1) {
            return Err(ReplayError::NotContiguous { expected: (prev + 1).to_string(), found: d.version }.into());
        }
        first.get_or_insert(d.version);
        last = d.version;
        journal.add(d.clone())?;
    }
    let Some(base) = first else {
        return match retained.first() {
            Some(v) => Err(ReplayError::RetainedOutsideRange { version: *v, base: 0, last: 0 }.into()),
            None => Ok(Vec::new()),
        };
    };
    let mut live = journal.live(base, last, retained, None)?;
    let mut out = Vec::new();
    while let Some(identity) = live.next_live()? {
        out.push(identity);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::{live_set, Replay};
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    fn id(n: u8) -> ObjectIdentity {
        ObjectIdentity::new(format!("objects/{n}"), [n; 32], u64::from(n))
    }

    /// One version as random choices: (snapshot?, additions, removals, over-remove?).
    type Step = (bool, Vec<(u8, u64)>, Vec<(u8, u64)>, bool);

    /// Builds a journal from random choices, mostly consistent: removals are clamped to the
    /// present count unless the step asks to over-remove (an inconsistent journal).
    fn journal(steps: &[Step]) -> Vec<ObjectReferenceDelta> {
        let mut present = ReferenceCounts::new();
        let mut out = Vec::new();
        for (i, (snapshot, adds, removes, over)) in steps.iter().enumerate() {
            let v = i as u64 + 1;
            let mut added = ReferenceCounts::new();
            for (n, c) in adds {
                added.add(id(*n), *c);
            }
            if *snapshot {
                out.push(ObjectReferenceDelta::snapshot("t", v, &added));
                present = added;
                continue;
            }
            let mut removed = ReferenceCounts::new();
            for (n, c) in removes {
                let have = present.get(&id(*n)).saturating_sub(removed.get(&id(*n)));
                let take = if *over { *c } else { (*c).min(have) };
                if take > 0 {
                    removed.add(id(*n), take);
                }
            }
            let mut next = ReferenceCounts::new();
            for (identity, c) in present.iter() {
                let left = c.saturating_sub(removed.get(identity));
                if left > 0 {
                    next.add(identity.clone(), left);
                }
            }
            next.merge(&added);
            present = next;
            out.push(ObjectReferenceDelta::delta("t", v, &added, &removed));
        }
        out
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let counts = || proptest::collection::vec((0u8..6, 1u64..4), 0..4);
        proptest::collection::vec(
            (proptest::bool::weighted(0.15), counts(), counts(), proptest::bool::weighted(0.04)),
            1..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]

        /// The spilled replay and the in-memory replay agree on every journal: the same live
        /// set, or both refuse. Budgets from 0 (every event its own run) to all in memory.
        #[test]
        fn spilled_and_in_memory_replays_agree(
            steps in steps(),
            start in 0usize..6,
            retained in proptest::collection::vec(0u64..14, 0..4),
            budget in prop_oneof![Just(0usize), 0usize..600, Just(usize::MAX)],
        ) {
            let j = journal(&steps);
            // Start at a snapshot when the chosen index is one (a replay base), else at version 1.
            let from = j.get(start).filter(|d| d.kind == DeltaKind::Snapshot).map(|_| start).unwrap_or(0);
            let memory = live_set(&j[from..], &retained);
            let spilled = spilled_live_set(&j[from..], &retained, budget);
            match (memory, spilled) {
                (Ok(m), Ok(s)) => prop_assert_eq!(m.into_iter().collect::<Vec<_>>(), s),
                (Err(_), Err(_)) => {}
                (m, s) => prop_assert!(false, "in memory {:?}, spilled {:?}", m, s),
            }
        }

        /// The counts collected at a version equal the in-memory replay's counts there.
        #[test]
        fn counts_at_a_version_match_the_in_memory_replay(
            steps in steps(),
            at in 1u64..12,
            budget in prop_oneof![Just(0usize), 0usize..600],
        ) {
            let j = journal(&steps);
            let latest = j.len() as u64;
            let at = at.min(latest);
            let mut replay = Replay::new(&[]);
            let mut consistent = true;
            for d in j.iter().take(at as usize) {
                consistent &= replay.apply(d).is_ok();
            }
            let mut journal = SpilledJournal::new(budget);
            for d in j.iter().rev() {
                journal.add(d.clone()).unwrap();
            }
            let mut live = journal.live(1, latest, &[latest], Some(at)).unwrap();
            let mut failed = false;
            loop {
                match live.next_live() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => { failed = true; break; }
                }
            }
            if consistent && !failed {
                prop_assert_eq!(live.counts_at().cloned().unwrap_or_default(), replay.counts());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(600))]

        /// The counts streamed at every retained version equal the in-memory replay's counts at
        /// those versions, and the stream refuses exactly when the in-memory replay does.
        #[test]
        fn retained_counts_match_the_in_memory_replay(
            steps in steps(),
            retained in proptest::collection::vec(1u64..13, 0..5),
            budget in prop_oneof![Just(0usize), 0usize..600, Just(usize::MAX)],
        ) {
            let j = journal(&steps);
            let latest = j.len() as u64;
            let retained: Vec<u64> = retained.into_iter().filter(|v| *v <= latest).collect();
            let mut replay = Replay::new(&retained);
            let mut want: BTreeMap<ObjectIdentity, Vec<(u64, u64)>> = BTreeMap::new();
            let mut consistent = true;
            for d in &j {
                if replay.apply(d).is_err() {
                    consistent = false;
                    break;
                }
                if retained.contains(&d.version) {
                    for (identity, count) in replay.counts().iter() {
                        want.entry(identity.clone()).or_default().push((d.version, count));
                    }
                }
            }
            let mut journal = SpilledJournal::new(budget);
            for d in j.iter().rev() {
                journal.add(d.clone()).unwrap();
            }
            let mut stream = journal.retained_counts(1, latest, &retained).unwrap();
            let (mut got, mut counts, mut failed) = (BTreeMap::new(), Vec::new(), false);
            loop {
                match stream.next_counts(&mut counts) {
                    Ok(Some(identity)) => {
                        prop_assert!(!counts.is_empty());
                        got.insert(identity, counts.clone());
                    }
                    Ok(None) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            prop_assert_eq!(failed, !consistent);
            if consistent {
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn retained_counts_follow_snapshots_and_removals() {
        let mut two = ReferenceCounts::new();
        two.add(id(1), 2);
        let mut one = ReferenceCounts::new();
        one.add(id(1), 1);
        let mut other = ReferenceCounts::new();
        other.add(id(2), 1);
        let j = [
            ObjectReferenceDelta::delta("t", 1, &two, &ReferenceCounts::new()),
            ObjectReferenceDelta::delta("t", 2, &ReferenceCounts::new(), &one),
            ObjectReferenceDelta::snapshot("t", 3, &other),
            ObjectReferenceDelta::empty("t", 4),
        ];
        let mut journal = SpilledJournal::new(0);
        for d in j {
            journal.add(d).unwrap();
        }
        let mut stream = journal.retained_counts(1, 4, &[1, 2, 4]).unwrap();
        let mut counts = Vec::new();
        assert_eq!(stream.next_counts(&mut counts).unwrap(), Some(id(1)));
        assert_eq!(counts, vec![(1, 2), (2, 1)]);
        assert_eq!(stream.next_counts(&mut counts).unwrap(), Some(id(2)));
        assert_eq!(counts, vec![(4, 1)]);
        assert_eq!(stream.next_counts(&mut counts).unwrap(), None);
    }

    #[test]
    fn a_snapshot_that_omits_an_identity_ends_its_interval() {
        let mut c = ReferenceCounts::new();
        c.add(id(1), 1);
        let mut s = ReferenceCounts::new();
        s.add(id(2), 1);
        let j = [
            ObjectReferenceDelta::delta("t", 1, &c, &ReferenceCounts::new()),
            ObjectReferenceDelta::snapshot("t", 2, &s),
            ObjectReferenceDelta::empty("t", 3),
        ];
        assert_eq!(spilled_live_set(&j, &[3], 0).unwrap(), vec![id(2)]);
        assert_eq!(spilled_live_set(&j, &[1, 3], 0).unwrap(), vec![id(1), id(2)]);
        let want: BTreeSet<_> = [id(1), id(2)].into_iter().collect();
        assert_eq!(live_set(&j, &[1, 3]).unwrap(), want);
    }

    #[test]
    fn gaps_and_unknown_bases_are_refused() {
        let mut journal = SpilledJournal::new(0);
        journal.add(ObjectReferenceDelta::empty("t", 1)).unwrap();
        journal.add(ObjectReferenceDelta::empty("t", 3)).unwrap();
        assert!(matches!(journal.live(1, 3, &[3], None), Err(SpilledReplayError::Replay(_))));
        let mut journal = SpilledJournal::new(0);
        journal.add(ObjectReferenceDelta::empty("t", 2)).unwrap();
        assert!(journal.add(ObjectReferenceDelta::empty("t", 2)).is_err());
        assert!(matches!(journal.live(2, 2, &[2], None), Err(SpilledReplayError::Replay(_))));
    }
}
