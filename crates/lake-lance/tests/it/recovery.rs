//! A crashed writer recovers without an operator (`lake_lance::recovery`, `lake_lance::marker`,
//! `docs/safety.md`): every commit the engine makes carries its marker in Lance's transaction;
//! a writer killed right after its Lance commit leaves a version that the next write journals
//! (from its intent, or from its marker once the intent is gone), after which GC plans without
//! repair; another client's version, a marker of another lake and a marked version whose new
//! references fail the publication guard stay lineage problems.

use crate::gc_scenario::dry_run;
use crate::intents::intent_keys;
use crate::support::{batch, new_lake, reader, TestLake};
use chrono::Utc;
use lake_lance::commit::marker::CommitMarker;
use lake_lance::commit::VersionRecovery;
use lake_lance::PieceMode;
use lake_store::failpoint;
use lake_store::writer::ManagedObject;
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;

fn one(episode: &str, o: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    reader(vec![batch(&[(episode, Some(o))])])
}

async fn marker(lake: &TestLake, table: &str, version: u64) -> Option<CommitMarker> {
    let ds = lance::Dataset::open(&lake.engine.dataset_uri(table)).await.unwrap();
    let tx = ds.read_transaction_by_version(version).await.unwrap().unwrap();
    CommitMarker::of(&tx)
}

async fn has_sidecar(lake: &TestLake, table: &str, version: u64) -> bool {
    lake.store.head(&lake_store::layout::sidecar_key(table, version)).await.unwrap().is_some()
}

/// The lineage problems of a dry run at a cutoff of now, by kind (empty when it is complete).
async fn problems(lake: &TestLake) -> Vec<String> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let plan = dry_run(lake, Utc::now(), 10).await;
    assert_eq!(plan.lineage_complete, plan.problems.is_empty());
    plan.problems.iter().map(|p| p.kind.clone()).collect()
}

async fn assert_journal_exact(lake: &TestLake) {
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:#?}");
}

fn root(lake: &TestLake) -> String {
    lake.store.root().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_commit_the_engine_makes_carries_its_marker() {
    let lake = Arc::new(new_lake().await);
    let objects: Vec<ManagedObject> = {
        let mut v = Vec::new();
        for i in 0..4 {
            v.push(lake.upload(&format!("o{i}"), format!("object {i}").as_bytes()).await);
        }
        v
    };
    lake.engine.append("t", one("a", &objects[0])).await.unwrap();
    lake.engine.append("t", one("b", &objects[1])).await.unwrap();
    lake.engine.upsert("t", &["episode".to_string()], one("b", &objects[2])).await.unwrap();
    let piece = lake.engine.prepare_append("t", one("c", &objects[3])).await.unwrap();
    lake.engine.commit_pieces("t", vec![piece], PieceMode::Append).await.unwrap();
    lake.engine.delete("t", "episode = 'a'").await.unwrap();
    lake.engine.drop_columns("t", &["file"]).await.unwrap();
    let expected = ["create", "append", "upsert", "append", "delete", "drop_columns"];
    for (i, operation) in expected.iter().enumerate() {
        let version = i as u64 + 1;
        let m = marker(&lake, "t", version).await.unwrap_or_else(|| panic!("version {version} has no marker"));
        assert_eq!((m.root.as_str(), m.operation.as_str()), (root(&lake).as_str(), *operation), "version {version}");
        assert_eq!(ulid::Ulid::from_string(&m.write_id).map(|_| ()), Ok(()), "version {version}");
    }
    assert_journal_exact(&lake).await;
}

/// The failure point stops the append right after Lance's commit, as a kill there would: the
/// version has no journal entry and its intent stays (its deadline is far off). The next append
/// journals it from its two manifests before it commits (the intent stays until its deadline
/// has passed: the objects it names are referenced anyway); GC then plans without repair, and
/// once the deadline has passed `lake refs recover` resolves the intent as committed.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_stopped_after_its_commit_is_journaled_by_the_next_append() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    lake.engine.append("t", one("a", &a)).await.unwrap();
    let b = lake.upload("b", b"committed, then the writer died").await;
    let stopped = failpoint::scope("commit.after_manifest", lake.engine.append("t", one("b", &b))).await;
    assert!(matches!(stopped, Err(lake_lance::LanceEngineError::Objects(lake_store::StoreError::Injected(_)))));
    assert!(!has_sidecar(&lake, "t", 2).await);
    assert_eq!(intent_keys(&lake).await.len(), 1);
    assert_eq!(problems(&lake).await, ["missing_sidecar"]);
    let c = lake.upload("c", b"the next append").await;
    let next = lake.engine.append("t", one("c", &c)).await.unwrap();
    assert_eq!(next.version, 3);
    assert!(has_sidecar(&lake, "t", 2).await);
    assert!(problems(&lake).await.is_empty());
    let planned = crate::intents::gc_now(&lake).await;
    assert!(![&a, &b, &c].iter().any(|o| planned.contains(&o.key)), "{planned:?}");
    assert_journal_exact(&lake).await;
    let later = crate::support::engine_later(&lake, crate::support::LATER);
    let report = later.recover_writes(None).await.unwrap();
    assert_eq!(report.intents.len(), 1, "{report:?}");
    assert_eq!(report.intents[0].resolution, lake_lance::commit::Resolution::Committed { version: 2 });
    assert!(intent_keys(&lake).await.is_empty());
    assert_journal_exact(&lake).await;
}

/// The same stop, with the intent gone too (removed by hand, or a restored backup without it):
/// the version's marker proves it the engine's, and its new reference passes the guard at the
/// time its manifest was written: `recover_writes` journals it from the two manifests.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_whose_intent_is_gone_is_journaled_from_its_marker() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    lake.engine.append("t", one("a", &a)).await.unwrap();
    let b = lake.upload("b", b"committed, then the writer and its intent were lost").await;
    let _ = failpoint::scope("commit.after_manifest", lake.engine.append("t", one("b", &b))).await;
    for key in intent_keys(&lake).await {
        lake.store.delete(&key).await.unwrap();
    }
    assert_eq!(problems(&lake).await, ["missing_sidecar"]);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.versions.len(), 1, "{report:?}");
    assert_eq!(
        report.versions[0].outcome,
        VersionRecovery::Journaled { operation: "append".into(), added: 1, removed: 0 }
    );
    assert!(problems(&lake).await.is_empty());
    assert_journal_exact(&lake).await;
    // Recovering again finds nothing to do.
    assert!(lake.engine.recover_writes(None).await.unwrap().versions.is_empty());
}

/// A delete writes no intent: stopped right after its commit (its marked version has no journal
/// entry), the next write journals it from its marker.
#[tokio::test(flavor = "multi_thread")]
async fn a_delete_stopped_after_its_commit_is_journaled_by_the_next_write() {
    let lake = new_lake().await;
    let (a, b) = (lake.upload("a", b"a").await, lake.upload("b", b"b").await);
    lake.engine.append("t", reader(vec![batch(&[("a", Some(&a)), ("b", Some(&b))])])).await.unwrap();
    let stopped = failpoint::scope("commit.after_manifest", lake.engine.delete("t", "episode = 'a'")).await;
    assert!(matches!(stopped, Err(lake_lance::LanceEngineError::Objects(lake_store::StoreError::Injected(_)))));
    assert!(intent_keys(&lake).await.is_empty(), "a delete writes no intent");
    assert_eq!(problems(&lake).await, ["missing_sidecar"]);
    let c = lake.upload("c", b"c").await;
    assert_eq!(lake.engine.append("t", one("c", &c)).await.unwrap().version, 3);
    let entry = lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().unwrap().unwrap();
    assert_eq!((entry.added.len(), entry.removed.len()), (0, 1));
    assert_eq!(entry.removed[0].identity.uri, a.key);
    assert!(problems(&lake).await.is_empty());
    assert_journal_exact(&lake).await;
}

/// An append by another Lance client, committed with `properties` (none, or a forged marker).
async fn foreign_append(lake: &TestLake, o: &ManagedObject, properties: Option<CommitMarker>) {
    let uri = lake.engine.dataset_uri("t");
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let mut tx = InsertBuilder::new(uri.as_str())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[("x", Some(o))])])
        .await
        .unwrap();
    if let Some(m) = properties {
        m.set_on(&mut tx);
    }
    CommitBuilder::new(uri.as_str()).with_skip_auto_cleanup(true).execute(tx).await.unwrap();
}

/// An object under a managed key minted `age` ago (as an upload that long ago would have).
async fn object_minted_ago(lake: &TestLake, age: Duration) -> ManagedObject {
    let minted = std::time::SystemTime::now() - age;
    let key = format!("objects/{}/old", ulid::Ulid::from_datetime(minted));
    let bytes = b"uploaded long ago".to_vec();
    lake.store.put(&key, bytes.clone()).await.unwrap();
    ManagedObject {
        key,
        sha256: sha2::Sha256::digest(&bytes).into(),
        size: bytes.len() as u64,
        last_modified: Utc::now(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn another_clients_version_stays_a_lineage_problem_with_or_without_a_forged_marker() {
    for case in ["unmarked", "another lake", "old reference"] {
        let lake = new_lake().await;
        let a = lake.upload("a", b"a").await;
        lake.engine.append("t", one("a", &a)).await.unwrap();
        let (object, properties) = match case {
            "unmarked" => (lake.upload("x", b"x").await, None),
            "another lake" => (
                lake.upload("x", b"x").await,
                Some(CommitMarker::new("file:///elsewhere", "append", &ulid::Ulid::new().to_string())),
            ),
            // The lake's floor is 1 h: a reference to an object minted 2 h ago fails the guard.
            _ => (
                object_minted_ago(&lake, Duration::from_secs(7200)).await,
                Some(CommitMarker::new(&root(&lake), "append", &ulid::Ulid::new().to_string())),
            ),
        };
        foreign_append(&lake, &object, properties).await;
        let report = lake.engine.recover_writes(None).await.unwrap();
        assert_eq!(report.versions.len(), 1, "{case}: {report:?}");
        let VersionRecovery::Left { reason } = &report.versions[0].outcome else {
            panic!("{case}: journaled: {report:?}")
        };
        let expected = match case {
            "unmarked" => "carries no lake marker",
            "another lake" => "names the lake at file:///elsewhere",
            _ => "not provably safe",
        };
        assert!(reason.contains(expected) && reason.contains("`refs repair`"), "{case}: {reason}");
        // The next write leaves it too; GC still refuses.
        let c = lake.upload("c", b"c").await;
        assert_eq!(lake.engine.append("t", one("c", &c)).await.unwrap().version, 3);
        assert!(!has_sidecar(&lake, "t", 2).await, "{case}");
        assert_eq!(problems(&lake).await, ["missing_sidecar"], "{case}");
    }
}

/// Not a test: a writer that appends one new object after another to table `t` of the lake at
/// `LAKE_CHILD_ROOT` until it is killed (`a_writer_killed_at_any_moment_is_recovered_by_the_next_append`).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "child-process helper of a_writer_killed_at_any_moment_is_recovered_by_the_next_append"]
async fn child_process_helper_append_until_killed() {
    let root = std::env::var("LAKE_CHILD_ROOT").expect("run only as a child process");
    let store = lake_store::store::LakeStore::open(&root).unwrap();
    let engine = lake_lance::LanceEngine::new(store.clone());
    let writer = lake_store::writer::ManagedObjectWriter::new(store);
    for i in 0u64.. {
        let o = writer.upload(&format!("w{i}"), format!("written by the child, {i}").as_bytes()).await.unwrap();
        engine.append("t", one(&format!("w{i}"), &o)).await.unwrap();
        println!("appended {i}");
    }
}

/// A real kill (SIGKILL) of a writer process, in a loop of trials at varied moments: whatever
/// the moment (an upload, the data files, the intent, right after Lance's commit, the sidecar,
/// the registry), the next append in this process succeeds and journals every version before
/// its own, GC plans without repair, and the journal equals full scans. The failure point test above pins the window after the commit;
/// this one counts how often the kills fell in it.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_killed_at_any_moment_is_recovered_by_the_next_append() {
    let lake = new_lake().await;
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", one("first", &first)).await.unwrap();
    let mut unjournaled_at_kill = 0;
    for trial in 0..8u64 {
        let before = lake.engine.versions("t").await.unwrap().len();
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "recovery::child_process_helper_append_until_killed", "--include-ignored", "--quiet"])
            .env("LAKE_CHILD_ROOT", root(&lake))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Let the child commit at least one version, then kill it a varied moment later.
        while lake.engine.versions("t").await.unwrap().len() == before {
            assert!(child.try_wait().unwrap().is_none(), "the child writer exited on its own");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(trial * 13 % 50)).await;
        child.kill().unwrap();
        child.wait().unwrap();
        let versions = lake.engine.versions("t").await.unwrap();
        let latest = versions.iter().map(|v| v.version).max().unwrap();
        if !has_sidecar(&lake, "t", latest).await {
            unjournaled_at_kill += 1;
        }
        let next = lake.upload(&format!("n{trial}"), format!("next {trial}").as_bytes()).await;
        let out = lake.engine.append("t", one(&format!("n{trial}"), &next)).await.unwrap();
        assert!(out.version > latest, "trial {trial}");
        for version in 1..=out.version {
            assert!(has_sidecar(&lake, "t", version).await, "trial {trial}: version {version} is not journaled");
        }
        assert!(problems(&lake).await.is_empty(), "trial {trial}");
    }
    assert_journal_exact(&lake).await;
    println!("killed writers: {unjournaled_at_kill} of 8 kills left the latest version without its journal entry");
}

/// Another client's content-preserving version (a configuration change) is an implied empty
/// entry for GC already (`lake_lance::foreign`): recovery neither journals nor reports it.
#[tokio::test(flavor = "multi_thread")]
async fn another_clients_content_preserving_version_is_neither_journaled_nor_reported() {
    let lake = new_lake().await;
    let a = lake.upload("a", b"a").await;
    lake.engine.append("t", one("a", &a)).await.unwrap();
    let mut other = lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    other.update_config([("owner", "another client")]).await.unwrap();
    assert!(lake.engine.recover_writes(None).await.unwrap().versions.is_empty());
    assert!(problems(&lake).await.is_empty());
    assert!(!has_sidecar(&lake, "t", 2).await);
}
