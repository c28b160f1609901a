//! `lake refs verify` in bounded memory on real Lance datasets: with a budget of a few KiB (the
//! journal's counts, the scans' counts and the referenced identities all spill to the temporary
//! folder) the report is the one verification gives in memory, on a lake with several versions,
//! deletes, a shared object, an overwrite, a tag, a forged journal entry, a missing object, an
//! object of the wrong size and a reference column that cannot be read.

use crate::support::{batch, new_lake, reader, schema, TestLake};
use lake_common::{ObjectReferenceDelta, ReferenceCounts};
use lake_lance::refs::{CountMismatch, VerifyReport};
use lake_lance::LanceEngine;
use lake_store::layout::sidecar_key;
use lake_store::writer::ManagedObject;

/// The reports of an in-memory and a spilling verification, checked equal (but for how many
/// runs spilled) and returned (in-memory first).
async fn both(lake: &TestLake) -> (VerifyReport, VerifyReport) {
    let memory = LanceEngine::new(lake.store.clone()).with_memory_budget(1 << 30);
    let spilling = LanceEngine::new(lake.store.clone()).with_memory_budget(3 * 1024);
    let want = memory.verify_refs(&[]).await.unwrap();
    let got = spilling.verify_refs(&[]).await.unwrap();
    assert_eq!(want.spilled_runs, 0, "{want:#?}");
    assert!(got.spilled_runs > 6, "a few KiB must make every side spill: {got:#?}");
    assert_eq!(VerifyReport { spilled_runs: 0, ..got.clone() }, want);
    (want, got)
}

fn rows<'a>(episode: &'a str, objects: &[&'a ManagedObject]) -> Vec<(&'a str, Option<&'a ManagedObject>)> {
    objects.iter().map(|o| (episode, Some(*o))).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spilled_verification_reports_what_verification_in_memory_reports() {
    let lake = new_lake().await;
    let mut o = Vec::new();
    for i in 0..40 {
        o.push(lake.upload(&format!("o{i}.bin"), format!("object number {i}").as_bytes()).await);
    }
    let shared = lake.upload("shared.bin", b"referenced by rows of A, B and C").await;
    let refs = |range: std::ops::Range<usize>| o[range].iter().collect::<Vec<_>>();

    // episodes: v1 A and B share `shared`; v2 C; v3 deletes A; v4 D with a duplicated row;
    // v2 is tagged. sensors: v1, then an overwrite (a snapshot) at v2.
    let mut v1 = rows("A", &refs(0..10));
    v1.extend(rows("A", &[&shared]));
    v1.extend(rows("B", &refs(10..15)));
    v1.extend(rows("B", &[&shared]));
    lake.engine.append("episodes", reader(vec![batch(&v1)])).await.unwrap();
    let mut v2 = rows("C", &refs(15..20));
    v2.extend(rows("C", &[&shared]));
    lake.engine.append("episodes", reader(vec![batch(&v2[..3]), batch(&v2[3..])])).await.unwrap();
    lake.engine.delete("episodes", "episode = 'A'").await.unwrap().unwrap();
    let mut v4 = rows("D", &refs(20..28));
    v4.extend(rows("D", &[&o[20], &o[20], &shared]));
    v4.push(("D", None));
    lake.engine.append("episodes", reader(vec![batch(&v4)])).await.unwrap();
    lake.engine.create_tag("episodes", 2, "keep").await.unwrap();
    lake.engine.append("sensors", reader(vec![batch(&rows("S", &refs(28..36)))])).await.unwrap();
    lake.engine.overwrite("sensors", reader(vec![batch(&rows("S", &refs(30..40)))])).await.unwrap();

    let (clean, _) = both(&lake).await;
    assert!(clean.is_ok(), "{clean:#?}");
    assert_eq!(clean.versions_scanned, 6);
    // episodes: 17 rows at v1, 23 at v2, 12 after the delete, 23 at v4; sensors: 8, then 10.
    let expected_references = 17 + (17 + 6) + (23 - 11) + (23 - 11 + 11) + 8 + 10;
    assert_eq!(clean.references_scanned, expected_references);
    assert_eq!(clean.objects_checked, 41);

    // A forged journal entry: version 3's delete no longer removes `shared` (the scans find 2
    // rows referencing it at version 3 and 3 at version 4; the journal now says one more each).
    let original = lake_lance::sidecar::read(&lake.store, "episodes", 3).await.unwrap().unwrap().unwrap();
    let mut removed = ReferenceCounts::new();
    for entry in original.removed.iter().filter(|e| e.identity != shared.identity()) {
        removed.add(entry.identity.clone(), entry.count);
    }
    assert_eq!(removed.len(), original.removed.len() - 1);
    // (The forger keeps the entry's binding to its Lance version: a consistent forgery.)
    let mut forged = ObjectReferenceDelta::delta("episodes", 3, &ReferenceCounts::new(), &removed);
    forged.binding = original.binding.clone();
    lake.store.put(&sidecar_key("episodes", 3), forged.encode()).await.unwrap();
    // A missing object and an object whose size changed.
    lake.store.delete(&o[21].key).await.unwrap();
    lake.store.put(&o[22].key, b"bytes of another size".to_vec()).await.unwrap();

    let (bad, _) = both(&lake).await;
    assert!(!bad.is_ok());
    assert!(bad.problems.is_empty(), "{:?}", bad.problems);
    let mismatch = |version, journal, scan| CountMismatch {
        table: "episodes".into(),
        version,
        uri: shared.key.clone(),
        journal,
        scan,
    };
    assert_eq!(bad.mismatches, vec![mismatch(3, 3, 2), mismatch(4, 4, 3)]);
    assert_eq!(bad.mismatch_count, 2);
    assert_eq!((bad.missing_object_count, bad.missing_objects.clone()), (1, vec![o[21].key.clone()]));
    assert_eq!(bad.size_mismatch_count, 1);
    assert_eq!(
        bad.size_mismatches,
        vec![format!("{}: expected {} bytes, found {}", o[22].key, o[22].size, "bytes of another size".len())]
    );
    assert_eq!(bad.references_scanned, expected_references);

    // A version written around the engine with a reference the scan cannot read: a missing
    // sidecar and an unreadable column, both named; never skipped, never an error.
    write_around_the_engine(&lake, "objects/../escape.bin").await;
    let (unreadable, _) = both(&lake).await;
    assert!(!unreadable.is_ok());
    assert!(
        unreadable.problems.iter().any(|p| p.contains("table `episodes` version 5 has no reference sidecar")),
        "{:?}",
        unreadable.problems
    );
    assert!(
        unreadable
            .problems
            .iter()
            .any(|p| p.contains("table `episodes` version 5") && p.contains("`file`") && p.contains("cannot be read")),
        "{:?}",
        unreadable.problems
    );
    // Without a complete lineage nothing is compared, but every scan still feeds the object check.
    assert!(unreadable.mismatches.is_empty());
    assert_eq!(unreadable.versions_scanned, 6, "version 5 was not scanned to the end");
    assert_eq!((unreadable.missing_object_count, unreadable.size_mismatch_count), (1, 1));
}

/// Appends one row referencing `uri` with a plain Lance client (no sidecar, no validation).
async fn write_around_the_engine(lake: &TestLake, uri: &str) {
    let mut files = lake_common::DataLocationBuilder::new();
    files.append(uri, [9; 32], 3);
    let episodes: arrow_array::ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from(vec!["plain"]));
    let rows =
        arrow_array::RecordBatch::try_new(schema(), vec![episodes, std::sync::Arc::new(files.finish())]).unwrap();
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    let source = arrow_array::RecordBatchIterator::new(vec![Ok(rows)], schema());
    lance::Dataset::write(source, lake.engine.dataset_uri("episodes").as_str(), Some(params)).await.unwrap();
}
