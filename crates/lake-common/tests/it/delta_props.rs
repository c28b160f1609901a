//! Property and fail-closed tests of the reference journal encoding.

use lake_common::{DecodeError, DeltaKind, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts};
use proptest::prelude::*;

fn identity() -> impl Strategy<Value = ObjectIdentity> {
    ("objects/[A-Z0-9]{2}/[a-z]{1,3}", 0u8..3, 0u64..3)
        .prop_map(|(uri, sha, size)| ObjectIdentity::new(uri, [sha; 32], size))
}

fn counts_from(entries: &[(ObjectIdentity, u64)]) -> ReferenceCounts {
    let mut c = ReferenceCounts::new();
    for (id, n) in entries {
        c.add(id.clone(), *n);
    }
    c
}

proptest! {
    /// Any permutation or duplication of the same entries encodes to the same bytes.
    #[test]
    fn permutation_and_duplication_encode_identically(
        added in proptest::collection::vec((identity(), 1u64..4), 0..20),
        removed in proptest::collection::vec((identity(), 1u64..4), 0..20),
        seed in any::<u64>(),
    ) {
        let a = ObjectReferenceDelta::delta("t", 7, &counts_from(&added), &counts_from(&removed));
        // Same multiset of entries, shuffled, with each entry split in unit duplicates.
        let mut added2: Vec<(ObjectIdentity, u64)> = added.iter().flat_map(|(i, n)| std::iter::repeat_n((i.clone(), 1), *n as usize)).collect();
        let mut removed2: Vec<(ObjectIdentity, u64)> = removed.iter().flat_map(|(i, n)| std::iter::repeat_n((i.clone(), 1), *n as usize)).collect();
        let mut s = seed;
        for v in [&mut added2, &mut removed2] {
            for i in (1..v.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                v.swap(i, (s >> 33) as usize % (i + 1));
            }
        }
        let b = ObjectReferenceDelta::delta("t", 7, &counts_from(&added2), &counts_from(&removed2));
        prop_assert_eq!(a.encode(), b.encode());
    }

    /// decode(encode(x)) == x for deltas and snapshots.
    #[test]
    fn decode_inverts_encode(
        added in proptest::collection::vec((identity(), 1u64..4), 0..20),
        removed in proptest::collection::vec((identity(), 1u64..4), 0..20),
        version in 1u64..1000,
        snapshot in any::<bool>(),
    ) {
        let d = if snapshot {
            ObjectReferenceDelta::snapshot("t", version, &counts_from(&added))
        } else {
            ObjectReferenceDelta::delta("t", version, &counts_from(&added), &counts_from(&removed))
        };
        let back = ObjectReferenceDelta::decode(&d.encode(), "t", version).unwrap();
        prop_assert_eq!(back, d);
    }
}

fn sample() -> ObjectReferenceDelta {
    let added = counts_from(&[
        (ObjectIdentity::new("objects/A/a", [1; 32], 1), 2),
        (ObjectIdentity::new("objects/B/b", [2; 32], 2), 1),
    ]);
    let removed = counts_from(&[(ObjectIdentity::new("objects/C/c", [3; 32], 3), 1)]);
    ObjectReferenceDelta::delta("t", 5, &added, &removed)
}

fn mutate(f: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn netting_makes_added_and_removed_disjoint() {
    let id = ObjectIdentity::new("objects/A/a", [1; 32], 1);
    let d = ObjectReferenceDelta::delta("t", 2, &counts_from(&[(id.clone(), 3)]), &counts_from(&[(id.clone(), 1)]));
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.added[0].count, 2);
    assert!(d.removed.is_empty());
    assert_eq!(d.parent, Some(1));
    assert_eq!(ObjectReferenceDelta::empty("t", 1).parent, None);
    assert_eq!(ObjectReferenceDelta::snapshot("t", 3, &ReferenceCounts::new()).kind, DeltaKind::Snapshot);
}

#[test]
fn truncated_or_corrupt_json_is_refused() {
    let bytes = sample().encode();
    for cut in [0, 1, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(ObjectReferenceDelta::decode(&bytes[..cut], "t", 5), Err(DecodeError::CorruptJson(_))),
            "cut {cut}"
        );
    }
    assert!(matches!(ObjectReferenceDelta::decode(b"not json", "t", 5), Err(DecodeError::CorruptJson(_))));
    let extra = mutate(|v| {
        v["extra"] = 1.into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&extra, "t", 5), Err(DecodeError::CorruptJson(_))));
    let bad_sha = mutate(|v| {
        v["added"][0]["sha256"] = "zz".into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&bad_sha, "t", 5), Err(DecodeError::CorruptJson(_))));
    let upper_sha = mutate(|v| {
        v["added"][0]["sha256"] = "AB".repeat(32).into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&upper_sha, "t", 5), Err(DecodeError::CorruptJson(_))));
}

#[test]
fn unknown_format_version_is_refused() {
    for legacy in [1u64, 2] {
        let b = mutate(|v| {
            v["format_version"] = legacy.into();
        });
        assert_eq!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::Unsealed { found: legacy }));
    }
    let b = mutate(|v| {
        v["format_version"] = 4.into();
    });
    assert_eq!(
        ObjectReferenceDelta::decode(&b, "t", 5),
        Err(DecodeError::UnknownFormatVersion { found: 4, supported: 3 })
    );
    let b = mutate(|v| {
        v.as_object_mut().unwrap().remove("format_version");
    });
    assert!(matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::CorruptJson(_))));
}

#[test]
fn unsorted_duplicated_zero_and_overlapping_entries_are_refused() {
    let reordered = mutate(|v| {
        v["added"].as_array_mut().unwrap().reverse();
    });
    assert!(matches!(
        ObjectReferenceDelta::decode(&reordered, "t", 5),
        Err(DecodeError::NotCanonical { list: "added", .. })
    ));
    let duplicated = mutate(|v| {
        let first = v["added"][0].clone();
        v["added"].as_array_mut().unwrap().insert(0, first);
    });
    assert!(matches!(ObjectReferenceDelta::decode(&duplicated, "t", 5), Err(DecodeError::NotCanonical { .. })));
    let zero = mutate(|v| {
        v["removed"][0]["count"] = 0.into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&zero, "t", 5), Err(DecodeError::ZeroCount { list: "removed", .. })));
    let negative = mutate(|v| {
        v["removed"][0]["count"] = (-1).into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&negative, "t", 5), Err(DecodeError::CorruptJson(_))));
    let overlap = mutate(|v| {
        v["removed"] = serde_json::Value::Array(vec![v["added"][0].clone()]);
    });
    assert!(matches!(ObjectReferenceDelta::decode(&overlap, "t", 5), Err(DecodeError::AddedAndRemoved { .. })));
}

#[test]
fn version_parent_table_and_kind_rules_are_enforced() {
    assert_eq!(
        ObjectReferenceDelta::decode(&sample().encode(), "t", 6),
        Err(DecodeError::VersionMismatch { expected: 6, found: 5 })
    );
    assert!(matches!(
        ObjectReferenceDelta::decode(&sample().encode(), "other", 5),
        Err(DecodeError::TableMismatch { .. })
    ));
    for parent in [serde_json::Value::from(5), 6.into(), 3.into(), serde_json::Value::Null] {
        let b = mutate(|v| {
            v["parent"] = parent.clone();
        });
        assert!(
            matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::BadParent { .. })),
            "parent {parent}"
        );
    }
    let zero = mutate(|v| {
        v["version"] = 0.into();
        v["parent"] = serde_json::Value::Null;
    });
    assert_eq!(ObjectReferenceDelta::decode(&zero, "t", 0), Err(DecodeError::ZeroVersion));
    let snap_removed = mutate(|v| {
        v["kind"] = "snapshot".into();
    });
    assert_eq!(
        ObjectReferenceDelta::decode(&snap_removed, "t", 5),
        Err(DecodeError::SnapshotWithRemovals { version: 5 })
    );
    let unknown_kind = mutate(|v| {
        v["kind"] = "rebase".into();
    });
    assert!(matches!(ObjectReferenceDelta::decode(&unknown_kind, "t", 5), Err(DecodeError::CorruptJson(_))));
}

/// One byte of a key changed (same length, still valid JSON, still in canonical order): the
/// seal no longer matches. So does a changed count, size or digest, and a missing seal.
#[test]
fn an_edited_entry_breaks_the_seal() {
    let text = String::from_utf8(sample().encode()).unwrap();
    for (from, to) in [("objects/A/a", "objects/A/b"), ("\"count\":2", "\"count\":3"), ("\"size\":2", "\"size\":7")] {
        let edited = text.replacen(from, to, 1);
        assert_ne!(edited, text, "{from}");
        assert!(
            matches!(ObjectReferenceDelta::decode(edited.as_bytes(), "t", 5), Err(DecodeError::SealMismatch { .. })),
            "{from} -> {to}"
        );
    }
    let unsealed = mutate(|v| {
        v.as_object_mut().unwrap().remove("sha256");
    });
    assert!(matches!(ObjectReferenceDelta::decode(&unsealed, "t", 5), Err(DecodeError::CorruptJson(_))));
    // Whitespace and key order are not content: the seal covers what the document says.
    let reordered = mutate(|_| {});
    assert_eq!(ObjectReferenceDelta::decode(&reordered, "t", 5).unwrap(), sample());
}
