//! Journal replay: reference counts per version and the exact live set.
//!
//! The liveness rule (docs/journal-format.md, "Replay and liveness"): an object is live if its reference count is above zero
//! in at least one retained version. Replay walks the journal in version order from a base (a
//! snapshot or version 1) and tracks, for each identity, the interval of versions `[since,
//! until)` in which its count stays positive; the identity is live when a retained version falls
//! in one of its intervals. Cost: O(journal entries x log(retained versions)); memory:
//! O(identities with a positive count at the current version + live identities).

use lake_common::{DeltaKind, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts};
use std::collections::{BTreeMap, BTreeSet};
use thiserror::Error;

/// The journal cannot be replayed.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// Entries are not consecutive versions starting at a snapshot or version 1.
    #[error("journal is not contiguous: expected version {expected}, found {found}")]
    NotContiguous {
        /// The version expected next, as text (a number, or `a snapshot or version 1` for the first).
        expected: String,
        /// The version found.
        found: u64,
    },
    /// A removal takes a count below zero: the journal does not describe the table.
    #[error("version {version} removes {removed} reference(s) to {uri} but only {present} exist")]
    NegativeCount {
        /// The version whose removal fails.
        version: u64,
        /// The identity URI of the object.
        uri: String,
        /// The count the version removes.
        removed: u64,
        /// The count present before it.
        present: u64,
    },
    /// A retained version lies outside the replayed range.
    #[error("retained version {version} is outside the replayed range {base}..={last}")]
    RetainedOutsideRange {
        /// The retained version outside the range.
        version: u64,
        /// The first version replayed (0 when nothing was replayed).
        base: u64,
        /// The last version replayed (0 when nothing was replayed).
        last: u64,
    },
}

impl ReplayError {
    /// The version the error is about.
    pub fn version(&self) -> u64 {
        match self {
            Self::NotContiguous { found, .. } => *found,
            Self::NegativeCount { version, .. } | Self::RetainedOutsideRange { version, .. } => *version,
        }
    }
}

/// An incremental replay of one table's journal.
#[derive(Debug, Clone)]
pub struct Replay {
    retained: Vec<u64>,
    /// Identity -> (count at the current version, version since which it has been positive).
    positive: BTreeMap<ObjectIdentity, (u64, u64)>,
    live: BTreeSet<ObjectIdentity>,
    base: Option<u64>,
    version: Option<u64>,
}

impl Replay {
    /// A replay that marks identities live at `retained` versions (any order).
    pub fn new(retained: &[u64]) -> Self {
        let mut retained = retained.to_vec();
        retained.sort_unstable();
        retained.dedup();
        Self { retained, positive: BTreeMap::new(), live: BTreeSet::new(), base: None, version: None }
    }

    /// The last applied version.
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// True when a retained version lies in `[since, until)`.
    fn retained_in(&self, since: u64, until: u64) -> bool {
        let i = self.retained.partition_point(|v| *v < since);
        self.retained.get(i).is_some_and(|v| *v < until)
    }

    fn close(&mut self, identity: ObjectIdentity, since: u64, until: u64) {
        if self.retained_in(since, until) {
            self.live.insert(identity);
        }
    }

    /// Applies the sidecar of the next version.
    ///
    /// # Errors
    /// [`ReplayError::NotContiguous`] when `delta` is not the next version (the first must be
    /// a snapshot or version 1); [`ReplayError::NegativeCount`] when a removal exceeds the count.
    pub fn apply(&mut self, delta: &ObjectReferenceDelta) -> Result<(), ReplayError> {
        let v = delta.version;
        match self.version {
            None if delta.kind == DeltaKind::Snapshot || v == 1 => self.base = Some(v),
            None => return Err(ReplayError::NotContiguous { expected: "a snapshot or version 1".into(), found: v }),
            Some(prev) if v != prev + 1 => {
                return Err(ReplayError::NotContiguous { expected: (prev + 1).to_string(), found: v })
            }
            Some(_) => {}
        }
        match delta.kind {
            DeltaKind::Snapshot => {
                let mut next: BTreeMap<ObjectIdentity, (u64, u64)> = BTreeMap::new();
                for e in &delta.added {
                    let since = self.positive.get(&e.identity).map(|(_, s)| *s).unwrap_or(v);
                    next.insert(e.identity.clone(), (e.count, since));
                }
                let old = std::mem::take(&mut self.positive);
                for (identity, (_, since)) in old {
                    if !next.contains_key(&identity) {
                        self.close(identity, since, v);
                    }
                }
                self.positive = next;
            }
            DeltaKind::Delta => {
                for e in &delta.removed {
                    let present = self.positive.get(&e.identity).map(|(c, _)| *c).unwrap_or(0);
                    if e.count > present {
                        return Err(ReplayError::NegativeCount {
                            version: v,
                            uri: e.identity.uri.clone(),
                            removed: e.count,
                            present,
                        });
                    }
                    if e.count == present {
                        if let Some((_, since)) = self.positive.remove(&e.identity) {
                            self.close(e.identity.clone(), since, v);
                        }
                    } else if let Some(entry) = self.positive.get_mut(&e.identity) {
                        entry.0 = present - e.count;
                    }
                }
                for e in &delta.added {
                    let entry = self.positive.entry(e.identity.clone()).or_insert((0, v));
                    entry.0 = entry.0.saturating_add(e.count);
                }
            }
        }
        self.version = Some(v);
        Ok(())
    }

    /// The reference counts at the last applied version.
    pub fn counts(&self) -> ReferenceCounts {
        let mut counts = ReferenceCounts::new();
        for (identity, (n, _)) in &self.positive {
            counts.add(identity.clone(), *n);
        }
        counts
    }

    /// Ends the replay and returns the live set: identities with a count above zero in at
    /// least one retained version.
    ///
    /// # Errors
    /// [`ReplayError::RetainedOutsideRange`] when a retained version was not replayed.
    pub fn into_live_set(mut self) -> Result<BTreeSet<ObjectIdentity>, ReplayError> {
        let (base, last) = match (self.base, self.version) {
            (Some(b), Some(l)) => (b, l),
            _ => {
                return match self.retained.first() {
                    Some(v) => Err(ReplayError::RetainedOutsideRange { version: *v, base: 0, last: 0 }),
                    None => Ok(BTreeSet::new()),
                }
            }
        };
        if let Some(v) = self.retained.iter().find(|v| **v < base || **v > last) {
            return Err(ReplayError::RetainedOutsideRange { version: *v, base, last });
        }
        let open = std::mem::take(&mut self.positive);
        for (identity, (_, since)) in open {
            self.close(identity, since, u64::MAX);
        }
        Ok(self.live)
    }
}

/// Replays `deltas` (consecutive versions from a snapshot or version 1) and returns the live set
/// for `retained`.
///
/// # Errors
/// Any [`ReplayError`]; the caller must treat it as incomplete lineage.
pub fn live_set<'a>(
    deltas: impl IntoIterator<Item = &'a ObjectReferenceDelta>,
    retained: &[u64],
) -> Result<BTreeSet<ObjectIdentity>, ReplayError> {
    let mut replay = Replay::new(retained);
    for d in deltas {
        replay.apply(d)?;
    }
    replay.into_live_set()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectIdentity {
        ObjectIdentity::new(format!("objects/{n}"), [n; 32], 1)
    }

    fn counts(ids: &[(u8, u64)]) -> ReferenceCounts {
        let mut c = ReferenceCounts::new();
        for (n, k) in ids {
            c.add(id(*n), *k);
        }
        c
    }

    fn delta(v: u64, add: &[(u8, u64)], remove: &[(u8, u64)]) -> ObjectReferenceDelta {
        ObjectReferenceDelta::delta("t", v, &counts(add), &counts(remove))
    }

    #[test]
    fn counts_keep_shared_objects_alive() {
        // Two rows reference object 1; deleting one of them keeps it live.
        let j = [delta(1, &[(1, 2), (2, 1)], &[]), delta(2, &[], &[(1, 1), (2, 1)])];
        let live = live_set(&j, &[2]).unwrap();
        assert_eq!(live, [id(1)].into_iter().collect());
    }

    #[test]
    fn objects_added_and_removed_between_retained_versions_are_garbage() {
        // Retained: 1 and 4. Object 3 lives only in versions 2..3 (cleaned up).
        let j = [
            delta(1, &[(1, 1)], &[]),
            delta(2, &[(3, 1)], &[]),
            delta(3, &[], &[(3, 1)]),
            delta(4, &[(4, 1)], &[(1, 1)]),
        ];
        let live = live_set(&j, &[1, 4]).unwrap();
        assert_eq!(live, [id(1), id(4)].into_iter().collect());
        // With version 2 retained (a tag), object 3 stays live (and so does object 1, which
        // version 2 still references).
        let live = live_set(&j, &[2, 4]).unwrap();
        assert_eq!(live, [id(1), id(3), id(4)].into_iter().collect());
        // With only version 4 retained, objects 1 and 3 are both garbage.
        assert_eq!(live_set(&j, &[4]).unwrap(), [id(4)].into_iter().collect());
    }

    #[test]
    fn snapshots_replace_the_state() {
        let j = [
            delta(1, &[(1, 1), (2, 1)], &[]),
            ObjectReferenceDelta::snapshot("t", 2, &counts(&[(2, 3), (5, 1)])),
            delta(3, &[], &[(2, 3)]),
        ];
        let mut r = Replay::new(&[3]);
        r.apply(&j[0]).unwrap();
        r.apply(&j[1]).unwrap();
        assert_eq!(r.counts(), counts(&[(2, 3), (5, 1)]));
        r.apply(&j[2]).unwrap();
        assert_eq!(r.into_live_set().unwrap(), [id(5)].into_iter().collect());
        // A snapshot is a valid base; a plain delta is not.
        assert!(live_set(&j[1..], &[2, 3]).is_ok());
        assert!(matches!(live_set(&j[2..], &[3]), Err(ReplayError::NotContiguous { .. })));
    }

    #[test]
    fn inconsistent_journals_are_errors() {
        let j = [delta(1, &[(1, 1)], &[]), delta(2, &[], &[(1, 2)])];
        assert!(matches!(live_set(&j, &[2]), Err(ReplayError::NegativeCount { version: 2, .. })));
        let gap = [delta(1, &[(1, 1)], &[]), delta(3, &[], &[])];
        assert!(matches!(live_set(&gap, &[3]), Err(ReplayError::NotContiguous { found: 3, .. })));
        let short = [delta(1, &[(1, 1)], &[])];
        assert!(matches!(live_set(&short, &[2]), Err(ReplayError::RetainedOutsideRange { version: 2, .. })));
    }
}
