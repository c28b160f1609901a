//! The reference log (format-2 sidecar payload): round trip, parts, fail-closed decoding.

use lake_common::{
    decode_reference_log, DecodeError, LogDecoder, LogTotals, ObjectIdentity, ReferenceCounts, ReferenceLogEncoder,
    SortedLogEncoder,
};
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

/// The totals of `bytes` read as a log (whatever its validity), as a streaming reader sees them.
fn read_totals(bytes: &[u8], sorted: bool) -> LogTotals {
    let mut decoder = LogDecoder::new("t", WRITE, sorted);
    let _ = decoder.feed(arrow_buffer::Buffer::from(bytes), &mut |_, _| Ok(()));
    decoder.totals()
}

/// Reads `bytes` as a log in chunks of `chunk` bytes; the counts and the totals.
fn stream(bytes: &[u8], sorted: bool, chunk: usize) -> Result<(ReferenceCounts, LogTotals), DecodeError> {
    let mut decoder = LogDecoder::new("t", WRITE, sorted);
    let mut counts = ReferenceCounts::new();
    for part in bytes.chunks(chunk.max(1)) {
        decoder.feed(arrow_buffer::Buffer::from(part), &mut |identity, n| {
            counts.add(identity, n);
            Ok(())
        })?;
    }
    Ok((counts, decoder.finish()?))
}

/// A sorted log of `counts`, drained every `every` identities.
fn encode_sorted(counts: &ReferenceCounts, every: usize) -> (Vec<u8>, LogTotals) {
    let mut enc = SortedLogEncoder::new("t", WRITE).unwrap();
    let mut out = Vec::new();
    for (i, (identity, n)) in counts.iter().enumerate() {
        enc.push(identity, n).unwrap();
        if i % every.max(1) == 0 {
            out.extend(enc.take_bytes());
        }
    }
    let (rest, totals) = enc.finish().unwrap();
    out.extend(rest);
    (out, totals)
}

proptest! {
    #[test]
    fn a_log_streamed_in_any_chunks_reads_as_a_whole(picks in proptest::collection::vec(0u8..20, 0..200), batch in 1usize..50, chunk in 1usize..400) {
        let ids: Vec<ObjectIdentity> = picks.iter().map(|i| identity(*i)).collect();
        let bytes = encode(&ids, batch);
        let (counts, totals) = stream(&bytes, false, chunk).unwrap();
        prop_assert_eq!(totals.references, ids.len() as u64);
        prop_assert_eq!(totals.bytes, bytes.len() as u64);
        prop_assert_eq!(counts, ids.into_iter().collect::<ReferenceCounts>());
    }

    #[test]
    fn a_sorted_log_round_trips_its_counts(picks in proptest::collection::vec(0u8..60, 0..200), every in 1usize..20, chunk in 1usize..400) {
        let counts: ReferenceCounts = picks.iter().map(|i| identity(*i)).collect();
        let (bytes, totals) = encode_sorted(&counts, every);
        prop_assert_eq!(totals.references, counts.len() as u64);
        let (read, read_totals) = stream(&bytes, true, chunk).unwrap();
        prop_assert_eq!(read, counts);
        prop_assert_eq!((read_totals.references, read_totals.bytes, read_totals.sha256), (totals.references, totals.bytes, totals.sha256));
    }
}

#[test]
fn a_sorted_log_is_written_only_ascending_and_read_only_as_its_shape() {
    let mut enc = SortedLogEncoder::new("t", WRITE).unwrap();
    enc.push(&identity(2), 3).unwrap();
    assert!(enc.push(&identity(2), 1).is_err(), "a repeated identity is refused");
    assert!(enc.push(&identity(1), 1).is_err(), "a smaller identity is refused");
    enc.push(&identity(3), 0).unwrap();
    assert_eq!(enc.identities(), 1, "a zero count is skipped");
    let counts: ReferenceCounts = [identity(1), identity(2), identity(2)].into_iter().collect();
    let (sorted, _) = encode_sorted(&counts, 1);
    // Each shape is read only as what its head says it is.
    assert!(matches!(stream(&sorted, false, 64), Err(DecodeError::CorruptLog(_))));
    let rows = encode(&[identity(1)], 1);
    assert!(matches!(stream(&rows, true, 64), Err(DecodeError::CorruptLog(_))));
    // A truncated sorted log, and bytes after the end-of-stream marker, are refused.
    assert!(matches!(stream(&sorted[..sorted.len() - 1], true, 64), Err(DecodeError::CorruptLog(_))));
    let mut extra = sorted.clone();
    extra.extend_from_slice(&sorted);
    assert!(stream(&extra, true, 64).is_err());
}

#[test]
fn an_unsorted_or_zero_count_sorted_log_is_refused() {
    // A row log's batches relabelled as a sorted log's cannot be produced by the encoder, so
    // write the defects with Arrow directly: rows out of order, and a zero count.
    use arrow_array::{ArrayRef, FixedSizeBinaryArray, RecordBatch, StringArray, UInt64Array};
    use std::sync::Arc;
    let write = |uris: &[&str], counts: &[u64]| {
        let schema = {
            let mut enc = SortedLogEncoder::new("t", WRITE).unwrap();
            let _ = enc.take_bytes();
            // The schema of a sorted log, as the encoder writes it.
            let (bytes, _) = encode_sorted(&[identity(1)].into_iter().collect(), 1);
            arrow_ipc::reader::StreamReader::try_new(bytes.as_slice(), None).unwrap().schema()
        };
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(uris.to_vec())),
            Arc::new(FixedSizeBinaryArray::try_from_iter(uris.iter().map(|_| [0u8; 32])).unwrap()),
            Arc::new(UInt64Array::from(vec![1u64; uris.len()])),
            Arc::new(UInt64Array::from(counts.to_vec())),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(Vec::new(), &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        w.into_inner().unwrap()
    };
    assert!(stream(&write(&["a", "b"], &[1, 2]), true, 7).is_ok());
    assert!(matches!(stream(&write(&["b", "a"], &[1, 1]), true, 7), Err(DecodeError::CorruptLog(_))));
    assert!(matches!(stream(&write(&["a", "a"], &[1, 1]), true, 7), Err(DecodeError::CorruptLog(_))));
    assert!(matches!(stream(&write(&["a", "b"], &[1, 0]), true, 7), Err(DecodeError::CorruptLog(_))));
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
        LogRef {
            write_id: WRITE.into(),
            references: 2,
            bytes: log.len() as u64,
            sha256: sha256.clone(),
            sorted: false,
            index: None,
        },
    );
    head.log.check(&read_totals(&log, false)).unwrap();
    // One byte of a key changed: same length, still a valid IPC stream, refused by its digest.
    let mut edited = log.clone();
    let at = edited.windows(2).position(|w| w == b"f1").unwrap();
    edited[at + 1] = b'9';
    assert!(decode_reference_log(&edited, "t", WRITE).is_ok(), "the edit keeps a valid log");
    assert!(matches!(head.log.check(&read_totals(&edited, false)), Err(DecodeError::LogDigestMismatch { .. })));
    assert!(matches!(head.log.check(&read_totals(&log[1..], false)), Err(DecodeError::LogSize { .. })));
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

#[test]
fn the_index_describes_the_log_block_by_block_and_a_head_with_another_is_refused() {
    use lake_common::{DeltaKind, LogHead, LogRef, SidecarDocument};
    let counts: ReferenceCounts = (0..=255u8)
        .cycle()
        .take(20_000)
        .enumerate()
        .map(|(i, b)| ObjectIdentity::new(format!("objects/{WRITE}/f{i:06}"), [b; 32], i as u64))
        .collect();
    let (bytes, totals) = encode_sorted(&counts, 500);
    let index = totals.index.clone().unwrap();
    assert!(index.blocks.len() >= 3, "{index:?}");
    let mut offset = 0usize;
    for block in &index.blocks {
        let slice = &bytes[offset..offset + block.bytes as usize];
        assert_eq!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(slice)), block.sha256);
        offset += block.bytes as usize;
    }
    assert_eq!(offset, bytes.len());
    assert_eq!(index.blocks.iter().map(|b| b.rows).sum::<u64>(), totals.references);
    assert!(index.blocks.windows(2).all(|w| w[0].rows == 0 || w[1].rows == 0 || w[0].last < w[1].first));
    let head = LogHead::new("t", 3, DeltaKind::Snapshot, LogRef::of(WRITE, &totals, true));
    assert_eq!(SidecarDocument::decode(&head.encode(), "t", 3).unwrap(), SidecarDocument::Log(head.clone()));
    // An index that does not add up to its log is refused (sealed anew: not a seal mismatch).
    let mut other = head.clone();
    if let Some(index) = other.log.index.as_mut() {
        index.blocks[0].rows += 1;
    }
    assert!(matches!(SidecarDocument::decode(&other.encode(), "t", 3), Err(DecodeError::CorruptJson(_))));
}
