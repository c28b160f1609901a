//! Property and fail-closed tests of the reference journal encoding.

use lake_common::{
    DecodeError, DeltaKind, ManifestIdentity, ObjectIdentity, ObjectReferenceDelta, ReferenceCounts, VersionBinding,
};
use proptest::prelude::*;

fn identity() -> impl Strategy<Value = ObjectIdentity> {
    ("objects/[A-Z0-9]{2}/[a-z]{1,3}", 0u8..3, 0u64..3)
        .prop_map(|(uri, sha, size)| ObjectIdentity::new(uri, [sha; 32], size))
}

fn binding() -> impl Strategy<Value = Option<VersionBinding>> {
    proptest::option::of((
        proptest::option::of("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"),
        0u64..1_000_000,
        proptest::option::of("\"?[0-9a-f-]{1,40}\"?"),
    ))
    .prop_map(|b| {
        b.map(|(transaction, size, e_tag)| VersionBinding::new(transaction, &ManifestIdentity { size, e_tag }))
    })
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
        bound in binding(),
    ) {
        let mut a = ObjectReferenceDelta::delta("t", 7, &counts_from(&added), &counts_from(&removed));
        a.binding = bound.clone();
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
        let mut b = ObjectReferenceDelta::delta("t", 7, &counts_from(&added2), &counts_from(&removed2));
        b.binding = bound;
        prop_assert_eq!(a.encode(), b.encode());
    }

    /// decode(encode(x)) == x for deltas and snapshots.
    #[test]
    fn decode_inverts_encode(
        added in proptest::collection::vec((identity(), 1u64..4), 0..20),
        removed in proptest::collection::vec((identity(), 1u64..4), 0..20),
        version in 1u64..1000,
        snapshot in any::<bool>(),
        bound in binding(),
    ) {
        let mut d = if snapshot {
            ObjectReferenceDelta::snapshot("t", version, &counts_from(&added))
        } else {
            ObjectReferenceDelta::delta("t", version, &counts_from(&added), &counts_from(&removed))
        };
        d.binding = bound;
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
    ObjectReferenceDelta::delta("t", 5, &added, &removed).bound(sample_binding())
}

fn sample_binding() -> VersionBinding {
    VersionBinding::new(
        Some("0a1b2c3d-0000-4000-8000-00000000abcd".into()),
        &ManifestIdentity { size: 1234, e_tag: Some("\"5f3e\"".into()) },
    )
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
        v["format_version"] = 5.into();
    });
    assert_eq!(
        ObjectReferenceDelta::decode(&b, "t", 5),
        Err(DecodeError::UnknownFormatVersion { found: 5, supported: 4 })
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

/// Format 4 binds an entry to its Lance version: the binding is required, sealed, and
/// validated; format 3 (earlier builds) decodes as an entry with no binding, and an entry with
/// no binding encodes as format 3, so each entry has one encoding.
#[test]
fn the_binding_is_required_sealed_and_format_3_is_unbound() {
    let bytes = sample().encode();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with("{\"format_version\":4,"), "{text}");
    assert!(text.contains(",\"kind\":\"delta\",\"lance\":{\"transaction\":\"0a1b2c3d-0000-4000-8000-00000000abcd\",\"manifest_size\":1234,\"manifest_e_tag\":\"\\\"5f3e\\\"\"},\"added\""), "{text}");
    assert_eq!(ObjectReferenceDelta::decode(&bytes, "t", 5).unwrap().binding, Some(sample_binding()));
    // Another transaction, manifest size or e-tag: an edit.
    for (from, to) in
        [("00000000abcd", "00000000abce"), ("\"manifest_size\":1234", "\"manifest_size\":1235"), ("5f3e", "5f3f")]
    {
        let edited = text.replacen(from, to, 1);
        assert_ne!(edited, text, "{from}");
        assert!(
            matches!(ObjectReferenceDelta::decode(edited.as_bytes(), "t", 5), Err(DecodeError::SealMismatch { .. })),
            "{from} -> {to}"
        );
    }
    // Format 4 without its binding, or with `null`, is refused; so is format 3 with one.
    for lance in [None, Some(serde_json::Value::Null)] {
        let b = mutate(|v| match &lance {
            None => {
                v.as_object_mut().unwrap().remove("lance");
            }
            Some(l) => v["lance"] = l.clone(),
        });
        assert!(matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::CorruptJson(_))), "{lance:?}");
    }
    let b = mutate(|v| v["format_version"] = 3.into());
    assert!(matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::CorruptJson(_))));
    // Tokens that are not printable ASCII, or empty, or unknown binding fields.
    for (field, value) in [("transaction", ""), ("transaction", "a b"), ("manifest_e_tag", "x\u{7}")] {
        let b = mutate(|v| v["lance"][field] = value.into());
        assert!(matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::CorruptJson(_))), "{field}");
    }
    let b = mutate(|v| v["lance"]["digest"] = "x".into());
    assert!(matches!(ObjectReferenceDelta::decode(&b, "t", 5), Err(DecodeError::CorruptJson(_))));
    // An entry of an earlier build: format 3, sealed, no binding.
    let mut unbound = sample();
    unbound.binding = None;
    let old = unbound.encode();
    assert!(String::from_utf8(old.clone()).unwrap().starts_with("{\"format_version\":3,"));
    assert!(!String::from_utf8(old.clone()).unwrap().contains("lance"));
    assert_eq!(ObjectReferenceDelta::decode(&old, "t", 5).unwrap(), unbound);
    // A format-3 document as an earlier build wrote it, byte for byte, still decodes.
    let earlier = br#"{"format_version":3,"table":"t","version":2,"parent":1,"kind":"delta","added":[],"removed":[],"sha256":"SEAL"}"#;
    let body = br#"{"format_version":3,"table":"t","version":2,"parent":1,"kind":"delta","added":[],"removed":[]}"#;
    let seal = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
    let earlier = String::from_utf8(earlier.to_vec()).unwrap().replace("SEAL", &seal);
    assert_eq!(ObjectReferenceDelta::decode(earlier.as_bytes(), "t", 2).unwrap(), ObjectReferenceDelta::empty("t", 2));
}
