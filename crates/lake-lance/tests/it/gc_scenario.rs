//! The end-to-end GC scenario (orphans, shared objects, cleanup, resumable apply) on a real lake.

use crate::support::{batch, new_lake, new_s3_lake, reader, TestLake};
use chrono::Utc;
use lake_gc::apply::ApplyOptions;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_lance::verify::check_retained_objects;
use std::collections::BTreeSet;
use std::time::Duration;

pub(crate) async fn dry_run(lake: &TestLake, cutoff: chrono::DateTime<Utc>, page: usize) -> GcPlan {
    let options = PlanOptions::new(lake.store.root(), Duration::from_secs(1), cutoff).page_size(page).memory_budget(3);
    plan(&lake.engine, lake_gc::inventory::for_store(&lake.store).as_ref(), &options).await.unwrap().0
}

fn uris(plan: &GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_deletes_exactly_the_old_orphans_and_resumes() {
    scenario(new_lake().await).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_gc_deletes_exactly_the_old_orphans_and_resumes() {
    scenario(new_s3_lake("gc-scenario").await).await;
}

/// The scenario on any lake root.
async fn scenario(lake: TestLake) {
    let a1 = lake.upload("a1.bin", b"episode A, file 1").await;
    let a2 = lake.upload("a2.bin", b"episode A, file 2").await;
    let b1 = lake.upload("b1.bin", b"episode B").await;
    let shared = lake.upload("shared.bin", b"referenced by rows of A and B").await;
    lake.engine
        .append(
            "episodes",
            reader(vec![batch(&[
                ("A", Some(&a1)),
                ("A", Some(&a2)),
                ("A", Some(&shared)),
                ("B", Some(&b1)),
                ("B", Some(&shared)),
            ])]),
        )
        .await
        .unwrap();
    let c1 = lake.upload("c1.bin", b"episode C").await;
    lake.engine.append("episodes", reader(vec![batch(&[("C", Some(&c1)), ("C", None)])])).await.unwrap();
    let deleted = lake.engine.delete("episodes", "episode = 'A'").await.unwrap().unwrap();
    assert_eq!((deleted.rows, deleted.references_removed), (3, 3));
    lake.engine.compact("episodes").await.unwrap().expect("compaction commits");
    let never_appended = lake.upload("crashed-writer.bin", b"uploaded, never appended").await;
    // Keys outside the managed prefix or grammar, old enough to be candidates if they were managed.
    lake.store.put("stray/file.bin", b"not managed".to_vec()).await.unwrap();
    lake.store.put("objects-old/01JAAAAAAAAAAAAAAAAAAAAAAA/x.bin", b"sibling prefix".to_vec()).await.unwrap();
    lake.store.put("objects/not-a-ulid/x.bin", b"bad grammar".to_vec()).await.unwrap();
    lake.store.put(&format!("objects/{}/x.bin/extra", ulid::Ulid::new()), b"too deep".to_vec()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let young = lake.upload("young.bin", b"uploaded after the cutoff").await;

    // Before cleanup, versions 1 and 2 still reference A's objects: only the never-appended upload.
    let before = dry_run(&lake, cutoff, 2).await;
    assert!(before.lineage_complete, "{:?}", before.problems);
    assert_eq!(uris(&before), BTreeSet::from([never_appended.key.clone()]));

    let cleaned = lake.engine.cleanup("episodes", Duration::ZERO).await.unwrap();
    assert!(cleaned.old_versions >= 3, "{cleaned:?}");
    let plan1 = dry_run(&lake, cutoff, 2).await;
    let expected = BTreeSet::from([a1.key.clone(), a2.key.clone(), never_appended.key.clone()]);
    assert_eq!(uris(&plan1), expected, "exactly the deleted rows' objects and the old never-appended upload");
    assert_eq!(plan1.candidate_bytes(), a1.size + a2.size + never_appended.size);
    // Same state, same cutoff: byte-identical plans, whatever the page sizes.
    let plan2 = dry_run(&lake, cutoff, 1000).await;
    assert_eq!(plan1.canonical_bytes().unwrap(), plan2.canonical_bytes().unwrap());
    assert_eq!(plan1.to_document().unwrap(), plan2.to_document().unwrap());

    let before_keys: BTreeSet<String> = lake.all_object_keys().await.into_iter().collect();
    let engine = &lake.engine;
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("gc.ckpt");
    // Interrupted after its first page.
    let first = apply(
        engine,
        &deleter,
        &ckpt.as_path().into(),
        Some(&plan1),
        &ApplyOptions { page_size: 1, max_pages: Some(1), progress: None, concurrency: 1, ..ApplyOptions::default() },
    )
    .await
    .unwrap();
    // (On S3 a resumed delete may be `absent`: LocalStack does not say whether the key existed.)
    let removed = |c: &lake_gc::checkpoint::ApplyCheckpoint| c.deleted + c.absent;
    assert_eq!((first.pages, removed(&first.checkpoint), first.checkpoint.complete), (1, 1, false));
    // Resumed from the checkpoint alone.
    let resumed = apply(
        engine,
        &deleter,
        &ckpt.as_path().into(),
        None,
        &ApplyOptions { page_size: 1, max_pages: None, progress: None, concurrency: 3, ..ApplyOptions::default() },
    )
    .await
    .unwrap();
    assert!(resumed.checkpoint.complete);
    assert_eq!(
        (removed(&resumed.checkpoint), resumed.checkpoint.already_gone, resumed.checkpoint.failed.len()),
        (3, 0, 0)
    );
    // A second apply is a no-op that reports completion.
    let again = apply(engine, &deleter, &ckpt.as_path().into(), Some(&plan1), &ApplyOptions::default()).await.unwrap();
    assert!(again.was_complete && again.pages == 0);

    let after_keys: BTreeSet<String> = lake.all_object_keys().await.into_iter().collect();
    let gone: BTreeSet<String> = before_keys.difference(&after_keys).cloned().collect();
    assert_eq!(gone, expected, "the apply deleted exactly the plan");
    for kept in [&young.key, &b1.key, &shared.key, &c1.key] {
        assert!(after_keys.contains(kept), "{kept} must survive");
    }
    for stray in ["stray/file.bin", "objects-old/01JAAAAAAAAAAAAAAAAAAAAAAA/x.bin", "objects/not-a-ulid/x.bin"] {
        assert!(after_keys.contains(stray), "{stray} outside the managed grammar must survive");
    }
    let report = check_retained_objects(engine).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    assert_eq!(report.objects_checked, 3, "b1, shared and c1 read back with their SHA-256");
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_a_checkpoint_of_another_plan() {
    let lake = new_lake().await;
    let old = lake.upload("old.bin", b"old").await;
    let a = lake.upload("a.bin", b"a").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    let plan1 = dry_run(&lake, cutoff, 10).await;
    assert_eq!(uris(&plan1), BTreeSet::from([old.key.clone()]));
    let plan2 = dry_run(&lake, cutoff - chrono::Duration::milliseconds(1), 10).await;
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("gc.ckpt");
    let deleter = lake_gc::deleter::for_store(&lake.store);
    apply(
        &lake.engine,
        &deleter,
        &ckpt.as_path().into(),
        Some(&plan1),
        &ApplyOptions { page_size: 1, max_pages: Some(0), progress: None, concurrency: 1, ..ApplyOptions::default() },
    )
    .await
    .unwrap();
    let err = apply(&lake.engine, &deleter, &ckpt.as_path().into(), Some(&plan2), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("records the apply of plan"), "{err}");
    assert!(lake.store.head(&old.key).await.unwrap().is_some(), "nothing deleted");
}

#[tokio::test(flavor = "multi_thread")]
async fn apply_revives_candidates_referenced_after_the_plan() {
    let lake = new_lake().await;
    let old = lake.upload("old.bin", b"old").await;
    let other = lake.upload("other.bin", b"other").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&other))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let plan1 = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(uris(&plan1), BTreeSet::from([old.key.clone()]));
    // A writer publishes a reference to the candidate after the plan (a guard would normally
    // refuse an object this old; apply must still not delete it).
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&old))])])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let report =
        apply(&lake.engine, &deleter, &dir.path().join("c").as_path().into(), Some(&plan1), &ApplyOptions::default())
            .await
            .unwrap();
    assert_eq!(report.checkpoint.revived, vec![old.key.clone()]);
    assert_eq!(report.checkpoint.deleted, 0);
    assert!(report.checkpoint.complete);
    assert!(lake.store.head(&old.key).await.unwrap().is_some());
}
