//! The reference log (format-2 sidecar payload): round trip, parts, fail-closed decoding.

use lake_common::{decode_reference_log, DecodeError, ObjectIdentity, ReferenceCounts, ReferenceLogEncoder};
use proptest::prelude::*;

const WRITE: &str = "01JD000000000000000000000W";

fn identity(i: u8) -> ObjectIdentity {
    ObjectIdentity::new(format!("objects/{WRITE}/f{i}"), [i; 32], u64::from(i))
}

/// Encodes `ids` with a batch every `batch` rows, draining the buffer as multipart parts would.
fn encode(ids: &[ObjectIdentity], batch: usize) -> Vec<u8> {
    let mut enc = ReferenceLogEncoder::new("t", WRITE).unwrap().with_buffer_capacity(64);
    let mut out = Vec::new();
    for id in ids {
        enc.push(id);
        if enc.pending() >= batch {
            enc.flush_batch().unwrap();
            out.extend(enc.take_bytes());
        }
    }
    let (rest, totals) = enc.finish().unwrap();
    out.extend(rest);
    assert_eq!(totals.references, ids.len() as u64);
    assert_eq!(totals.bytes, out.len() as u64);
    out
}

proptest! {
    #[test]
    fn a_log_decodes_to_the_counts_of_its_rows(picks in proptest::collection::vec(0u8..20, 0..200), batch in 1usize..50) {
        let ids: Vec<ObjectIdentity> = picks.iter().map(|i| identity(*i)).collect();
        let bytes = encode(&ids, batch);
        let (counts, references) = decode_reference_log(&bytes, "t", WRITE).unwrap();
        prop_assert_eq!(references, ids.len() as u64);
        prop_assert_eq!(counts, ids.into_iter().collect::<ReferenceCounts>());
    }
}

#[test]
fn a_damaged_or_foreign_log_is_refused() {
    let bytes = encode(&[identity(1), identity(2), identity(1)], 2);
    for cut in [0, 1, 8, bytes.len() / 2, bytes.len() - 1] {
        assert!(
            matches!(decode_reference_log(&bytes[..cut], "t", WRITE), Err(DecodeError::CorruptLog(_))),
            "a log cut at {cut} must be refused"
        );
    }
    assert!(matches!(
        decode_reference_log(&bytes, "other", WRITE),
        Err(DecodeError::LogMismatch { field: "lake.table", .. })
    ));
    assert!(matches!(
        decode_reference_log(&bytes, "t", "01JD000000000000000000000X"),
        Err(DecodeError::LogMismatch { field: "lake.write_id", .. })
    ));
    assert!(matches!(decode_reference_log(b"{\"json\":1}", "t", WRITE), Err(DecodeError::CorruptLog(_))));
}

#[test]
fn heads_and_inline_sidecars_decode_and_other_formats_are_refused() {
    use lake_common::{DeltaKind, LogHead, LogRef, SidecarDocument};
    let log = encode(&[identity(1), identity(2)], 1);
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&log));
    let head = LogHead::new(
        "t",
        3,
        DeltaKind::Delta,
        LogRef { write_id: WRITE.into(), references: 2, bytes: log.len() as u64, sha256: sha256.clone() },
    );
    head.check_log(&log).unwrap();
    // One byte of a key changed: same length, still a valid IPC stream, refused by its digest.
    let mut edited = log.clone();
    let at = edited.windows(2).position(|w| w == b"f1").unwrap();
    edited[at + 1] = b'9';
    assert!(decode_reference_log(&edited, "t", WRITE).is_ok(), "the edit keeps a valid log");
    assert!(matches!(head.check_log(&edited), Err(DecodeError::LogDigestMismatch { .. })));
    assert!(matches!(head.check_log(&log[1..]), Err(DecodeError::LogSize { .. })));
    assert_eq!(SidecarDocument::decode(&head.encode(), "t", 3).unwrap(), SidecarDocument::Log(head.clone()));
    assert!(matches!(SidecarDocument::decode(&head.encode(), "t", 4), Err(DecodeError::VersionMismatch { .. })));
    assert!(matches!(SidecarDocument::decode(&head.encode(), "u", 3), Err(DecodeError::TableMismatch { .. })));
    let text = String::from_utf8(head.encode()).unwrap();
    let bad_id = text.replace(WRITE, "../../../../etc/passwd");
    assert!(matches!(SidecarDocument::decode(bad_id.as_bytes(), "t", 3), Err(DecodeError::CorruptJson(_))));
    let future = text.replace("\"format_version\":3", "\"format_version\":5");
    assert_eq!(
        SidecarDocument::decode(future.as_bytes(), "t", 3),
        Err(DecodeError::UnknownFormatVersion { found: 5, supported: 4 })
    );
    // Format 3 (an earlier build's head) has no binding; 4 requires one, sealed.
    let unbound = text.replace("\"format_version\":3", "\"format_version\":4");
    assert!(matches!(SidecarDocument::decode(unbound.as_bytes(), "t", 3), Err(DecodeError::CorruptJson(_))));
    let binding = lake_common::VersionBinding::new(
        Some("0a1b2c3d-0000-4000-8000-00000000abcd".into()),
        &lake_common::ManifestIdentity { size: 99, e_tag: None },
    );
    let bound = head.clone().bound(binding.clone());
    let bound_text = String::from_utf8(bound.encode()).unwrap();
    assert!(bound_text.starts_with("{\"format_version\":4,"), "{bound_text}");
    assert!(bound_text.contains("\"kind\":\"delta\",\"lance\":{"), "{bound_text}");
    match SidecarDocument::decode(bound_text.as_bytes(), "t", 3).unwrap() {
        SidecarDocument::Log(decoded) => assert_eq!(decoded.lance, Some(binding)),
        other => panic!("{other:?}"),
    }
    let rebound = bound_text.replace("\"manifest_size\":99", "\"manifest_size\":98");
    assert!(matches!(SidecarDocument::decode(rebound.as_bytes(), "t", 3), Err(DecodeError::SealMismatch { .. })));
    let downgraded = bound_text.replace("\"format_version\":4", "\"format_version\":3");
    assert!(matches!(SidecarDocument::decode(downgraded.as_bytes(), "t", 3), Err(DecodeError::CorruptJson(_))));
    let legacy = text.replace("\"format_version\":3", "\"format_version\":2");
    assert_eq!(SidecarDocument::decode(legacy.as_bytes(), "t", 3), Err(DecodeError::Unsealed { found: 2 }));
    // The head's own fields are sealed too: another row count or digest is an edit.
    let recount = text.replace("\"references\":2", "\"references\":3");
    assert!(matches!(SidecarDocument::decode(recount.as_bytes(), "t", 3), Err(DecodeError::SealMismatch { .. })));
    let redigest = text.replace(&sha256, &"0".repeat(64));
    assert!(matches!(SidecarDocument::decode(redigest.as_bytes(), "t", 3), Err(DecodeError::SealMismatch { .. })));
    let extra = text.replace("\"kind\"", "\"surprise\":1,\"kind\"");
    assert!(matches!(SidecarDocument::decode(extra.as_bytes(), "t", 3), Err(DecodeError::CorruptJson(_))));
    let inline = lake_common::ObjectReferenceDelta::empty("t", 3);
    assert_eq!(SidecarDocument::decode(&inline.encode(), "t", 3).unwrap(), SidecarDocument::Inline(inline));
}
