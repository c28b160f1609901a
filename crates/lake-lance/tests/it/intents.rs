//! Commits reported as failed that land later: write intents keep their
//! objects from GC until resolution finds the version (and journals it) or proves it can no
//! longer land.
//!
//! Every test holds manifest writes with [`ManifestHold`] (a Lance object-store wrapper; the
//! write goes on in its own task while its caller gets an error at once, as after a lost
//! response) and releases them explicitly: no test races the clock. The deadline is an hour, so
//! no intent becomes due while a test runs; a writer whose commit failed revokes its own intent
//! and fences at once, and a resolver that must find another's intent due reads a clock set
//! later (`support::engine_later`). Plans are made at a cutoff of "now", so every object a
//! retained version or an intent does not protect is a candidate.
//!
//! Size: ten scenario tests, each a whole script (hold a write, GC, release, recover, check) of 30
//! to 80 lines, and the hold helpers `operations_model.rs` reuses (`delayed_commit_step`); one file
//! because they test one issue kind and share those helpers.

use crate::hold::{HoldWrapper, ManifestHold, Mode};
use crate::support::{apply_fresh, batch, keyed_locations, new_lake, reader, unchecked_plan_now, TestLake};
use crate::truth::{planned_objects, referenced};
use lake_lance::commit::Resolution;
use lake_lance::update::Assignment;
use lake_lance::{LanceEngine, LanceEngineError};
use lake_store::writer::ManagedObject;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// The deadline the engine gives every commit in these tests: an hour, so that no intent becomes
/// due while a test runs, however slow the machine; a resolver that must find one due reads a
/// store clock set later (`support::engine_later`).
pub(crate) const DEADLINE: Duration = Duration::from_secs(3600);

/// A local lake (policy floor 1 h: the guard never refuses here) whose engine holds manifest
/// writes on demand and gives commits [`DEADLINE`].
pub(crate) async fn held_lake() -> (TestLake, Arc<ManifestHold>) {
    let mut lake = new_lake().await;
    let hold = ManifestHold::new();
    lake.engine = held_engine(&lake, &hold);
    (lake, hold)
}

/// The engine of `lake` holding manifest writes through `hold`.
pub(crate) fn held_engine(lake: &TestLake, hold: &Arc<ManifestHold>) -> LanceEngine {
    LanceEngine::new(lake.store.clone())
        .with_memory_budget(2048)
        .with_object_store_wrapper(Arc::new(HoldWrapper(hold.clone())))
        .with_commit_deadline(DEADLINE)
}

/// A dry run at a cutoff of now, then an apply of it when it has candidates; returns the
/// objects it planned.
///
/// An apply that meets a version committed after the plan whose journal entry is not written yet
/// (a concurrent writer's fence, between its commit and its entry) refuses to go on, as it
/// must: that is no failure here (the callers check that nothing referenced is missing).
pub(crate) async fn gc_now(lake: &TestLake) -> BTreeSet<String> {
    let (plan, _) = unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    let planned = planned_objects(&plan);
    if plan.lineage_complete && !plan.candidates.is_empty() {
        match apply_fresh(lake, &plan, &Default::default()).await {
            Ok(_) | Err(lake_gc::GcError::LineageIncomplete { .. }) => {}
            Err(e) => panic!("apply failed: {e}"),
        }
    }
    planned
}

/// Every object a retained version of `tables` references exists, and so does every object in
/// `also` (named by a pending intent).
pub(crate) async fn assert_nothing_referenced_is_missing(lake: &TestLake, tables: &[&str], also: &[&ManagedObject]) {
    let mut keys: BTreeSet<String> = also.iter().map(|o| o.key.clone()).collect();
    for t in tables {
        keys.extend(referenced(lake, t).await);
    }
    for key in keys.iter().filter(|k| k.starts_with("objects/")) {
        assert!(lake.store.head(key).await.unwrap().is_some(), "{key} is referenced (or protected) but was deleted");
    }
}

/// The lake's intents (keys).
pub(crate) async fn intent_keys(lake: &TestLake) -> Vec<String> {
    lake_store::intents::list(&lake.store, None).await.unwrap().0.into_iter().map(|i| i.key).collect()
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
    assert!(text.contains("may still land") && text.contains(&intent) && text.contains("`refs recover`"), "{text}");
    assert_eq!(intent_keys(&lake).await, vec![intent.clone()]);
    assert_eq!(hold.held().len(), 2, "the append's manifest and the writer's fence are held");

    // GC while the write is held: the intent keeps the late object.
    let planned = gc_now(&lake).await;
    assert!(!planned.contains(&late.key), "the held commit's object was planned");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[&first, &late]).await;
    // The log of the write is GC's own garbage only once no intent names it.
    let (plan, stats) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(
        plan.candidates.keys().unwrap().iter().all(|k| !k.contains("object_ref_logs")),
        "the intent's log was planned"
    );
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
    // Only the append's manifest write is held: the writer revokes its own intent at once and
    // its fence takes the slot.
    hold.set(Mode::FailCallerOnce);
    let outcome = lake.engine.append("t", one("e1", &lost)).await;
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

/// The writer's commit lands late, after its answer was lost and before its fence (held): a
/// second resolver (`lake refs recover`, racing the writer) fences first and journals the
/// version from its manifests; the writer's fence then finds its slot taken, lands after, and
/// the writer finds the version journaled and reports success with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_resolver_racing_the_writer_journals_the_late_version_once() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let late = lake.upload("late", b"late").await;
    hold.set(Mode::FailCaller);
    let engine = &lake.engine;
    let (outcome, recovered) = tokio::join!(engine.append("t", one("e1", &late)), async {
        // The append's manifest write, then its writer's fence.
        hold.wait_held(2).await;
        hold.set(Mode::Off);
        assert!(hold.release(0).await, "the held write lands as version 2");
        let recovered = engine.recover_writes(Some("t")).await.unwrap();
        assert_eq!(hold.release_all().await, vec![false], "the writer's fence finds slot 2 taken");
        recovered
    });
    for r in &recovered.intents {
        assert_eq!(r.resolution, Resolution::Committed { version: 2 });
    }
    match outcome {
        Ok(o) => assert_eq!(o.version, 2),
        // The writer's fence failed (its held write was refused): it cannot tell, and says so.
        Err(LanceEngineError::CommitUncertain { .. }) => {}
        other => panic!("{other:?}"),
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
        // An operator's `lake refs recover` once the writer's deadline has passed.
        let report = crate::support::engine_later(&lake, crate::support::LATER).recover_writes(None).await.unwrap();
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

/// A create of a new table whose version 1 is held: its writer revokes its own intent and fences
/// the create with an empty version 1 (held too: the writer reports the outcome unknown). When
/// the held create lands first it takes version 1 and the fences find the slot taken;
/// `lake refs recover` then fences with a config change and journals version 1. When only the
/// create is held, the writer's fence takes version 1: the create can never land, the write is
/// reported not committed, and the table exists, empty. No create intent stays pending for ever
/// (the fourth adversarial run: a killed first ingest stopped every GC of the lake).
#[tokio::test(flavor = "multi_thread")]
async fn a_held_create_is_fenced_by_an_empty_first_version_or_lands() {
    let (lake, hold) = held_lake().await;
    let created = lake.upload("created", b"first row of a new table").await;
    hold.set(Mode::FailCaller);
    let err = lake.engine.append("new", one("e0", &created)).await.unwrap_err();
    assert!(matches!(&err, LanceEngineError::CommitUncertain { reason, .. } if reason.contains("fence")), "{err}");
    assert!(!gc_now(&lake).await.contains(&created.key));
    assert!(lake.store.head(&created.key).await.unwrap().is_some());
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert!(matches!(report.intents[0].resolution, Resolution::Pending { .. }), "{report:?}");
    // The create, then the writer's and the resolver's fences (all for version 1).
    assert_eq!(hold.release_all().await, vec![true, false, false]);
    hold.set(Mode::Off);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 1 });
    assert_eq!(lake_store::registry::tables(&lake.store).await.unwrap(), vec!["new".to_string()]);
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&created.key));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());

    // Only the create held: the writer's fence, an empty version 1, proves it cannot land.
    let lost = lake.upload("lost", b"a create that never lands").await;
    hold.set(Mode::FailCallerOnce);
    let err = lake.engine.append("other", one("e0", &lost)).await.unwrap_err();
    assert!(matches!(err, LanceEngineError::NotCommitted { proof: 1, .. }), "{err}");
    assert_eq!(hold.release_all().await, vec![false], "version 1 is the fence's");
    assert!(intent_keys(&lake).await.is_empty());
    let ds = lance::Dataset::open(&lake.engine.dataset_uri("other")).await.unwrap();
    assert_eq!((ds.version().version, ds.count_rows(None).await.unwrap()), (1, 0), "an empty first version");
    assert_eq!(ds.schema().field("file").map(|f| f.name.clone()), Some("file".to_string()), "the create's schema");
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(planned_objects(&plan).contains(&lost.key), "the lost create's object is an orphan");
    // The retry appends to the empty table.
    assert_eq!(lake.engine.append("other", one("e0", &lost)).await.unwrap().version, 2);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// `lake cleanup` resolves the table's intents that are revoked or past their deadline before
/// it removes versions; one it cannot resolve yet (its fence is held) does not stop it: nothing
/// it removes decides a resolution any more (entries are computed from what the versions are,
/// and a version that is gone is not retained). Once the held write lands, the next write
/// journals it and ends the intent with its own commit as the fence.
#[tokio::test(flavor = "multi_thread")]
async fn cleanup_resolves_what_it_can_and_is_never_blocked_by_an_intent() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let late = lake.upload("late", b"late").await;
    hold.set(Mode::FailCaller);
    assert!(matches!(lake.engine.append("t", one("e1", &late)).await, Err(LanceEngineError::CommitUncertain { .. })));
    // Undecided (cleanup's own fence is held as well): cleanup still runs.
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(cleaned.old_versions, 0, "{cleaned:?}");
    assert_eq!(intent_keys(&lake).await.len(), 1, "the revoked intent stays until it is decided");
    // The late write lands; the fences find their slot taken.
    let landed = hold.release_all().await;
    hold.set(Mode::Off);
    assert_eq!(landed.iter().filter(|l| **l).count(), 1, "{landed:?}");
    // The next append journals the late version and ends the revoked intent with its commit.
    lake.engine.append("t", one("e2", &lake.upload("after", b"after").await)).await.unwrap();
    assert!(intent_keys(&lake).await.is_empty(), "the next write resolved the intent");
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(cleaned.old_versions, 2, "{cleaned:?}");
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&late.key), "the late row is in the latest version");
    gc_now(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// Found by an earlier attack pass: a writer killed right after Lance committed (before its
/// journal entry), then another client's version on top, then `lake cleanup --older-than 0s`
/// while the killed write's intent was within its deadline: cleanup removed the killed version,
/// whose entry could then never be written. Cleanup now journals every version it may from its
/// manifests first (the killed version is this lake's), then removes versions: the journal
/// stays whole. The intent, resolved later, says its version was cleaned up.
#[tokio::test(flavor = "multi_thread")]
async fn cleanup_journals_a_killed_writers_version_before_removing_it() {
    let (lake, _hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let killed = lake.upload("killed", b"killed after its commit").await;
    let crashed =
        lake_store::failpoint::scope("commit.after_manifest", lake.engine.append("t", one("e1", &killed))).await;
    assert!(crashed.unwrap_err().to_string().contains("commit.after_manifest"));
    assert_eq!(intent_keys(&lake).await.len(), 1, "the killed writer's intent stays");
    let mut other = lance::Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    other.update_config([("owner", "another client")]).await.unwrap();
    let cleaned = lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    assert_eq!(cleaned.old_versions, 2, "{cleaned:?}");
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&killed.key), "the killed writer's row is retained");
    let later = crate::support::engine_later(&lake, crate::support::LATER);
    let report = later.recover_writes(Some("t")).await.unwrap();
    assert!(
        matches!(&report.intents[0].resolution, Resolution::CleanedUp { versions, .. } if versions.contains(&2)),
        "{report:?}"
    );
    gc_now(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// One step of the model tests (`operations_model`): an append of `rows` referencing the fresh
/// object `fresh`, whose manifest write is held past the writer's deadline, interleaved with GC
/// runs (plan and apply at a cutoff of now), checking after every one that no object a retained
/// version references, or a pending intent names, is missing. `variant` picks the delay:
/// 0, the held write is released while the writer waits for its deadline (it lands, or the
/// writer's fence takes its slot first: either is reported truthfully); 1, the writer's fence
/// proves it abandoned; 2, the writer gives up (its fence held too) and the write lands after
/// GC ran, then `lake refs recover` journals it. Returns a description of what happened.
pub(crate) async fn delayed_commit_step(
    lake: &TestLake,
    hold: &ManifestHold,
    table: &str,
    rows: Box<dyn arrow_array::RecordBatchReader + Send>,
    fresh: &ManagedObject,
    variant: u64,
) -> String {
    // `pending`: the fresh object is still protected (an intent names it, or it landed).
    let check = |stage: &'static str, pending: bool| async move {
        gc_now(lake).await;
        let also: Vec<&ManagedObject> = if pending { vec![fresh] } else { Vec::new() };
        assert_nothing_referenced_is_missing(lake, &[table], &also).await;
        stage
    };
    match variant {
        0 | 1 => {
            hold.set(Mode::FailCallerOnce);
            let (outcome, ()) = tokio::join!(lake.engine.append(table, rows), async {
                hold.wait_held(1).await;
                check("while held", true).await;
                if variant == 0 {
                    hold.release(0).await;
                }
            });
            let landed = match (&outcome, variant) {
                (Ok(o), 0) => format!("landed late as version {}", o.version),
                (Err(LanceEngineError::NotCommitted { .. }), _) => "not committed (fenced)".to_string(),
                (other, _) => panic!("delayed append, variant {variant}: {other:?}"),
            };
            if variant == 1 {
                assert_eq!(hold.release_all().await, vec![false], "the fence took the held write's slot");
            }
            assert!(intent_keys(lake).await.is_empty());
            check("after", outcome.is_ok()).await;
            landed
        }
        _ => {
            hold.set(Mode::FailCaller);
            let err = lake.engine.append(table, rows).await.unwrap_err();
            assert!(matches!(err, LanceEngineError::CommitUncertain { .. }), "{err}");
            check("while held, writer gone", true).await;
            let landed = hold.release_all().await;
            hold.set(Mode::Off);
            assert_eq!(landed, vec![true, false], "the append lands, its writer's fence finds the slot taken");
            check("landed, not journaled", true).await;
            let report = lake.engine.recover_writes(Some(table)).await.unwrap();
            assert!(matches!(report.intents[0].resolution, Resolution::Committed { .. }), "{report:?}");
            check("recovered", true).await;
            "landed after GC ran, recovered".to_string()
        }
    }
}

/// The input on S3: an ingest whose manifest PUT a proxy on loopback holds past the
/// writer's deadline (and its fence's too). The writer says the version may still land; GC
/// plans and applies while the PUT is held and deletes none of the ingest's objects; the PUT
/// lands; recovery journals it; lineage is complete and every referenced object exists. Then
/// the same with the fence let through: the writer proves its commit abandoned.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_an_ingest_held_past_its_deadline_is_protected_then_recovered() {
    use crate::hold_proxy::HoldProxy;
    use lake_store::descriptor::LakeDescriptor;
    use lake_store::writer::ManagedObjectWriter;
    use lake_store::LakeStore;
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET: run through scripts/test.sh");
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
    let proxy = HoldProxy::start(&endpoint).await;
    let root = format!("s3://{bucket}/intents-{}", ulid::Ulid::new().to_string().to_lowercase());
    let options = std::collections::HashMap::from([("aws_endpoint".to_string(), proxy.endpoint())]);
    let store = LakeStore::open_with_options(&root, &options).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    // The writer waits for a held PUT (the proxy answers nothing) until Lance's timeout, the
    // commit's deadline: 5 s here, far above what sending a PUT takes.
    let lake = TestLake {
        _dir: None,
        engine: LanceEngine::new(store.clone()).with_memory_budget(2048).with_commit_deadline(Duration::from_secs(5)),
        writer: ManagedObjectWriter::new(store.clone()),
        store,
    };
    let dir = tempfile::tempdir().unwrap();
    let folder = |name: &str, files: &[&str]| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        for f in files {
            std::fs::write(d.join(f), format!("{name}/{f}")).unwrap();
        }
        d
    };
    let objects = |lake: &TestLake| {
        let store = lake.store.clone();
        async move { store.list_all("objects/").await.unwrap().into_iter().map(|(k, _)| k).collect::<BTreeSet<_>>() }
    };
    lake_lance::ingest::ingest_dir(&lake.engine, "t", &folder("first", &["a.bin", "b.bin"])).await.unwrap();

    // Held past the deadline, the writer's fence too: the outcome is unknown.
    let before = objects(&lake).await;
    proxy.hold(true);
    let err =
        lake_lance::ingest::ingest_dir(&lake.engine, "t", &folder("late", &["c.bin", "d.bin"])).await.unwrap_err();
    assert!(err.to_string().contains("may still land"), "{err}");
    let uploaded: BTreeSet<String> = objects(&lake).await.difference(&before).cloned().collect();
    assert_eq!(uploaded.len(), 2);
    assert_eq!(proxy.held().len(), 2, "{:?}", proxy.held());
    let planned = gc_now(&lake).await;
    assert!(planned.is_disjoint(&uploaded), "objects of a commit that may land were planned: {planned:?}");
    assert!(objects(&lake).await.is_superset(&uploaded));
    assert_eq!(
        proxy.release_all().await,
        vec![true, false],
        "the ingest's PUT lands, the fence's finds its slot taken"
    );
    proxy.hold(false);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 2 });
    let (plan, _) = unchecked_plan_now(&lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(planned_objects(&plan).is_disjoint(&uploaded));
    assert!(referenced(&lake, "t").await.is_superset(&uploaded));
    assert!(lake_lance::verify::check_retained_objects(&lake.engine).await.unwrap().is_ok());

    // Held, then the fence is let through: it takes the slot after the deadline.
    let before = objects(&lake).await;
    proxy.hold(true);
    let engine = &lake.engine;
    let late = folder("lost", &["e.bin"]);
    let (outcome, ()) = tokio::join!(lake_lance::ingest::ingest_dir(engine, "t", &late), async {
        proxy.wait_held(1).await;
        proxy.hold(false);
    });
    let err = outcome.unwrap_err();
    assert!(err.to_string().contains("was not committed"), "{err}");
    assert_eq!(proxy.release_all().await, vec![false]);
    assert!(intent_keys(&lake).await.is_empty());
    let lost: BTreeSet<String> = objects(&lake).await.difference(&before).cloned().collect();
    assert!(referenced(&lake, "t").await.is_disjoint(&lost));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// An intent GC cannot read (edited: its seal breaks; its log edited; a stray file in the
/// intents folder) makes every plan incomplete: GC cannot know which objects it protects.
#[tokio::test(flavor = "multi_thread")]
async fn an_edited_or_stray_intent_makes_the_plan_incomplete() {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    hold.set(Mode::FailCaller);
    let late = lake.upload("late", b"late").await;
    assert!(matches!(lake.engine.append("t", one("e1", &late)).await, Err(LanceEngineError::CommitUncertain { .. })));
    let key = intent_keys(&lake).await.remove(0);
    let good = lake.store.get(&key).await.unwrap().unwrap();
    let lake = &lake;
    let incomplete = || async move {
        let (plan, _) = unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
        assert!(!plan.lineage_complete && plan.candidates.is_empty(), "{:?}", plan.problems);
        plan.problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("\n")
    };
    let edited = String::from_utf8(good.to_vec()).unwrap().replacen("\"read_version\":1", "\"read_version\":0", 1);
    lake.store.put(&key, edited.into_bytes()).await.unwrap();
    let problems = incomplete().await;
    assert!(problems.contains(&key) && problems.contains("seal"), "{problems}");
    lake.store.put(&key, good.to_vec()).await.unwrap();
    let log_key = format!(
        "tables/t.lance/_lake/object_ref_logs/{}.arrows",
        key.rsplit('/').next().unwrap().trim_end_matches(".json")
    );
    let log = lake.store.get(&log_key).await.unwrap().unwrap();
    let mut tampered = log.to_vec();
    tampered[0] ^= 1;
    lake.store.put(&log_key, tampered).await.unwrap();
    assert!(incomplete().await.contains("reference log"));
    lake.store.put(&log_key, log.to_vec()).await.unwrap();
    lake.store.put("_lake/intents/t/notes.txt", b"stray".to_vec()).await.unwrap();
    assert!(incomplete().await.contains("notes.txt"));
    lake.store.delete("_lake/intents/t/notes.txt").await.unwrap();
    let (plan, _) = unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert!(!planned_objects(&plan).contains(&late.key));
    hold.set(Mode::Off);
}
