//! Lance operations beyond append and delete, through the engine and by another Lance client:
//! update, index creation and removal, and the content-preserving versions a second client
//! commits (index builds, config changes, compaction), which need no repair. After every step
//! the journal equals full scans of every retained version (`verify_refs`), and a dry run plans
//! exactly the objects no retained version references.

use crate::gc_scenario::dry_run;
use crate::support::{batch, keyed_locations, new_lake, reader, TestLake};
use crate::truth::planned_objects;
use chrono::Utc;
use lake_engine::{Engine, LineageProblem};
use lake_lance::index::IndexKind;
use lake_lance::update::Assignment;
use lake_lance::LanceEngineError;
use lake_store::guard::GuardError;
use lake_store::writer::ManagedObject;
use lance::dataset::optimize::{compact_files, CompactionOptions};
use lance::dataset::UpdateBuilder;
use lance::index::DatasetIndexExt;
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The journal equals full scans of every retained version.
async fn assert_journal_matches_scans(lake: &TestLake) {
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
}

/// A dry run at a cutoff after every upload so far: whether the lineage is complete, the
/// managed objects planned, and the problems.
async fn planned(lake: &TestLake) -> (bool, BTreeSet<String>, Vec<String>) {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let plan = dry_run(lake, Utc::now(), 10).await;
    (plan.lineage_complete, planned_objects(&plan), plan.problems.into_iter().map(|p| p.message).collect())
}

fn set(s: &str) -> Assignment {
    s.parse().unwrap()
}

/// Table `t` at version 1: `e1` references `a`, `e2` references `b`, `e3` nothing.
async fn lake_with_rows() -> (TestLake, ManagedObject, ManagedObject) {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"object a").await;
    let b = lake.upload("b.bin", b"object b").await;
    let rows = batch(&[("e1", Some(&a)), ("e2", Some(&b)), ("e3", None)]);
    lake.engine.append("t", reader(vec![rows])).await.unwrap();
    (lake, a, b)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_of_a_reference_column_journals_what_it_removed_and_added() {
    let (lake, a, b) = lake_with_rows().await;

    // Clearing e1's file removes one reference to `a`.
    let out = lake.engine.update("t", &[set("file = NULL")], Some("episode = 'e1'")).await.unwrap().unwrap();
    assert_eq!((out.version, out.rows, out.references_added, out.references_removed), (2, 1, 0, 1));
    assert_journal_matches_scans(&lake).await;

    // Copying within the row is not new to it: `file = file` is an empty delta.
    let out = lake.engine.update("t", &[set("file = file")], None).await.unwrap().unwrap();
    assert_eq!((out.version, out.rows, out.references_added, out.references_removed), (3, 3, 0, 0));
    // A column that is not a reference column: no reference moves.
    let out = lake.engine.update("t", &[set("episode = 'x' || episode")], Some("episode = 'e2'")).await.unwrap();
    assert_eq!(out.map(|o| (o.references_added, o.references_removed)), Some((0, 0)));
    // No matching row: no version.
    assert!(lake.engine.update("t", &[set("file = NULL")], Some("episode = 'none'")).await.unwrap().is_none());
    assert_journal_matches_scans(&lake).await;

    // Once version 1 is cleaned up, `a` is referenced by no retained version: an orphan; `b`
    // (still on row xe2) is not.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(candidates.contains(&a.key) && !candidates.contains(&b.key), "{candidates:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_that_points_a_row_at_a_stale_object_is_refused_by_the_guard() {
    let (lake, a, _) = lake_with_rows().await;
    // A managed key minted two days ago: an object GC may be deleting right now.
    let stale_key = format!(
        "objects/{}/old.bin",
        ulid::Ulid::from_datetime(std::time::SystemTime::now() - Duration::from_secs(2 * 86400))
    );
    lake.store.put(&stale_key, b"old".to_vec()).await.unwrap();
    let sha = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(b"old"));
    let literal =
        format!("file = named_struct('uri', '{stale_key}', 'sha256', X'{sha}', 'size', arrow_cast(3, 'UInt64'))");
    let err = lake.engine.update("t", &[set(&literal)], Some("episode = 'e3'")).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Guard { source: GuardError::TooOld { uri, .. }, .. } if *uri == stale_key),
        "{err}"
    );
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");

    // A fresh object passes the guard, but Lance 14 cannot cast a struct literal to the
    // column's non-null children: refused by Lance, nothing committed (new references come in
    // through append or upsert).
    let fresh = lake.upload("fresh.bin", b"fresh").await;
    let literal = format!(
        "file = named_struct('uri', '{}', 'sha256', arrow_cast(X'{}', 'FixedSizeBinary(32)'), 'size', arrow_cast({}, 'UInt64'))",
        fresh.key,
        hex::encode(fresh.sha256),
        fresh.size
    );
    let err = lake.engine.update("t", &[set(&literal)], Some("episode = 'e3'")).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Lance { .. }), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");
    assert_journal_matches_scans(&lake).await;
    let (complete, candidates, _) = planned(&lake).await;
    assert!(complete && !candidates.contains(&a.key), "{candidates:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_assignments_are_refused_with_what_to_write() {
    let (lake, _, _) = lake_with_rows().await;
    for bad in ["file", "=NULL", "file="] {
        let err = bad.parse::<Assignment>().unwrap_err();
        assert!(err.to_string().contains("COLUMN=EXPRESSION"), "{err}");
    }
    let err = lake.engine.update("t", &[], None).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::InvalidInput(_)), "{err}");
    let err = lake.engine.update("t", &[set("file = NULL"), set("file = file")], None).await.unwrap_err();
    assert!(err.to_string().contains("assigned twice"), "{err}");
    let err = lake.engine.update("t", &[set("nope = 1")], None).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::Lance { .. }), "{err}");
    // A value that is not a DataLocation for a reference column.
    let err = lake.engine.update("t", &[set("file = 'objects/x'")], None).await.unwrap_err();
    assert!(!matches!(err, LanceEngineError::Lance { action: "commit", .. }), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");
}

#[tokio::test(flavor = "multi_thread")]
async fn indexes_built_and_dropped_through_the_engine_are_empty_journal_entries() {
    let (lake, a, b) = lake_with_rows().await;
    let out = lake.engine.create_index("t", "episode", IndexKind::Btree, Some("by_episode"), false).await.unwrap();
    assert_eq!((out.version, out.references_added, out.references_removed), (2, 0, 0));
    let out = lake.engine.create_index("t", "path", IndexKind::Inverted, None, false).await;
    assert!(out.is_err(), "no column `path` in this table");
    let listed = lake.engine.indexes("t").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].name.as_str(), listed[0].columns.clone()), ("by_episode", vec!["episode".to_string()]));
    let out = lake.engine.drop_index("t", "by_episode").await.unwrap();
    assert_eq!(out.version, 3);
    assert!(lake.engine.indexes("t").await.unwrap().is_empty());
    assert!(lake.engine.drop_index("t", "by_episode").await.is_err(), "no such index any more");
    assert_journal_matches_scans(&lake).await;
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(!candidates.contains(&a.key) && !candidates.contains(&b.key));
    assert!("BTREE".parse::<IndexKind>().is_ok());
    assert!("ivf".parse::<IndexKind>().unwrap_err().to_string().contains("btree, bitmap"));
}

/// Every lineage problem of `table` as the engine reports it to GC.
async fn lineage_problems(lake: &TestLake, table: &str) -> Vec<LineageProblem> {
    let tables = lake.engine.tables().await.unwrap();
    let location = tables.tables.iter().find(|l| l.name == table).expect("registered table");
    lake.engine.snapshot(location).await.unwrap().lineage().clone().problems
}

#[tokio::test(flavor = "multi_thread")]
async fn content_preserving_versions_of_another_lance_client_need_no_repair() {
    let (lake, a, b) = lake_with_rows().await;
    let orphan = lake.upload("orphan.bin", b"never referenced").await;
    let uri = lake.engine.dataset_uri("t");

    // An index build, a config change and a compaction by plain Lance.
    let mut ds = Dataset::open(&uri).await.unwrap();
    let params = lance_index::scalar::ScalarIndexParams::default();
    ds.create_index(&["episode"], lance_index::IndexType::BTree, None, &params, false).await.unwrap();
    ds.update_config([("lake.test", "1")]).await.unwrap();
    lake.engine.delete("t", "episode = 'e3'").await.unwrap();
    let mut ds = Dataset::open(&uri).await.unwrap();
    compact_files(&mut ds, CompactionOptions::default(), None).await.unwrap();
    let mut ds = Dataset::open(&uri).await.unwrap();
    ds.drop_index("episode_idx").await.unwrap();
    let latest = ds.version().version;
    assert!(latest >= 6, "the premise: five foreign or engine versions after version 1");

    assert_eq!(lineage_problems(&lake, "t").await, vec![]);
    assert_journal_matches_scans(&lake).await;
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert_eq!(candidates, BTreeSet::from([orphan.key.clone()]));

    // After cleanup only the latest version is retained; still no repair, `a` and `b` live.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(!candidates.contains(&a.key) && !candidates.contains(&b.key));

    // A foreign update changes content: it still needs repair, and GC refuses until then.
    let ds = Dataset::open(&uri).await.unwrap();
    UpdateBuilder::new(Arc::new(ds))
        .update_where("episode = 'e1'")
        .unwrap()
        .set("file", "NULL")
        .unwrap()
        .build()
        .unwrap()
        .execute()
        .await
        .unwrap();
    let updated = Dataset::open(&uri).await.unwrap().version().version;
    assert_eq!(
        lineage_problems(&lake, "t").await,
        vec![LineageProblem::MissingSidecar { table: "t".into(), version: updated }]
    );
    let (complete, candidates, _) = planned(&lake).await;
    assert!(!complete && candidates.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_replaces_rows_by_key_and_journals_both_sides() {
    let (lake, a, b) = lake_with_rows().await;
    let c = lake.upload("c.bin", b"object c replaces a").await;
    let d = lake.upload("d.bin", b"object d, a new episode").await;
    let on = vec!["episode".to_string()];

    let out = lake.engine.upsert("t", &on, reader(vec![batch(&[("e1", Some(&c)), ("e4", Some(&d))])])).await.unwrap();
    assert_eq!((out.version, out.rows, out.references_added, out.references_removed), (2, 2, 2, 1));
    assert_journal_matches_scans(&lake).await;
    // An upsert that changes nothing a reference holds: the same rows again.
    let out = lake.engine.upsert("t", &on, reader(vec![batch(&[("e1", Some(&c))])])).await.unwrap();
    assert_eq!((out.references_added, out.references_removed), (0, 0));
    // A row that loses its reference.
    let out = lake.engine.upsert("t", &on, reader(vec![batch(&[("e2", None)])])).await.unwrap();
    assert_eq!((out.references_added, out.references_removed), (0, 1));
    assert_journal_matches_scans(&lake).await;

    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(candidates.contains(&a.key) && candidates.contains(&b.key), "{candidates:?}");
    assert!(!candidates.contains(&c.key) && !candidates.contains(&d.key), "{candidates:?}");

    // Into a table that does not exist yet: created (an append).
    let out = lake.engine.upsert("fresh", &on, reader(vec![batch(&[("e1", Some(&c))])])).await.unwrap();
    assert_eq!((out.version, out.references_added), (1, 1));
    // No key: refused before anything is written.
    let err = lake.engine.upsert("t", &[], reader(vec![batch(&[("e1", Some(&c))])])).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::InvalidInput(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upsert_of_a_stale_object_is_refused_by_the_guard_and_commits_nothing() {
    let (lake, _, _) = lake_with_rows().await;
    let stale = ManagedObject {
        key: format!(
            "objects/{}/old.bin",
            ulid::Ulid::from_datetime(std::time::SystemTime::now() - Duration::from_secs(2 * 86400))
        ),
        sha256: <sha2::Sha256 as sha2::Digest>::digest(b"old").into(),
        size: 3,
        last_modified: Utc::now(),
    };
    lake.store.put(&stale.key, b"old".to_vec()).await.unwrap();
    let on = vec!["episode".to_string()];
    let err = lake.engine.upsert("t", &on, reader(vec![batch(&[("e1", Some(&stale))])])).await.unwrap_err();
    assert!(
        matches!(&err, LanceEngineError::Guard { source: GuardError::TooOld { uri, .. }, .. } if *uri == stale.key),
        "{err}"
    );
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");
    assert_journal_matches_scans(&lake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reference_columns_added_renamed_and_dropped_are_journaled() {
    let (lake, a, b) = lake_with_rows().await;
    let t1 = lake.upload("t1.png", b"thumbnail of e1").await;
    let t3 = lake.upload("t3.png", b"thumbnail of e3").await;

    // A new reference column joined on the episode (e2 gets no thumbnail).
    let out = lake
        .engine
        .add_columns("t", "episode", keyed_locations("thumb", &[("e1", Some(&t1)), ("e3", Some(&t3))]))
        .await
        .unwrap();
    assert_eq!((out.version, out.references_added, out.references_removed), (2, 2, 0));
    assert_journal_matches_scans(&lake).await;
    // Renaming a reference column keeps its references.
    let out = lake.engine.rename_column("t", "thumb", "image").await.unwrap();
    assert_eq!((out.references_added, out.references_removed), (0, 0));
    // Dropping one removes them.
    let out = lake.engine.drop_columns("t", &["file"]).await.unwrap();
    assert_eq!((out.references_added, out.references_removed), (0, 2));
    assert_journal_matches_scans(&lake).await;

    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let (complete, candidates, problems) = planned(&lake).await;
    assert!(complete, "{problems:?}");
    assert!(candidates.contains(&a.key) && candidates.contains(&b.key), "{candidates:?}");
    assert!(!candidates.contains(&t1.key) && !candidates.contains(&t3.key), "{candidates:?}");

    // A stale object in an added column: the guard refuses when the source ends; nothing committed.
    let stale = ManagedObject {
        key: format!(
            "objects/{}/old.png",
            ulid::Ulid::from_datetime(std::time::SystemTime::now() - Duration::from_secs(2 * 86400))
        ),
        sha256: <sha2::Sha256 as sha2::Digest>::digest(b"old").into(),
        size: 3,
        last_modified: Utc::now(),
    };
    lake.store.put(&stale.key, b"old".to_vec()).await.unwrap();
    let before = lake.engine.versions("t").await.unwrap().len();
    let err =
        lake.engine.add_columns("t", "episode", keyed_locations("mask", &[("e1", Some(&stale))])).await.unwrap_err();
    assert!(matches!(&err, LanceEngineError::Guard { .. }), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), before, "nothing was committed");
    assert_journal_matches_scans(&lake).await;
}
