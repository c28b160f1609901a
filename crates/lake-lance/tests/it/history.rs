//! Complete lineage: overwrite, restore, tags, concurrent writers, a second Lance client and
//! repair, and random histories checked against full scans.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader, schema, TestLake};
use chrono::Utc;
use lake_common::{DeltaKind, ObjectReferenceDelta};
use lake_gc::apply::ApplyOptions;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_store::writer::ManagedObject;
use std::collections::BTreeSet;
use std::time::Duration;

async fn sidecar(lake: &TestLake, table: &str, v: u64) -> ObjectReferenceDelta {
    lake_lance::sidecar::read(&lake.store, table, v).await.unwrap().expect("sidecar").unwrap()
}

async fn assert_verified(lake: &TestLake) {
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn overwrite_and_restore_are_journaled_as_snapshots() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    let b = lake.upload("b", b"b").await;
    let c = lake.upload("c", b"c").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a)), ("e", Some(&b)), ("e", Some(&a))])])).await.unwrap();
    let o = lake.engine.overwrite("t", reader(vec![batch(&[("f", Some(&c))])])).await.unwrap();
    let snap = sidecar(&lake, "t", o.version).await;
    assert_eq!(snap.kind, DeltaKind::Snapshot);
    assert_eq!(snap.added.iter().map(|e| e.identity.clone()).collect::<Vec<_>>(), vec![c.identity()]);
    let r = lake.engine.restore("t", 1).await.unwrap();
    let snap = sidecar(&lake, "t", r.version).await;
    assert_eq!(snap.kind, DeltaKind::Snapshot);
    assert_eq!(lake.engine.scan_version("t", r.version).await.unwrap().to_entries(), snap.added);
    assert_eq!(r.references_added, 3);
    // The temporary tag that protected version 1 is gone.
    assert!(lake.engine.versions("t").await.unwrap().iter().all(|v| v.tags.is_empty()));
    assert_verified(&lake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tag_keeps_an_old_versions_objects_live() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("old", Some(&a))])])).await.unwrap();
    lake.engine.create_tag("t", 1, "release-1").await.unwrap();
    lake.engine.delete("t", "episode = 'old'").await.unwrap().unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(lake.engine.versions("t").await.unwrap().iter().map(|v| v.version).collect::<Vec<_>>(), vec![1, 2]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(dry_run(&lake, Utc::now(), 10).await.candidates.is_empty(), "tagged version 1 references a");
    lake.engine.delete_tag("t", "release-1").await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.keys().unwrap().into_iter().collect::<Vec<_>>(), vec![a.key.clone()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_writers_leave_exact_journals() {
    let lake = new_lake().await;
    let mut objects = Vec::new();
    for i in 0..6 {
        objects.push(lake.upload(&format!("o{i}"), format!("object {i}").as_bytes()).await);
    }
    lake.engine.append("t", reader(vec![batch(&[("seed", Some(&objects[0]))])])).await.unwrap();
    let mut rebased = 0;
    for round in 0..80 {
        let (x, y) = (&objects[round % 6], &objects[(round + 1) % 6]);
        let ep = format!("r{round}");
        let (r1, r2, r3) = tokio::join!(
            lake.engine.append("t", reader(vec![batch(&[(ep.as_str(), Some(x)), (ep.as_str(), Some(y))])])),
            lake.engine.append("t", reader(vec![batch(&[("shared", Some(x))])])),
            lake.engine.delete("t", "episode = 'shared'"),
        );
        for o in [r1.unwrap(), r2.unwrap()] {
            rebased += o.rebased as u32;
        }
        if let Some(d) = r3.unwrap() {
            rebased += d.rebased as u32;
        }
        if rebased >= 3 && round >= 5 {
            break;
        }
    }
    assert!(rebased > 0, "no commit was rebased: the race was never exercised");
    println!("concurrent writers: {rebased} rebased commits");
    assert_verified(&lake).await;
}

/// Not a test: the second Lance client of `a_second_lance_client_is_refused_until_repair`, run in
/// a child process. It panics when run on its own.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "child-process helper of a_second_lance_client_is_refused_until_repair"]
async fn child_process_helper_plain_lance_append() {
    let dataset = std::env::var("LAKE_CHILD_DATASET").expect("run only as a child process");
    let parse = |k: &str| std::env::var(k).unwrap();
    let mut sha = [0u8; 32];
    for (i, b) in sha.iter_mut().enumerate() {
        *b = u8::from_str_radix(&parse("LAKE_CHILD_SHA")[2 * i..2 * i + 2], 16).unwrap();
    }
    let mut files = lake_common::DataLocationBuilder::new();
    files.append(&parse("LAKE_CHILD_URI"), sha, parse("LAKE_CHILD_SIZE").parse().unwrap());
    let episodes: arrow_array::ArrayRef = std::sync::Arc::new(arrow_array::StringArray::from(vec!["second-client"]));
    let rows =
        arrow_array::RecordBatch::try_new(schema(), vec![episodes, std::sync::Arc::new(files.finish())]).unwrap();
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    let reader = arrow_array::RecordBatchIterator::new(vec![Ok(rows)], schema());
    lance::Dataset::write(reader, dataset.as_str(), Some(params)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_lance_client_is_refused_until_repair() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    let b = lake.upload("b", b"referenced only by the second client's version").await;
    let orphan = lake.upload("orphan", b"orphan").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "history::child_process_helper_plain_lance_append", "--include-ignored", "--quiet"])
        .env("LAKE_CHILD_DATASET", lake.engine.dataset_uri("t"))
        .env("LAKE_CHILD_URI", &b.key)
        .env("LAKE_CHILD_SHA", b.identity().sha256_hex())
        .env("LAKE_CHILD_SIZE", b.size.to_string())
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "the second client failed: {}{}",
        String::from_utf8_lossy(&status.stdout),
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 2);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    let plan = dry_run(&lake, cutoff, 10).await;
    assert!(!plan.lineage_complete && plan.problems[0].message.contains("version 2"), "{:?}", plan.problems);
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    assert!(apply(
        &lake.engine,
        &deleter,
        &dir.path().join("c1").as_path().into(),
        Some(&plan),
        &ApplyOptions::default()
    )
    .await
    .is_err());
    assert!(!lake.engine.verify_refs(&[]).await.unwrap().is_ok());

    lake.engine.repair_refs("t", 2).await.unwrap();
    assert_eq!(sidecar(&lake, "t", 2).await.kind, DeltaKind::Snapshot);
    assert_verified(&lake).await;
    let plan = dry_run(&lake, cutoff, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(plan.candidates.keys().unwrap().into_iter().collect::<Vec<_>>(), vec![orphan.key.clone()]);
    let report =
        apply(&lake.engine, &deleter, &dir.path().join("c2").as_path().into(), Some(&plan), &ApplyOptions::default())
            .await
            .unwrap();
    assert_eq!(report.checkpoint.deleted, 1);
    for kept in [&a, &b] {
        assert!(lake.store.head(&kept.key).await.unwrap().is_some(), "{} is referenced and must survive", kept.key);
    }
}

/// Random sequences of append, delete, overwrite, restore, compaction, tag and cleanup on real
/// Lance datasets: journal replay equals a full scan for every retained version, and the plan
/// is exactly the old objects that no retained version references.
#[tokio::test(flavor = "multi_thread")]
async fn random_histories_journal_equals_scan_and_plan_equals_truth() {
    let mut seed: u64 = 0xC0FFEE;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for history in 0..4 {
        let lake = new_lake().await;
        let mut pool: Vec<ManagedObject> = Vec::new();
        for i in 0..8 {
            pool.push(lake.upload(&format!("p{i}"), format!("pool {history} {i}").as_bytes()).await);
        }
        let mut ops = Vec::new();
        let mut tags = 0;
        for _ in 0..10 {
            let rows: Vec<(String, usize)> =
                (0..1 + next(3)).map(|_| (format!("e{}", next(3)), next(8) as usize)).collect();
            let exists = lake.engine.table_exists("t").await.unwrap();
            let op = if exists { next(8) } else { 0 };
            let batch_of = |rows: &[(String, usize)]| {
                let r: Vec<(&str, Option<&ManagedObject>)> =
                    rows.iter().map(|(e, i)| (e.as_str(), Some(&pool[*i]))).collect();
                reader(vec![batch(&r)])
            };
            match op {
                0 | 1 => {
                    lake.engine.append("t", batch_of(&rows)).await.unwrap();
                    ops.push("append");
                }
                2 => {
                    lake.engine.delete("t", &format!("episode = 'e{}'", next(3))).await.unwrap();
                    ops.push("delete");
                }
                3 => {
                    lake.engine.overwrite("t", batch_of(&rows)).await.unwrap();
                    ops.push("overwrite");
                }
                4 => {
                    let versions = lake.engine.versions("t").await.unwrap();
                    let v = versions[next(versions.len() as u64) as usize].version;
                    lake.engine.restore("t", v).await.unwrap();
                    ops.push("restore");
                }
                5 => {
                    lake.engine.compact("t").await.unwrap();
                    ops.push("compact");
                }
                6 => {
                    let versions = lake.engine.versions("t").await.unwrap();
                    let v = versions[next(versions.len() as u64) as usize].version;
                    tags += 1;
                    lake.engine.create_tag("t", v, &format!("tag{tags}")).await.unwrap();
                    ops.push("tag");
                }
                _ => {
                    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
                    ops.push("cleanup");
                }
            }
        }
        let report = lake.engine.verify_refs(&[]).await.unwrap();
        assert!(report.is_ok(), "history {history} {ops:?}: {report:#?}");
        let mut live = BTreeSet::new();
        for v in lake.engine.versions("t").await.unwrap() {
            live.extend(lake.engine.scan_version("t", v.version).await.unwrap().iter().map(|(id, _)| id.uri.clone()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let plan = dry_run(&lake, Utc::now(), 3).await;
        assert!(plan.lineage_complete, "{:?}", plan.problems);
        let expected: BTreeSet<String> = pool.iter().map(|o| o.key.clone()).filter(|k| !live.contains(k)).collect();
        let got: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
        assert_eq!(got, expected, "history {history} {ops:?}");
    }
}
