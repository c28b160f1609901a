//! Crash tests: an operation stopped at each failure point (a simulated crash) never leads GC to
//! delete an object a retained version references, and an interrupted apply resumes to the same
//! final state.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_lake, reader, TestLake};
use chrono::Utc;
use lake_engine::Engine;
use lake_gc::apply::ApplyOptions;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::unchecked::CutHalfWay;
use lake_gc::GcError;
use lake_lance::verify::check_retained_objects;
use lake_lance::LanceEngineError;
use lake_store::failpoint;
use std::collections::BTreeSet;
use std::time::Duration;

fn injected(e: &LanceEngineError) -> bool {
    match e {
        LanceEngineError::Objects(lake_store::StoreError::Injected(_)) => true,
        // Past the manifest, the failure says the version landed.
        LanceEngineError::Unpublished { source, .. } => injected(source),
        _ => false,
    }
}

/// Dry run; repair every version the run names as missing its sidecar; apply; then check.
async fn gc_after_crash(lake: &TestLake) -> BTreeSet<String> {
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    let mut plan = dry_run(lake, cutoff, 10).await;
    if !plan.lineage_complete {
        assert!(plan.candidates.is_empty());
        for location in lake.engine.tables().await.unwrap().tables {
            for problem in lake.engine.snapshot(&location).await.unwrap().lineage().clone().problems {
                match problem {
                    lake_engine::LineageProblem::MissingSidecar { table, version } => {
                        lake.engine.repair_refs(&table, version).await.unwrap();
                    }
                    other => panic!("unexpected problem after a crash: {other}"),
                }
            }
        }
        plan = dry_run(lake, cutoff, 10).await;
        assert!(plan.lineage_complete, "{:?}", plan.problems);
    }
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let report =
        apply(&lake.engine, &deleter, &dir.path().join("c").as_path().into(), Some(&plan), &ApplyOptions::default())
            .await
            .unwrap();
    assert!(report.checkpoint.complete);
    let retained = check_retained_objects(&lake.engine).await.unwrap();
    assert!(retained.is_ok(), "{retained:?}");
    let verify = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(verify.is_ok(), "{verify:#?}");
    plan.candidates.keys().unwrap().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn crashes_during_an_append_never_lose_referenced_objects() {
    for point in ["append.after_upload", "commit.after_manifest", "commit.after_entry", "commit.after_registry"] {
        let lake = new_lake().await;
        let live = lake.upload("live", b"live").await;
        lake.engine.append("t", reader(vec![batch(&[("e", Some(&live))])])).await.unwrap();
        let orphan = lake.upload("orphan", b"orphan").await;
        let result = failpoint::scope(point, async {
            let fresh = lake.writer.upload("fresh", b"fresh".as_slice()).await?;
            lake.engine.append("t", reader(vec![batch(&[("e", Some(&fresh))])])).await?;
            Ok::<_, LanceEngineError>(())
        })
        .await;
        let err = result.expect_err(point);
        assert!(injected(&err), "{point}: {err}");
        // A failure after the manifest landed names the version and is never transient: a
        // caller retrying the append would commit its rows twice.
        if matches!(point, "commit.after_entry" | "commit.after_registry") {
            assert_eq!(err.committed_version(), Some(2), "{point}: {err}");
            assert!(!err.is_transient(), "{point}: {err}");
        }
        let deleted = gc_after_crash(&lake).await;
        assert!(deleted.contains(&orphan.key), "{point}");
        assert!(!deleted.contains(&live.key), "{point}");
        let versions = lake.engine.versions("t").await.unwrap().len();
        let expected_versions = if point == "append.after_upload" { 1 } else { 2 };
        assert_eq!(versions, expected_versions, "{point}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_apply_crashed_at_any_point_resumes_to_the_same_final_state() {
    // Each failure point, then a crash half-way through a delete request (some keys of the page
    // deleted, no outcome recorded), with two requests in flight.
    for point in ["apply.after_plan_persisted", "apply.after_page", "apply.before_checkpoint_write", CutHalfWay::POINT]
    {
        let lake = new_lake().await;
        let live = lake.upload("live", b"live").await;
        lake.engine.append("t", reader(vec![batch(&[("e", Some(&live))])])).await.unwrap();
        let mut orphans = BTreeSet::new();
        for i in 0..5 {
            orphans.insert(lake.upload(&format!("o{i}"), b"o").await.key);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let plan = dry_run(&lake, Utc::now(), 10).await;
        assert_eq!(plan.candidates.keys().unwrap().into_iter().collect::<BTreeSet<_>>(), orphans);
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("c");
        let deleter = lake_gc::deleter::for_store(&lake.store);
        let options =
            ApplyOptions { page_size: 2, max_pages: None, progress: None, concurrency: 2, ..ApplyOptions::default() };
        let crashed = if point == CutHalfWay::POINT {
            let cut = CutHalfWay::new(&*deleter);
            apply(&lake.engine, &cut, &ckpt.as_path().into(), Some(&plan), &options).await
        } else {
            failpoint::scope(point, apply(&lake.engine, &deleter, &ckpt.as_path().into(), Some(&plan), &options)).await
        };
        assert!(
            matches!(crashed, Err(GcError::Store(lake_store::StoreError::Injected(p))) if p == point),
            "{point}: {crashed:?}"
        );
        let resumed = apply(&lake.engine, &deleter, &ckpt.as_path().into(), None, &options).await.unwrap();
        assert!(resumed.checkpoint.complete, "{point}");
        assert_eq!(
            resumed.checkpoint.deleted + resumed.checkpoint.already_gone,
            5,
            "{point}: {:?}",
            resumed.checkpoint
        );
        for o in &orphans {
            assert!(lake.store.head(o).await.unwrap().is_none(), "{point}: {o}");
        }
        assert!(lake.store.head(&live.key).await.unwrap().is_some(), "{point}");
        assert!(check_retained_objects(&lake.engine).await.unwrap().is_ok());
    }
}
