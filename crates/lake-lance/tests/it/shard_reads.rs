//! A plan of one key range (a shard) reads only its part of a large journal entry: the blocks of
//! an indexed reference log whose keys may fall in the range (ranged reads, each block checked
//! by its own digest), and every block holding a reference no range can judge alone (inside the
//! root, no managed key). On a real Lance table journaled by repair (a sorted log of several
//! blocks), each range's live set is exactly the full live set's part the range concerns, and a
//! range reads a fraction of the journal's bytes.

use crate::support::{batch, iter, new_lake, TestLake};
use chrono::Utc;
use lake_engine::{Engine, RetainedRoots, TableLocation, UriRange};
use lake_store::layout::reference_log_key;
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::collections::BTreeSet;

/// Rows of managed keys minted 10 ms apart (ascending), and one reference inside the root that
/// is no managed key.
fn rows(n: u64) -> Vec<ManagedObject> {
    let start = Utc::now().timestamp_millis() as u64 - 10 * n - 60_000;
    let mut objects: Vec<ManagedObject> = (0..n)
        .map(|i| ManagedObject {
            key: format!("objects/{}/f{i}", ulid::Ulid::from_parts(start + 10 * i, u128::from(i))),
            sha256: [(i % 251) as u8; 32],
            size: i,
            last_modified: Utc::now(),
        })
        .collect();
    objects.push(ManagedObject { key: "notes/readme.txt".into(), sha256: [1; 32], size: 1, last_modified: Utc::now() });
    objects
}

/// The live identities' URIs of `table` read for `range`, and the bytes of journal read.
async fn live_in(lake: &TestLake, range: &UriRange) -> (BTreeSet<String>, u64) {
    let location = TableLocation { name: "t".into(), uri: lake.engine.dataset_uri("t") };
    let before = lake.engine.journal_bytes_read();
    let snapshot = lake.engine.snapshot_in(&location, range).await.unwrap();
    let read = lake.engine.journal_bytes_read() - before;
    let roots = RetainedRoots::new(snapshot.lineage().retained.clone());
    assert!(snapshot.lineage().problems.is_empty(), "{:?}", snapshot.lineage().problems);
    let mut stream = snapshot.live(&roots).unwrap();
    let mut live = BTreeSet::new();
    while let Some(identity) = stream.next_identity().unwrap() {
        live.insert(identity.uri);
    }
    (live, read)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_range_reads_only_the_blocks_of_its_keys() {
    let lake = new_lake().await;
    let objects = rows(40_000);
    let refs: Vec<_> = objects.iter().map(|o| ("e", Some(o))).collect();
    // Version 1 through the engine (the table is registered), version 2 by a second client,
    // journaled by repair as a sorted snapshot log of several blocks.
    let first = lake.upload("first.bin", b"the engine's own row").await;
    lake.engine.append("t", crate::support::reader(vec![batch(&[("e", Some(&first))])])).await.unwrap();
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    Dataset::write(iter(batch(&refs)), &lake.engine.dataset_uri("t"), Some(params)).await.unwrap();
    lake.engine.repair_refs("t", 2).await.unwrap();

    let (all, whole) = live_in(&lake, &UriRange::all()).await;
    assert_eq!(all.len(), objects.len() + 1);
    // Four ranges split at the keys of rows 10,000, 20,000 and 30,000.
    let cut = |i: usize| Some(objects[i].key.clone());
    let ranges = [
        UriRange { after: None, until: cut(10_000) },
        UriRange { after: cut(10_000), until: cut(20_000) },
        UriRange { after: cut(20_000), until: cut(30_000) },
        UriRange { after: cut(30_000), until: None },
    ];
    let mut union = BTreeSet::new();
    for range in &ranges {
        let (live, read) = live_in(&lake, range).await;
        let expected: BTreeSet<String> = all.iter().filter(|u| range.concerns(u)).cloned().collect();
        assert_eq!(live, expected, "{range:?}");
        assert!(live.contains("notes/readme.txt"), "a reference no range can judge alone is in every range");
        // A quarter of the keys, the block holding the unmanaged reference, and at most a
        // batch more at either end (the ratio at scale is `shard_journal_bytes_ratio`).
        assert!(read * 10 < whole * 6, "{range:?} read {read} of {whole} bytes");
        union.extend(live);
    }
    assert_eq!(union, all);

    // A block edited in place: the ranges that read it see the version's entry as a problem.
    let head = lake.store.get(&lake_store::layout::sidecar_key("t", 2)).await.unwrap().unwrap();
    let lake_common::SidecarDocument::Log(head) = lake_common::SidecarDocument::decode(&head, "t", 2).unwrap() else {
        panic!("a head")
    };
    let index = head.log.index.clone().expect("an indexed log");
    assert!(index.blocks.len() >= 5, "{index:?}");
    let key = reference_log_key("t", &head.log.write_id);
    let mut log = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    let last = log.len() - index.blocks.last().unwrap().bytes as usize - 100;
    log[last] ^= 1;
    lake.store.put(&key, log).await.unwrap();
    let location = TableLocation { name: "t".into(), uri: lake.engine.dataset_uri("t") };
    let snapshot = lake.engine.snapshot_in(&location, &ranges[3]).await.unwrap();
    assert!(!snapshot.lineage().problems.is_empty(), "the edited block is found by the range that reads it");
}
