//! Lineage from `Dataset::versions()` and the journal: fail-closed cases.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader, schema};
use chrono::Utc;
use lake_engine::{Engine, LineageProblem};
use lake_gc::apply::ApplyOptions;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::GcError;
use lake_store::layout::{dataset_key, reference_log_key, sidecar_key};
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread")]
async fn a_version_written_around_the_engine_blocks_apply() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let old_orphan = lake.upload("orphan.bin", b"orphan").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    // A plain Lance append to the same dataset, bypassing the engine.
    let b = lake.upload("b.bin", b"b").await;
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let rows = arrow_array::RecordBatchIterator::new(vec![Ok(batch(&[("e", Some(&b))]))], schema());
    Dataset::write(rows, lake.engine.dataset_uri("t").as_str(), Some(params)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;

    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(!plan.lineage_complete);
    assert!(plan.candidates.is_empty(), "no candidates on incomplete lineage");
    assert!(
        plan.problems.iter().any(|p| p.kind == "missing_sidecar" && p.message.contains("version 2")),
        "{:?}",
        plan.problems
    );
    let location = lake.engine.tables().await.unwrap().tables.remove(0);
    let lineage = lake.engine.snapshot(&location).await.unwrap().lineage().clone();
    assert_eq!(lineage.problems, vec![LineageProblem::MissingSidecar { table: "t".into(), version: 2 }]);

    let before = lake.all_object_keys().await;
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let err =
        apply(&lake.engine, &deleter, &dir.path().join("c").as_path().into(), Some(&plan), &ApplyOptions::default())
            .await
            .unwrap_err();
    assert!(matches!(err, GcError::PlanIncomplete { .. }), "{err}");
    assert!(!dir.path().join("c").exists(), "no checkpoint for a refused plan");
    assert_eq!(lake.all_object_keys().await, before, "nothing deleted");
    assert!(lake.store.head(&old_orphan.key).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_undecodable_sidecar_is_named_and_blocks_gc() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let key = sidecar_key("t", 2);
    let mut bytes = lake.store.get(&key).await.unwrap().unwrap().to_vec();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(lake.store.local_dir().unwrap().join(&key), bytes).unwrap();
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(!plan.lineage_complete);
    assert!(
        plan.problems.iter().any(|p| p.kind == "undecodable_sidecar" && p.message.contains("version 2")),
        "{:?}",
        plan.problems
    );
}

/// The reference log of a streamed write (format 2) fails closed like a sidecar: truncated,
/// missing, or another write's log all make the version's lineage incomplete.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_or_missing_reference_log_blocks_gc() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a)), ("f", Some(&a))])])).await.unwrap();
    async fn head(lake: &crate::support::TestLake, v: u64) -> lake_common::LogHead {
        let bytes = lake.store.get(&sidecar_key("t", v)).await.unwrap().unwrap();
        match lake_common::SidecarDocument::decode(&bytes, "t", v).unwrap() {
            lake_common::SidecarDocument::Log(head) => head,
            other => panic!("an append writes a format-2 head, got {other:?}"),
        }
    }
    let (h1, h2) = (head(&lake, 1).await, head(&lake, 2).await);
    assert_eq!((h2.log.references, h2.kind), (2, lake_common::DeltaKind::Delta));
    let dir = lake.store.local_dir().unwrap();
    let log2 = dir.join(reference_log_key("t", &h2.log.write_id));
    let original = std::fs::read(&log2).unwrap();
    let problem_of_version_2 = |plan: &lake_gc::plan::GcPlan| {
        assert!(!plan.lineage_complete);
        plan.problems.iter().find(|p| p.message.contains("version 2")).map(|p| p.message.clone()).unwrap_or_default()
    };

    std::fs::write(&log2, &original[..original.len() - 3]).unwrap();
    let p = problem_of_version_2(&dry_run(&lake, Utc::now(), 10).await);
    assert!(p.contains("reference log"), "{p}");

    // Another write's log of the same length in its place (its schema names the other write).
    let log1 = std::fs::read(dir.join(reference_log_key("t", &h1.log.write_id))).unwrap();
    std::fs::write(&log2, &log1).unwrap();
    let p = problem_of_version_2(&dry_run(&lake, Utc::now(), 10).await);
    assert!(p.contains("reference log"), "{p}");

    std::fs::remove_file(&log2).unwrap();
    let p = problem_of_version_2(&dry_run(&lake, Utc::now(), 10).await);
    assert!(p.contains("is missing"), "{p}");

    std::fs::write(&log2, &original).unwrap();
    assert!(dry_run(&lake, Utc::now(), 10).await.lineage_complete);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_survives_lance_cleanup_and_compaction_journals_every_version() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    for _ in 0..3 {
        lake.engine.append("t", reader(vec![batch(&[("e", Some(&a)), ("x", Some(&a))])])).await.unwrap();
    }
    lake.engine.delete("t", "episode = 'x'").await.unwrap().expect("rows deleted");
    let compacted = lake.engine.compact("t").await.unwrap().unwrap();
    for v in 1..=compacted.version {
        assert!(lake.store.get(&sidecar_key("t", v)).await.unwrap().is_some(), "version {v} is journaled");
    }
    // A stray file in the dataset's _lake folder and the journal survive cleanup.
    lake.store.put(&format!("{}/_lake/keep.txt", dataset_key("t")), b"x".to_vec()).await.unwrap();
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(cleaned.old_versions >= 4);
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1);
    for v in 1..=compacted.version {
        assert!(
            lake.store.get(&sidecar_key("t", v)).await.unwrap().is_some(),
            "version {v}'s sidecar survived cleanup"
        );
    }
    assert!(lake.store.get(&format!("{}/_lake/keep.txt", dataset_key("t"))).await.unwrap().is_some());
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
}

/// A first write Lance refuses (a column name with a dot) leaves nothing (at most empty
/// folders): no dataset, no problem. A folder with anything in it stays a problem.
#[tokio::test(flavor = "multi_thread")]
async fn the_empty_folders_of_a_failed_first_write_are_no_dataset() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let dotted = arrow_schema::Schema::new(vec![lake_common::data_location_field("a.b", true)]);
    let column = {
        let mut b = lake_common::DataLocationBuilder::new();
        b.append(&a.key, a.sha256, a.size);
        std::sync::Arc::new(b.finish()) as arrow_array::ArrayRef
    };
    let rows = arrow_array::RecordBatch::try_new(std::sync::Arc::new(dotted), vec![column]).unwrap();
    assert!(lake.engine.append("bad", reader(vec![rows])).await.is_err());
    let folder = lake.store.local_dir().unwrap().join(dataset_key("bad"));
    assert!(!lake.store.holds_anything_below(&dataset_key("bad")).await.unwrap(), "the failed write leaves no file");
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    std::fs::create_dir_all(folder.join("_lake/object_ref_logs")).unwrap();
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(plan.lineage_complete, "empty folders are no dataset: {:?}", plan.problems);
    std::fs::write(folder.join("stray"), b"?").unwrap();
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(
        plan.problems.iter().any(|p| p.kind == "uncommitted_dataset" && p.message.contains("tables/bad.lance")),
        "{:?}",
        plan.problems
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unregistered_dataset_is_a_problem() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let rows = arrow_array::RecordBatchIterator::new(vec![Ok(batch(&[("e", Some(&a))]))], schema());
    Dataset::write(rows, lake.engine.dataset_uri("rogue").as_str(), None).await.unwrap();
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(!plan.lineage_complete);
    assert!(plan.problems.iter().any(|p| p.message.contains("tables/rogue.lance")), "{:?}", plan.problems);
}
