//! [`ReferenceCounts`]: how many rows reference each identity.

use crate::delta::ReferenceCount;
use crate::identity::ObjectIdentity;
use std::collections::BTreeMap;

/// A map from identity to the number of rows (or list elements) that reference it, kept in
/// canonical order. Memory is O(distinct identities), never O(rows).
///
/// Counts, not sets, are what make the journal exact: two rows may reference one object, so
/// deleting one of them must not make the object look unreferenced (docs/journal-format.md, "Why counts").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferenceCounts {
    counts: BTreeMap<ObjectIdentity, u64>,
}

impl ReferenceCounts {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` references to `identity`. A count that would overflow `u64` saturates, which no
    /// real table reaches (it would need 2^64 rows).
    pub fn add(&mut self, identity: ObjectIdentity, n: u64) {
        if n == 0 {
            return;
        }
        let entry = self.counts.entry(identity).or_insert(0);
        *entry = entry.saturating_add(n);
    }

    /// Adds every count of `other` to this map.
    pub fn merge(&mut self, other: &ReferenceCounts) {
        for (identity, n) in &other.counts {
            self.add(identity.clone(), *n);
        }
    }

    /// The count of `identity` (0 when absent).
    pub fn get(&self, identity: &ObjectIdentity) -> u64 {
        self.counts.get(identity).copied().unwrap_or(0)
    }

    /// Number of distinct identities.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True when no identity is referenced.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Sum of all counts (the number of non-null references).
    pub fn total(&self) -> u64 {
        self.counts.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Entries in canonical order.
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectIdentity, u64)> {
        self.counts.iter().map(|(k, v)| (k, *v))
    }

    /// Consumes the map into canonical [`ReferenceCount`]s without copying identities.
    pub fn into_entries(self) -> Vec<ReferenceCount> {
        self.counts.into_iter().map(|(identity, count)| ReferenceCount { identity, count }).collect()
    }

    /// The entries as canonical [`ReferenceCount`]s (sorted, one per identity, counts >= 1).
    pub fn to_entries(&self) -> Vec<ReferenceCount> {
        self.counts
            .iter()
            .map(|(identity, count)| ReferenceCount { identity: identity.clone(), count: *count })
            .collect()
    }
}

impl FromIterator<ObjectIdentity> for ReferenceCounts {
    fn from_iter<T: IntoIterator<Item = ObjectIdentity>>(iter: T) -> Self {
        let mut counts = ReferenceCounts::new();
        for identity in iter {
            counts.add(identity, 1);
        }
        counts
    }
}
