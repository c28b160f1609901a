//! Journaled two-phase writes (`lake_lance::two_phase`, `docs/distributed-writes.md`): workers
//! prepare pieces concurrently, one coordinator commits them as one version with one journal
//! entry; refusals; a failed commit; GC.

use crate::gc_scenario::dry_run;
use crate::hold::Mode;
use crate::intents::{assert_nothing_referenced_is_missing, gc_now, held_lake, intent_keys};
use crate::support::{batch, new_lake, reader, TestLake};
use arrow_array::Array;
use chrono::Utc;
use lake_common::{DeltaKind, ObjectReferenceDelta};
use lake_lance::commit::Resolution;
use lake_lance::{LanceEngineError, PieceMode, PreparedPiece};
use lake_store::writer::ManagedObject;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

async fn sidecar(lake: &TestLake, table: &str, v: u64) -> Option<ObjectReferenceDelta> {
    lake_lance::sidecar::read(&lake.store, table, v).await.unwrap().map(|e| e.unwrap())
}

/// `n` objects, and rows referencing them with repeats and nulls: row `i` references object
/// `i % n` (every sixth row a null).
async fn rows(lake: &TestLake, n: usize, count: usize) -> (Vec<ManagedObject>, Vec<(String, Option<usize>)>) {
    let mut objects = Vec::new();
    for i in 0..n {
        objects.push(lake.upload(&format!("o{i}"), format!("object {i} {}", ulid::Ulid::new()).as_bytes()).await);
    }
    let rows = (0..count).map(|i| (format!("e{i}"), (i % 6 != 5).then_some(i % n))).collect();
    (objects, rows)
}

fn reader_of(
    objects: &[ManagedObject],
    rows: &[(String, Option<usize>)],
) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    let rows: Vec<(&str, Option<&ManagedObject>)> =
        rows.iter().map(|(e, o)| (e.as_str(), o.map(|i| &objects[i]))).collect();
    // Two batches per reader: a piece streams more than one batch.
    let half = rows.len() / 2;
    reader(vec![batch(&rows[..half]), batch(&rows[half..])])
}

/// Four tasks prepare a quarter each (concurrently, pieces sent as JSON), one commit.
async fn prepare_quarters(
    lake: &Arc<TestLake>,
    table: &str,
    objects: &[ManagedObject],
    rows: &[(String, Option<usize>)],
) -> Vec<PreparedPiece> {
    let quarter = rows.len() / 4;
    let mut tasks = Vec::new();
    for q in 0..4 {
        let (lake, objects, table) = (lake.clone(), objects.to_vec(), table.to_string());
        let mine = rows[q * quarter..if q == 3 { rows.len() } else { (q + 1) * quarter }].to_vec();
        tasks.push(tokio::spawn(async move {
            let piece = lake.engine.prepare_append(&table, reader_of(&objects, &mine)).await.unwrap();
            serde_json::to_string(&piece).unwrap()
        }));
    }
    let mut pieces = Vec::new();
    for t in tasks {
        pieces.push(serde_json::from_str::<PreparedPiece>(&t.await.unwrap()).unwrap());
    }
    pieces
}

fn keys(objects: &[ManagedObject]) -> BTreeSet<String> {
    objects.iter().map(|o| o.key.clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn four_prepared_pieces_commit_as_one_append_of_the_same_rows() {
    let lake = Arc::new(new_lake().await);
    let (objects, rows) = rows(&lake, 7, 40).await;
    let first = lake.upload("first", b"first").await;
    for t in ["two_phase", "one_append"] {
        lake.engine.append(t, reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    }
    let pieces = prepare_quarters(&lake, "two_phase", &objects, &rows).await;
    assert_eq!(pieces.iter().map(|p| p.rows).sum::<u64>(), 40);
    let orphan = lake.upload("orphan", b"referenced by nothing").await;
    let outcome = lake.engine.commit_pieces("two_phase", pieces, PieceMode::Append).await.unwrap();
    let append = lake.engine.append("one_append", reader_of(&objects, &rows)).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (2, 40));
    assert_eq!((outcome.references_added, outcome.references_removed), (append.references_added, 0));
    let (ours, theirs) =
        (sidecar(&lake, "two_phase", 2).await.unwrap(), sidecar(&lake, "one_append", 2).await.unwrap());
    assert_eq!(ours.kind, DeltaKind::Delta);
    assert_eq!((ours.added, ours.removed), (theirs.added.clone(), theirs.removed));
    assert_eq!(
        lake.engine.scan_version("two_phase", 2).await.unwrap().to_entries(),
        lake.engine.scan_version("one_append", 2).await.unwrap().to_entries()
    );
    let read = |t: &'static str| {
        let lake = lake.clone();
        async move {
            let rows =
                lake.engine.read_rows(t, &lake_lance::RowSelection::All, Some(&["episode".to_string()])).await.unwrap();
            let mut episodes: Vec<String> = rows
                .iter()
                .flat_map(|b| {
                    let a = b.column(0).as_any().downcast_ref::<arrow_array::StringArray>().unwrap().clone();
                    (0..a.len()).map(move |i| a.value(i).to_string())
                })
                .collect();
            episodes.sort();
            episodes
        }
    };
    assert_eq!(read("two_phase").await, read("one_append").await);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert!(intent_keys(&lake).await.is_empty());
    // The pieces' own logs are left for GC (no entry names them; a piece's write id is not
    // trusted to delete anything): the first append's, the commit's, and the 4 pieces'.
    let logs = lake.store.list_all("tables/two_phase.lance/_lake/object_ref_logs/").await.unwrap();
    assert_eq!(logs.len(), 6, "{logs:?}");
    // GC plans no object a committed piece references, and the orphan.
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    let planned: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
    assert!(planned.is_disjoint(&keys(&objects)), "{planned:?}");
    assert!(planned.contains(&orphan.key));
}

/// The commit's scan runs ahead of its log by a bounded number of batches: pieces of many
/// batches each (72,000 rows in 4 pieces, read back in batches of at most 8,192 rows: 12,
/// more than the read-ahead of 8) are journaled exactly, piece by piece, as one append of the
/// same rows, and a piece whose counts are edited is still refused after the others are read.
#[tokio::test(flavor = "multi_thread")]
async fn pieces_of_many_batches_are_journaled_in_order_past_the_read_ahead() {
    let lake = Arc::new(new_lake().await);
    let (objects, rows) = rows(&lake, 50, 72_000).await;
    let first = lake.upload("first", b"first").await;
    for t in ["two_phase", "one_append"] {
        lake.engine.append(t, reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    }
    let mut pieces = prepare_quarters(&lake, "two_phase", &objects, &rows).await;
    // The last piece claims one reference fewer than its fragments hold: refused once the
    // scan reaches it, nothing committed.
    let mut edited = pieces.clone();
    edited[3].references -= 1;
    match lake.engine.commit_pieces("two_phase", edited, PieceMode::Append).await {
        Err(LanceEngineError::PieceRefused { piece: 3, reason, .. }) => assert!(reason.contains("references"), "{reason}"),
        other => panic!("expected piece 3 refused, got {other:?}"),
    }
    assert!(sidecar(&lake, "two_phase", 2).await.is_none());
    let outcome = lake.engine.commit_pieces("two_phase", std::mem::take(&mut pieces), PieceMode::Append).await.unwrap();
    let append = lake.engine.append("one_append", reader_of(&objects, &rows)).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (2, 72_000));
    assert_eq!(outcome.references_added, append.references_added);
    let (ours, theirs) =
        (sidecar(&lake, "two_phase", 2).await.unwrap(), sidecar(&lake, "one_append", 2).await.unwrap());
    assert_eq!((ours.added, ours.removed), (theirs.added, theirs.removed));
    assert_eq!(
        lake.engine.scan_version("two_phase", 2).await.unwrap().to_entries(),
        lake.engine.scan_version("one_append", 2).await.unwrap().to_entries()
    );
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn prepared_pieces_overwrite_the_table_as_one_snapshot() {
    let lake = Arc::new(new_lake().await);
    let old = lake.upload("old", b"replaced").await;
    lake.engine.append("t", reader(vec![batch(&[("old", Some(&old)), ("old2", Some(&old))])])).await.unwrap();
    let (objects, rows) = rows(&lake, 3, 12).await;
    let pieces = prepare_quarters(&lake, "t", &objects, &rows).await;
    let outcome = lake.engine.commit_pieces("t", pieces, PieceMode::Overwrite).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (2, 12));
    let entry = sidecar(&lake, "t", 2).await.unwrap();
    assert_eq!(entry.kind, DeltaKind::Snapshot);
    assert_eq!(entry.added, lake.engine.scan_version("t", 2).await.unwrap().to_entries());
    assert!(entry.added.iter().all(|e| e.identity != old.identity()), "the overwritten rows are gone");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    lake.engine.cleanup("t", std::time::Duration::ZERO).await.unwrap();
    let planned: BTreeSet<String> =
        dry_run(&lake, Utc::now(), 10).await.candidates.keys().unwrap().into_iter().collect();
    assert!(planned.contains(&old.key), "the overwritten object is an orphan once version 1 is gone");
    assert!(planned.is_disjoint(&keys(&objects)));
}

fn refused(outcome: Result<lake_lance::CommitOutcome, LanceEngineError>, piece: usize, says: &str) {
    match outcome {
        Err(e @ LanceEngineError::PieceRefused { .. }) => {
            assert_eq!(e.kind().as_str(), "piece_refused");
            let LanceEngineError::PieceRefused { piece: p, reason, .. } = &e else { unreachable!() };
            assert_eq!(*p, piece, "{e}");
            assert!(reason.contains(says), "{e}");
        }
        other => panic!("expected a refused piece ({says}), got {other:?}"),
    }
}

fn committed_already(outcome: Result<lake_lance::CommitOutcome, LanceEngineError>, piece: usize) {
    match outcome {
        Err(e @ LanceEngineError::PieceCommitted { .. }) => {
            assert_eq!(e.kind().as_str(), "piece_committed");
            let LanceEngineError::PieceCommitted { piece: p, .. } = &e else { unreachable!() };
            assert_eq!(*p, piece, "{e}");
            assert!(e.to_string().contains("committed already"), "{e}");
        }
        other => panic!("expected a piece committed already, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pieces_of_another_table_lake_or_schema_or_with_other_counts_are_refused() {
    let lake = Arc::new(new_lake().await);
    let other_lake = Arc::new(new_lake().await);
    let first = lake.upload("first", b"first").await;
    for t in ["t", "u"] {
        lake.engine.append(t, reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    }
    let (objects, rows) = rows(&lake, 3, 8).await;
    let good = prepare_quarters(&lake, "t", &objects, &rows).await;
    let with = |i: usize, piece: PreparedPiece| {
        let mut pieces = good.clone();
        pieces[i] = piece;
        pieces
    };
    let engine = &lake.engine;
    // Another table.
    let u = engine.prepare_append("u", reader_of(&objects, &rows[..2])).await.unwrap();
    refused(engine.commit_pieces("t", with(1, u), PieceMode::Append).await, 1, "table `u`");
    // Another lake (its own objects, a table of the same name).
    let theirs = other_lake.upload("x", b"x").await;
    other_lake.engine.append("t", reader(vec![batch(&[("x", Some(&theirs))])])).await.unwrap();
    let foreign = other_lake.engine.prepare_append("t", reader(vec![batch(&[("y", Some(&theirs))])])).await.unwrap();
    refused(engine.commit_pieces("t", with(2, foreign), PieceMode::Append).await, 2, "lake");
    // Another schema: the fingerprint edited, then a real change of the table's schema below.
    let mut edited = good[0].clone();
    edited.schema = "0".repeat(64);
    refused(engine.commit_pieces("t", with(0, edited), PieceMode::Append).await, 0, "schema");
    // Counts that differ from the fragments: references, rows, a fragment dropped, the oldest
    // key, a piece twice.
    let mut more = good[3].clone();
    more.references += 1;
    refused(engine.commit_pieces("t", with(3, more), PieceMode::Append).await, 3, "references");
    let mut fewer = good[1].clone();
    fewer.references -= 1;
    refused(engine.commit_pieces("t", with(1, fewer), PieceMode::Append).await, 1, "references");
    let mut rows_edited = good[2].clone();
    rows_edited.rows += 1;
    refused(engine.commit_pieces("t", with(2, rows_edited), PieceMode::Append).await, 2, "rows");
    let mut oldest = good[0].clone();
    oldest.oldest = Some(first.identity());
    refused(engine.commit_pieces("t", with(0, oldest), PieceMode::Append).await, 0, "oldest");
    let mut swapped = good[0].clone();
    swapped.fragments = good[1].fragments.clone();
    swapped.rows = good[1].rows;
    refused(engine.commit_pieces("t", with(0, swapped), PieceMode::Append).await, 1, "data file");
    let twice = vec![good[0].clone(), good[0].clone()];
    refused(engine.commit_pieces("t", twice, PieceMode::Append).await, 1, "twice");
    refused(engine.commit_pieces("t", Vec::new(), PieceMode::Append).await, 0, "no piece");
    // Nothing was committed or journaled, no intent is left.
    assert_eq!(engine.versions("t").await.unwrap().len(), 1);
    assert!(sidecar(&lake, "t", 2).await.is_none());
    assert!(intent_keys(&lake).await.is_empty());
    // The untouched pieces still commit.
    let outcome = engine.commit_pieces("t", good.clone(), PieceMode::Append).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (2, 8));
    assert!(engine.verify_refs(&[]).await.unwrap().is_ok());
    // A retry after that commit landed: every piece, or one among fresh ones, in either mode, is
    // refused as committed already (its rows would be added twice); nothing more is committed.
    committed_already(engine.commit_pieces("t", good.clone(), PieceMode::Append).await, 0);
    let fresh = engine.prepare_append("t", reader_of(&objects, &rows[..2])).await.unwrap();
    committed_already(engine.commit_pieces("t", vec![fresh.clone(), good[2].clone()], PieceMode::Append).await, 1);
    committed_already(engine.commit_pieces("t", vec![good[3].clone()], PieceMode::Overwrite).await, 0);
    assert_eq!(engine.versions("t").await.unwrap().len(), 2);
    assert!(intent_keys(&lake).await.is_empty());
    let outcome = engine.commit_pieces("t", vec![fresh], PieceMode::Append).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (3, 2));
    assert!(engine.verify_refs(&[]).await.unwrap().is_ok());
    // A schema change between prepare and commit refuses the pieces prepared before it.
    let late = engine.prepare_append("t", reader_of(&objects, &rows[..3])).await.unwrap();
    engine.rename_column("t", "episode", "name").await.unwrap();
    refused(engine.commit_pieces("t", vec![late], PieceMode::Append).await, 0, "schema");
}

/// A commit whose manifest write is held past its deadline (its writer's fence too): the call
/// reports an unknown outcome, nothing is journaled, the intent keeps every object of the
/// pieces from GC; the write lands; recovery journals it exactly.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_commit_journals_nothing_and_its_intent_keeps_the_objects() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    let (objects, rows) = rows(&lake, 5, 16).await;
    let pieces = prepare_quarters(&lake, "t", &objects, &rows).await;
    hold.set(Mode::FailCaller);
    let err = lake.engine.commit_pieces("t", pieces, PieceMode::Append).await.unwrap_err();
    let intent = match &err {
        LanceEngineError::CommitUncertain { intent, .. } => intent.clone(),
        other => panic!("expected an uncertain commit, got {other}"),
    };
    assert_eq!(intent_keys(&lake).await, vec![intent]);
    assert!(sidecar(&lake, "t", 2).await.is_none(), "nothing is journaled");
    let planned = gc_now(&lake).await;
    assert!(planned.is_disjoint(&keys(&objects)), "the held commit's objects were planned: {planned:?}");
    let mut also: Vec<&ManagedObject> = objects.iter().collect();
    also.push(&first);
    assert_nothing_referenced_is_missing(&lake, &["t"], &also).await;
    assert_eq!(hold.release_all().await, vec![true, false], "the commit lands, the fence does not");
    hold.set(Mode::Off);
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 2 });
    let entry = sidecar(&lake, "t", 2).await.unwrap();
    let ds = lake.engine.open("t").await.unwrap();
    let added =
        lake_lance::scan::count_references(&ds, "t", lake.store.root(), Some("episode != 'start'")).await.unwrap();
    assert_eq!(entry.added, added.to_entries());
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert!(intent_keys(&lake).await.is_empty());
}

/// The guard runs over all pieces right before the commit: one piece referencing an object
/// too old for the coordinator's clock refuses the whole commit (nothing committed, no intent,
/// no log left of it), although each other piece is fresh; pieces without it commit.
#[tokio::test(flavor = "multi_thread")]
async fn the_guard_judges_the_oldest_key_of_all_pieces_at_the_commit() {
    use lake_store::guard::{FixedWriterClock, GuardError};
    use lake_store::keys::parse_managed_key;
    let dir = tempfile::tempdir().unwrap();
    // min_age 4s: margin 1s, new references must be younger than 3s by the writer's clock.
    let mut lake =
        crate::support::new_lake_with_policy(dir.path().join("lake").to_str().unwrap(), Duration::from_secs(4)).await;
    let clock = Arc::new(FixedWriterClock::new(Utc::now()));
    lake.engine = lake_lance::LanceEngine::new(lake.store.clone()).with_writer_clock(clock.clone());
    let stale = lake.upload("stale", b"uploaded first").await;
    // Keys mint their time in milliseconds: two uploads in one millisecond would be equally old.
    // The pause makes `fresh` at least 300 ms younger however fast or slow the machine is.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fresh = lake.upload("fresh", b"uploaded later").await;
    assert!(
        parse_managed_key(&fresh.key).unwrap().minted_at()
            >= parse_managed_key(&stale.key).unwrap().minted_at() + chrono::Duration::milliseconds(300)
    );
    let at = |o: &ManagedObject, ms: i64| {
        parse_managed_key(&o.key).unwrap().minted_at() + chrono::Duration::milliseconds(ms)
    };
    clock.set(at(&stale, 0));
    lake.engine.append("t", reader(vec![batch(&[("start", Some(&fresh))])])).await.unwrap();
    let old_piece = lake.engine.prepare_append("t", reader(vec![batch(&[("s", Some(&stale))])])).await.unwrap();
    let new_piece = lake.engine.prepare_append("t", reader(vec![batch(&[("f", Some(&fresh))])])).await.unwrap();
    assert_eq!(old_piece.oldest, Some(stale.identity()));
    // At the commit the stale object is 3.1 s old (prepared in time, committed too late).
    clock.set(at(&stale, 3100));
    let logs = || async { lake.store.list_all("tables/t.lance/_lake/object_ref_logs/").await.unwrap().len() };
    let before = logs().await;
    let err = lake.engine.commit_pieces("t", vec![new_piece.clone(), old_piece], PieceMode::Append).await.unwrap_err();
    match &err {
        LanceEngineError::Guard { source: GuardError::TooOld { uri, .. }, .. } => assert_eq!(*uri, stale.key),
        other => panic!("expected the guard's refusal, got {other}"),
    }
    assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "nothing was committed");
    assert!(intent_keys(&lake).await.is_empty(), "a refused commit leaves no intent");
    assert_eq!(logs().await, before, "the commit's own log is removed");
    clock.set(at(&fresh, 1000));
    let outcome = lake.engine.commit_pieces("t", vec![new_piece], PieceMode::Append).await.unwrap();
    assert_eq!((outcome.version, outcome.rows, outcome.references_added), (2, 1, 1));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// Pieces prepared before other versions landed (an append, a delete) commit on top of them:
/// the entry holds exactly the pieces' rows, and every version's entry matches its scan.
#[tokio::test(flavor = "multi_thread")]
async fn pieces_prepared_before_other_versions_commit_on_top_of_them() {
    let lake = Arc::new(new_lake().await);
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", reader(vec![batch(&[("start", Some(&first))])])).await.unwrap();
    let (objects, rows) = rows(&lake, 4, 12).await;
    let pieces = prepare_quarters(&lake, "t", &objects, &rows).await;
    assert!(pieces.iter().all(|p| p.read_version == 1));
    let between = lake.upload("between", b"between").await;
    lake.engine.append("t", reader(vec![batch(&[("between", Some(&between))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'start'").await.unwrap().unwrap();
    let outcome = lake.engine.commit_pieces("t", pieces, PieceMode::Append).await.unwrap();
    assert_eq!((outcome.version, outcome.rows), (4, 12));
    let entry = sidecar(&lake, "t", 4).await.unwrap();
    let ds = lake.engine.open("t").await.unwrap();
    let added =
        lake_lance::scan::count_references(&ds, "t", lake.store.root(), Some("episode != 'between'")).await.unwrap();
    assert_eq!(entry.added, added.to_entries());
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// A piece naming another write's reference log by its write id (edited, or a worker's bug)
/// deletes nothing of it: the commit never deletes a piece's log, so the journaled version
/// whose entry names that log stays whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_piece_naming_another_writes_log_deletes_nothing() {
    let lake = Arc::new(new_lake().await);
    let (objects, rows) = rows(&lake, 40, 3000).await;
    // Version 1: an append large enough to name a reference log.
    lake.engine.append("t", reader_of(&objects, &rows)).await.unwrap();
    let logs = lake.store.list_all("tables/t.lance/_lake/object_ref_logs/").await.unwrap();
    assert_eq!(logs.len(), 1, "version 1 names one log: {logs:?}");
    let write_id = logs[0].0.rsplit('/').next().unwrap().trim_end_matches(".arrows").to_string();
    let mut pieces = prepare_quarters(&lake, "t", &objects, &rows[..8]).await;
    pieces[0].log.write_id = write_id;
    lake.engine.commit_pieces("t", pieces, PieceMode::Append).await.unwrap();
    assert!(lake.store.head(&logs[0].0).await.unwrap().is_some(), "version 1's log is still there");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}
