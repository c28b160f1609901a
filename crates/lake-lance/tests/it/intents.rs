//! Commits reported as failed that land later (issue 22, kind 2): write intents keep their
//! objects from GC until resolution finds the version (and journals it) or proves it can no
//! longer land.
//!
//! Every test holds manifest writes with [`ManifestHold`] (a Lance object-store wrapper; the
//! write goes on in its own task while its caller gets an error at once, as after a lost
//! response) and releases them explicitly: no test races the clock. The deadline is 5 s, which
//! no commit's preparation comes near; a resolver waits it out before fencing. Plans are made at
//! a cutoff of "now", so every object a retained version or an intent does not protect is a
//! candidate.

use crate::hold::{HoldWrapper, ManifestHold, Mode};
use crate::support::{apply_fresh, batch, keyed_locations, new_lake, reader, unchecked_plan_now, TestLake};
use crate::truth::{planned_objects, referenced};
use lake_lance::resolve::Resolution;
use lake_lance::update::Assignment;
use lake_lance::{LanceEngine, LanceEngineError};
use lake_objects::writer::ManagedObject;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The deadline the engine gives every commit in these tests: far longer than any commit takes
/// to issue its manifest write, on any machine.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// A local lake (policy floor 1 h: the guard never refuses here) whose engine holds manifest
/// writes on demand and gives commits [`DEADLINE`].
pub async fn held_lake() -> (TestLake, Arc<ManifestHold>) {
    let mut lake = new_lake().await;
    let hold = ManifestHold::new();
    lake.engine = held_engine(&lake, &hold);
    (lake, hold)
}

/// The engine of `lake` holding manifest writes through `hold`.
pub fn held_engine(lake: &TestLake, hold: &Arc<ManifestHold>) -> LanceEngine {
    LanceEngine::new(lake.store.clone())
        .with_memory_budget(2048)
        .with_object_store_wrapper(Arc::new(HoldWrapper(hold.clone())))
        .with_commit_deadline(DEADLINE)
}

/// A dry run at a cutoff of now, then an apply of it when it has candidates; returns the
/// objects it planned.
pub async fn gc_now(lake: &TestLake) -> BTreeSet<String> {
    let (plan, _) = unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    let planned = planned_objects(&plan);
    if plan.lineage_complete && !plan.candidates.is_empty() {
        apply_fresh(lake, &plan, &Default::default()).await.unwrap();
    }
    planned
}

/// Every object a retained version of `tables` references exists, and so does every object in
/// `also` (named by a pending intent).
pub async fn assert_nothing_referenced_is_missing(lake: &TestLake, tables: &[&str], also: &[&ManagedObject]) {
    let mut keys: BTreeSet<String> = also.iter().map(|o| o.key.clone()).collect();
    for t in tables {
        keys.extend(referenced(lake, t).await);
    }
    for key in keys.iter().filter(|k| k.starts_with("objects/")) {
        assert!(lake.store.head(key).await.unwrap().is_some(), "{key} is referenced (or protected) but was deleted");
    }
}

/// The lake's intents (keys).
pub async fn intent_keys(lake: &TestLake) -> Vec<String> {
    lake_objects::intents::list(&lake.store, None).await.unwrap().0.into_iter().map(|i| i.key).collect()
}

fn one(lake_key: &str, o: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    reader(vec![batch(&[(lake_key, Some(o))])])
}

/// The input, locally: an append whose manifest write is held past its deadline (and
/// whose writer's fence is held too, so the writer cannot learn the outcome). The writer says
/// the version may still land and names the intent; GC plans and applies while the write is
/// held and deletes nothing the version will reference; the write lands; `lake refs recover`
/// journals it; the lineage is complete and every referenced object exists.
#[tokio::test(flavor = "multi_thread")]
async fn an_append_held_past_its_deadline_lands_later_and_gc_keeps_its_objects() {
    let (lake, hold) = held_lake().await;
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", one("e0", &first)).await.unwrap();
    let late = lake.upload("late", b"a commit that lands late").await;

    hold.set(Mode::FailCaller);
    let outcome = lake.engine.append("t", one("e1", &late)).await;
    // The writer's commit failed after its manifest write was sent; it waited for its deadline,
    // and its fence was held as well.
    let err = outcome.unwrap_err();
    let intent = match &err {
        LanceEngineError::CommitUncertain { intent, .. } => intent.clone(),
        other => panic!("expected an uncertain commit, got {other}"),
    };
    let text = err.to_string();
    assert!(text.contains("may still land") && text.contains(&intent) && text.contains("lake refs recover"), "{text}");
    assert_eq!(intent_keys(&lake).await, vec![intent.clone()]);
    assert_eq!(hold.held().len(), 2, "the append's manifest and the writer's fence are held");

    // GC while the write is held: the intent keeps the late object.
    let planned = gc_now(&lake).await;
    assert!(!planned.contains(&late.key), "the held commit's object was planned");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[&first, &late]).await;
    // The log of the write is GC's own garbage only once no intent names it.
    let (plan, stats) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.candidates.keys().unwrap().iter().all(|k| !k.contains("object_ref_logs")), "the intent's log was planned");
    assert_eq!(stats.write_intents.len(), 1, "the dry run reports the intent");
    assert_eq!(stats.write_intents[0].key, intent);

    // The held write lands (version 2); the fence's, for the same slot, is refused.
    assert_eq!(hold.release_all().await, vec![true, false]);
    hold.set(Mode::Off);
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 2);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.intents.len(), 1);
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 2 });
    assert!(intent_keys(&lake).await.is_empty());

    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&late.key));
    gc_now(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(referenced(&lake, "t").await.contains(&late.key));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// The writer's own resolution: its manifest write is held past the deadline, then the fence
/// (not held) takes the version slot after the deadline, which proves the held write can no
/// longer land. The writer says "not committed"; its intent and log are gone; the released
/// write is refused; the table never references the object, which becomes an orphan.
#[tokio::test(flavor = "multi_thread")]
async fn a_timed_out_writer_fences_and_reports_not_committed() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let lost = lake.upload("lost", b"never committed").await;
    hold.set(Mode::FailCaller);
    let engine = &lake.engine;
    let (outcome, ()) = tokio::join!(engine.append("t", one("e1", &lost)), async {
        hold.wait_held(1).await;
        hold.set(Mode::Off);
    });
    match outcome {
        Err(LanceEngineError::NotCommitted { proof, .. }) => assert_eq!(proof, 2),
        other => panic!("expected not committed, got {other:?}"),
    }
    assert!(intent_keys(&lake).await.is_empty());
    assert_eq!(hold.release_all().await, vec![false], "the held write finds its slot taken");
    let logs = lake.store.list_all("tables/t.lance/_lake/object_ref_logs/").await.unwrap();
    assert_eq!(logs.len(), 1, "only the first append's log is left: {logs:?}");
    assert!(!referenced(&lake, "t").await.contains(&lost.key));
    assert!(gc_now(&lake).await.contains(&lost.key), "the abandoned write's object is an orphan");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// The writer's commit lands late while the writer waits for its deadline: whichever of the
/// writer and a second resolver (`lake refs recover`, racing it) resolves first journals the
/// version; the other finds it journaled. The writer reports success with the version.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_resolver_racing_the_writer_journals_the_late_version_once() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let late = lake.upload("late", b"late").await;
    hold.set(Mode::FailCaller);
    let engine = &lake.engine;
    let (outcome, recovered) = tokio::join!(engine.append("t", one("e1", &late)), async {
        hold.wait_held(1).await;
        hold.set(Mode::Off);
        assert_eq!(hold.release(0).await, true, "the held write lands as version 2");
        engine.recover_writes(Some("t")).await.unwrap()
    });
    let outcome = outcome.unwrap();
    assert_eq!(outcome.version, 2);
    for r in &recovered.intents {
        assert_eq!(r.resolution, Resolution::Committed { version: 2 });
    }
    assert!(intent_keys(&lake).await.is_empty());
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&late.key));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// A writer killed after writing its intent (its task dropped while the manifest write is held):
/// GC keeps the objects; once the write lands, recovery journals it. A second killed writer
/// whose write never lands is proven abandoned by recovery's fence.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_killed_after_its_intent_is_recovered_either_way() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    for lands in [true, false] {
        let object = lake.upload("killed", format!("killed writer, lands {lands}").as_bytes()).await;
        hold.set(Mode::FailCaller);
        let writer = {
            let (lake, object) = (lake.clone(), object.clone());
            tokio::spawn(async move { lake.engine.append("t", one("killed", &object)).await })
        };
        hold.wait_held(1).await;
        writer.abort();
        assert!(writer.await.unwrap_err().is_cancelled());
        assert_eq!(intent_keys(&lake).await.len(), 1, "the killed writer's intent stays");
        assert!(!gc_now(&lake).await.contains(&object.key));
        assert_nothing_referenced_is_missing(&lake, &["t"], &[&object]).await;
        hold.set(Mode::Off);
        let latest = lake.engine.versions("t").await.unwrap().len() as u64;
        if lands {
            assert_eq!(hold.release_all().await, vec![true]);
        }
        let report = lake.engine.recover_writes(None).await.unwrap();
        let expected = if lands {
            Resolution::Committed { version: latest + 1 }
        } else {
            Resolution::Abandoned { proof: latest + 1 }
        };
        assert_eq!(report.intents[0].resolution, expected);
        if !lands {
            assert_eq!(hold.release_all().await, vec![false]);
        }
        assert!(intent_keys(&lake).await.is_empty());
        assert_eq!(referenced(&lake, "t").await.contains(&object.key), lands);
        gc_now(&lake).await;
        assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
        assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    }
}

/// Runs `write` with manifest writes held until the writer gave up (its fence held too), runs
/// GC meanwhile, releases the write, recovers, and checks the version is journaled and nothing
/// referenced is missing.
async fn held_write_lands_after_gc(
    lake: &TestLake,
    hold: &ManifestHold,
    table: &str,
    protected: &[&ManagedObject],
    write: impl std::future::Future<Output = Result<(), LanceEngineError>>,
) {
    hold.set(Mode::FailCaller);
    let err = write.await.unwrap_err();
    assert!(matches!(err, LanceEngineError::CommitUncertain { .. }), "{err}");
    let planned = gc_now(lake).await;
    for o in protected {
        assert!(!planned.contains(&o.key), "{} was planned while its commit may land", o.key);
    }
    assert_nothing_referenced_is_missing(lake, &[table], protected).await;
    let landed = hold.release_all().await;
    hold.set(Mode::Off);
    assert_eq!(landed.first(), Some(&true), "the held write lands first");
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert!(matches!(report.intents[0].resolution, Resolution::Committed { .. }), "{report:?}");
    let (plan, _) = unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    gc_now(lake).await;
    let now = referenced(lake, table).await;
    for o in protected {
        assert!(now.contains(&o.key), "{} is not in the landed version", o.key);
    }
    assert_nothing_referenced_is_missing(lake, &[table], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// An upsert, an update and columns added, each held past its deadline: the same.
#[tokio::test(flavor = "multi_thread")]
async fn upserts_updates_and_new_columns_held_past_their_deadline_keep_their_objects() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();

    let upserted = lake.upload("upserted", b"upserted").await;
    let on = vec!["episode".to_string()];
    held_write_lands_after_gc(&lake, &hold, "t", &[&upserted], async {
        lake.engine.upsert("t", &on, one("e0", &upserted)).await.map(|_| ())
    })
    .await;

    // An update adds no object its rows did not reference (a literal DataLocation cannot be
    // written in Lance SQL: the cast to the column's non-null children is refused), so its
    // intent names nothing; its late version is still journaled exactly (from the manifests).
    let set: Assignment = "file = NULL".parse().unwrap();
    held_write_lands_after_gc(&lake, &hold, "t", &[], async {
        lake.engine.update("t", &[set], Some("episode = 'e0'")).await.map(|_| ())
    })
    .await;

    let thumb = lake.upload("thumb", b"thumb").await;
    held_write_lands_after_gc(&lake, &hold, "t", &[&thumb], async {
        lake.engine.add_columns("t", "episode", keyed_locations("thumb", &[("e0", Some(&thumb))])).await.map(|_| ())
    })
    .await;
}

/// A create of a new table whose version 1 is held past the deadline: no version can prove it
/// abandoned (no other writer can take version 1 without creating the table), so it stays
/// pending and keeps its object; when it lands, recovery journals and registers the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_create_held_past_its_deadline_is_pending_until_it_lands() {
    let (lake, hold) = held_lake().await;
    let created = lake.upload("created", b"first row of a new table").await;
    hold.set(Mode::FailCaller);
    let err = lake.engine.append("new", one("e0", &created)).await.unwrap_err();
    match &err {
        LanceEngineError::CommitUncertain { reason, .. } => assert!(reason.contains("no version"), "{err}"),
        other => panic!("expected an uncertain commit, got {other}"),
    }
    assert!(!gc_now(&lake).await.contains(&created.key));
    assert!(lake.store.head(&created.key).await.unwrap().is_some());
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert!(matches!(report.intents[0].resolution, Resolution::Pending { .. }), "{report:?}");
    assert_eq!(hold.release_all().await, vec![true]);
    hold.set(Mode::Off);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 1 });
    assert_eq!(lake_objects::registry::tables(&lake.store).await.unwrap(), vec!["new".to_string()]);
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&created.key));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// `lake cleanup` resolves a table's intents past their deadline before it removes versions:
/// a commit that landed late is journaled first (its transaction, which identifies it, is still
/// there), so cleaning up its version afterwards loses nothing; while an intent cannot be
/// resolved (its fence is held), cleanup refuses and cleans nothing.
#[tokio::test(flavor = "multi_thread")]
async fn cleanup_resolves_late_commits_first_and_refuses_while_one_is_undecided() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let late = lake.upload("late", b"late").await;
    hold.set(Mode::FailCaller);
    assert!(matches!(lake.engine.append("t", one("e1", &late)).await, Err(LanceEngineError::CommitUncertain { .. })));
    // Undecided: cleanup's own fence is held as well.
    let err = lake.engine.cleanup("t", Duration::ZERO).await.unwrap_err();
    assert!(err.to_string().contains("lake refs recover"), "{err}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was cleaned up");
    // The late write lands; the fences find their slots taken.
    let landed = hold.release_all().await;
    hold.set(Mode::Off);
    assert_eq!(landed.iter().filter(|l| **l).count(), 1, "{landed:?}");
    // Another version on top, so that cleanup removes the late one.
    lake.engine.append("t", one("e2", &lake.upload("after", b"after").await)).await.unwrap();
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert!(cleaned.old_versions >= 2, "{cleaned:?}");
    assert!(intent_keys(&lake).await.is_empty(), "cleanup resolved the intent");
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&late.key), "the late row is in the latest version");
    gc_now(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}
