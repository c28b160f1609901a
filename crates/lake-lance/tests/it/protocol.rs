//! The write protocol (`lake_lance::commit`, docs/protocol.md) against the fourth adversarial
//! run's inputs, each with two more inputs of its kind, and the protocol stopped (a failure point)
//! or killed (a child writer aborted) at every step, on real Lance datasets.
//!
//! Every test ends with the property that matters: GC, at a cutoff an hour ahead (every
//! unreferenced object a candidate), deletes no object a retained version references or a
//! pending intent names, and the journal equals full scans.
//!
//! Size: one scenario per door input (20 to 60 lines each) plus the step loops; one file because
//! they share the child-writer, foreign-commit and kill helpers.

use crate::hold::{ManifestHold, Mode};
use crate::intents::{assert_nothing_referenced_is_missing, held_lake, intent_keys};
use crate::support::{apply_fresh, batch, engine_later, new_lake, reader, TestLake};
use crate::truth::{planned_objects, referenced};
use chrono::Utc;
use lake_common::ObjectIdentity;
use lake_lance::commit::marker::CommitMarker;
use lake_lance::commit::{RecoverOptions, Resolution, VersionRecovery, Wait};
use lake_lance::{LanceEngine, LanceEngineError};
use lake_store::failpoint;
use lake_store::writer::ManagedObject;
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::Dataset;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Past every deadline of these tests (the held lakes' hour; the default 5 minutes).
const HOUR: Duration = crate::support::LATER;

fn one(episode: &str, o: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    reader(vec![batch(&[(episode, Some(o))])])
}

fn root(lake: &TestLake) -> String {
    lake.store.root().to_string()
}

/// A plan at a cutoff an hour ahead (every unreferenced managed object is a candidate, young or
/// not), applied when its lineage is complete; returns the objects it planned.
pub(crate) async fn gc_all(lake: &TestLake) -> BTreeSet<String> {
    let options = lake_gc::unchecked::PlanOptions::new(lake.store.root(), Duration::from_secs(1), Utc::now() + HOUR)
        .page_size(10)
        .memory_budget(3);
    let inventory = lake_gc::inventory::for_store(&lake.store);
    let (plan, _) =
        lake_gc::unchecked::plan_with_unchecked_cutoff(&lake.engine, inventory.as_ref(), &options).await.unwrap();
    if plan.lineage_complete && !plan.candidates.is_empty() {
        apply_fresh(lake, &plan, &Default::default()).await.unwrap();
    }
    planned_objects(&plan)
}

/// Whether a plan of `lake` now has complete lineage (its problems otherwise).
async fn lineage_complete(lake: &TestLake) -> Result<(), Vec<String>> {
    let (plan, _) = crate::support::unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    if plan.lineage_complete {
        Ok(())
    } else {
        Err(plan.problems.iter().map(|p| p.message.clone()).collect())
    }
}

/// The identities the journal entry of `version` adds.
async fn added_by(lake: &TestLake, table: &str, version: u64) -> Vec<String> {
    let entry = lake_lance::sidecar::read(&lake.store, table, version).await.unwrap().unwrap().unwrap();
    entry.added.iter().map(|r| r.identity.uri.clone()).collect()
}

/// Starts an append of `o` to `table` whose manifest write is held, then kills the writer (its
/// task dropped): what a writer killed right after its intent leaves. Returns the intent's key
/// and the Lance transaction's UUID it names. The held write stays held (release it, or not).
async fn kill_after_intent(
    lake: &Arc<TestLake>,
    hold: &ManifestHold,
    table: &str,
    o: &ManagedObject,
) -> (String, String) {
    hold.set(Mode::Hold);
    let writer = {
        let (lake, o, table) = (lake.clone(), o.clone(), table.to_string());
        tokio::spawn(async move { lake.engine.append(&table, one("killed", &o)).await })
    };
    hold.wait_held(1).await;
    writer.abort();
    assert!(writer.await.unwrap_err().is_cancelled());
    hold.set(Mode::Off);
    let (listed, _) = lake_store::intents::list(&lake.store, Some(table)).await.unwrap();
    assert_eq!(listed.len(), 1, "the killed writer's intent stays");
    let intent = listed[0].intent.as_ref().unwrap();
    (listed[0].key.clone(), intent.transaction_uuid.clone().expect("the intent names its transaction"))
}

/// An append of `o` by another Lance client, its transaction's UUID set to `uuid` and its
/// properties to `marker` when given. Returns the version.
async fn foreign_append(
    lake: &TestLake,
    table: &str,
    o: &ManagedObject,
    uuid: Option<&str>,
    marker: Option<CommitMarker>,
) -> u64 {
    let uri = lake.engine.dataset_uri(table);
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let mut tx = InsertBuilder::new(uri.as_str())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[("foreign", Some(o))])])
        .await
        .unwrap();
    if let Some(uuid) = uuid {
        tx.uuid = uuid.to_string();
    }
    if let Some(m) = marker {
        m.set_on(&mut tx);
    }
    CommitBuilder::new(uri.as_str()).with_skip_auto_cleanup(true).execute(tx).await.unwrap().version().version
}

/// An object under a managed key minted `age` ago.
async fn object_minted_ago(lake: &TestLake, name: &str, age: Duration) -> ManagedObject {
    let key = format!("objects/{}/{name}", ulid::Ulid::from_datetime(std::time::SystemTime::now() - age));
    let bytes = format!("{name}, uploaded long ago").into_bytes();
    lake.store.put(&key, bytes.clone()).await.unwrap();
    ManagedObject {
        key,
        sha256: <sha2::Sha256 as sha2::Digest>::digest(&bytes).into(),
        size: bytes.len() as u64,
        last_modified: Utc::now(),
    }
}

// ---------------------------------------------------------------------------------------------
// Door 1: an intent resolved "committed" by a transaction UUID alone.

/// The run's input: a writer killed right after its intent (its manifest write never lands; the
/// intent names its transaction's UUID `U`), and another Lance client committing a version whose
/// transaction carries `U`, referencing its own fresh object. Before, the next `lake ingest` (or
/// `lake refs recover`) journaled that version with the intent's references, `lake refs verify`
/// differed, and GC deleted the object the latest version references. The version's entry is now
/// computed from its two manifests.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_carrying_a_killed_writers_transaction_is_journaled_from_what_it_is() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let killed = lake.upload("killed", b"the killed writer's object").await;
    let (_, uuid) = kill_after_intent(&lake, &hold, "t", &killed).await;
    let fresh = lake.upload("fresh", b"the other client's object").await;
    assert_eq!(foreign_append(&lake, "t", &fresh, Some(&uuid), None).await, 2);
    // The next ingest journals version 2 before its own commit.
    let next = lake.upload("next", b"next").await;
    assert_eq!(lake.engine.append("t", one("e2", &next)).await.unwrap().version, 3);
    assert_eq!(added_by(&lake, "t", 2).await, vec![fresh.key.clone()], "the entry says what version 2 is");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[&killed]).await;
    // Once the killed writer's deadline has passed, recovery revokes and fences it.
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert_eq!(report.pending(), 0, "{report:?}");
    assert_eq!(hold.release_all().await, vec![false], "the killed writer's write finds its slot taken");
    assert!(gc_all(&lake).await.contains(&killed.key), "the killed writer's object is an orphan now");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(referenced(&lake, "t").await.contains(&fresh.key));
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// The same without forging a transaction: an empty attempt marker (`<write_id>.<uuid>.attempt`,
/// a file of earlier builds, unsealed) beside the killed writer's intent, naming the UUID of a
/// plain pylance-like append. The marker can only make recovery look at that version; its entry
/// is still what the version is.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_marker_naming_a_plain_append_cannot_swap_its_entry() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let killed = lake.upload("killed", b"the killed writer's object").await;
    let (key, _) = kill_after_intent(&lake, &hold, "t", &killed).await;
    let fresh = lake.upload("fresh", b"a plain append's object").await;
    let version = foreign_append(&lake, "t", &fresh, None, None).await;
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let plain = ds.read_transaction_by_version(version).await.unwrap().unwrap().uuid;
    let marker = key.replace(".json", &format!(".{plain}.attempt"));
    lake.store.put(&marker, Vec::new()).await.unwrap();
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert_eq!(report.pending(), 0, "{report:?}");
    assert_eq!(added_by(&lake, "t", version).await, vec![fresh.key.clone()]);
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert_eq!(hold.release_all().await, vec![false]);
    assert!(gc_all(&lake).await.contains(&killed.key));
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

/// A version carrying the killed writer's transaction that references an object minted two days
/// ago (a candidate of any plan: not in the intent, too old for the guard): it is not journaled
/// from anything; it stays a lineage problem for `lake refs repair`, and GC deletes nothing
/// meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_transaction_referencing_an_old_object_is_left_for_repair() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let killed = lake.upload("killed", b"the killed writer's object").await;
    let (_, uuid) = kill_after_intent(&lake, &hold, "t", &killed).await;
    let old = object_minted_ago(&lake, "old.bin", Duration::from_secs(2 * 86400)).await;
    assert_eq!(foreign_append(&lake, "t", &old, Some(&uuid), None).await, 2);
    let report =
        lake.engine.recover_writes_with(None, &RecoverOptions { wait: Wait::No, progress: None }).await.unwrap();
    assert!(
        matches!(&report.versions[..], [v] if v.version == 2 && matches!(&v.outcome, VersionRecovery::Left { reason } if reason.contains("repair"))),
        "{report:?}"
    );
    assert!(lineage_complete(&lake).await.is_err(), "GC refuses while version 2 is not journaled");
    assert!(!gc_all(&lake).await.contains(&old.key));
    lake.engine.repair_refs("t", 2).await.unwrap();
    assert!(!gc_all(&lake).await.contains(&old.key));
    assert_nothing_referenced_is_missing(&lake, &["t"], &[&killed]).await;
}

/// A version carrying the lake's marker with the killed writer's write id (a forged marker) that
/// deletes a row: journaled from its manifests, the removal included.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_marker_of_the_writer_journals_what_the_version_is() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    let first = lake.upload("first", b"first").await;
    let second = lake.upload("second", b"second").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&first)), ("e1", Some(&second))])])).await.unwrap();
    let killed = lake.upload("killed", b"the killed writer's object").await;
    let (key, _) = kill_after_intent(&lake, &hold, "t", &killed).await;
    let write_id = key.rsplit('/').next().unwrap().trim_end_matches(".json").to_string();
    let ds = Arc::new(Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap());
    let staged = lance::dataset::DeleteBuilder::new(ds.clone(), "episode = 'e0'").execute_uncommitted().await.unwrap();
    let mut tx = staged.transaction;
    CommitMarker::new(&root(&lake), "append", &write_id).set_on(&mut tx);
    CommitBuilder::new(ds).with_skip_auto_cleanup(true).execute(tx).await.unwrap();
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert_eq!((report.pending(), report.left()), (0, 0), "{report:?}");
    let entry = lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().unwrap().unwrap();
    assert_eq!(entry.removed.iter().map(|r| r.identity.uri.clone()).collect::<Vec<_>>(), vec![first.key.clone()]);
    assert!(entry.added.is_empty());
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    hold.release_all().await;
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

// ---------------------------------------------------------------------------------------------
// Door 2: the deadline measured on a clock that stops during a suspend. A child writer stops
// itself (SIGSTOP) at a step of the protocol; a resolver whose clock says the deadline has long
// passed (a host clock step, or a suspend longer than the deadline) revokes, fences and
// concludes; GC deletes the writer's uploads; the writer resumes (SIGCONT) and must not land.

/// Not a test: a writer that uploads one object and writes it to table `t` of the lake at
/// `LAKE_CHILD_ROOT` by `LAKE_CHILD_OP` (`append`, `create` of table `fresh`, or `update`),
/// printing `object <key>` first and `ok <version>` or `err <kind>: <message>` last.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "child-process helper of the protocol tests"]
async fn child_process_helper_protocol_writer() {
    let root = std::env::var("LAKE_CHILD_ROOT").expect("run only as a child process");
    let op = std::env::var("LAKE_CHILD_OP").unwrap_or_else(|_| "append".into());
    let store = lake_store::store::LakeStore::open(&root).unwrap();
    let engine = LanceEngine::new(store.clone());
    let writer = lake_store::writer::ManagedObjectWriter::new(store);
    let o = writer.upload("child.bin", b"written by the child writer".as_slice()).await.unwrap();
    println!("object {}", o.key);
    let result = match op.as_str() {
        "append" => engine.append("t", one("child", &o)).await.map(|c| c.version),
        "create" => engine.append("fresh", one("child", &o)).await.map(|c| c.version),
        "update" => {
            let set: lake_lance::update::Assignment = "file = NULL".parse().unwrap();
            engine.update("t", &[set], Some("episode = 'e0'")).await.map(|c| c.map_or(0, |c| c.version))
        }
        other => panic!("unknown LAKE_CHILD_OP {other}"),
    };
    match result {
        Ok(version) => println!("ok {version}"),
        Err(e) => println!("err {}: {e}", e.kind()),
    }
}

/// A child writer of `op` on `lake`, with `env` (a pause or crash point).
pub(crate) fn child_writer(lake: &TestLake, op: &str, env: &[(&str, &str)]) -> std::process::Child {
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "protocol::child_process_helper_protocol_writer",
            "--include-ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("LAKE_CHILD_ROOT", root(lake))
        .env("LAKE_CHILD_OP", op)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for (k, v) in env {
        command.env(k, v);
    }
    command.spawn().unwrap()
}

/// Waits until process `pid` is stopped (state `T` in `/proc/<pid>/stat`); fails after 120 s.
pub(crate) async fn wait_stopped(pid: u32) {
    for _ in 0..12_000 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the command name in parentheses.
        if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('T')) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the child writer did not stop within 120 s");
}

pub(crate) fn signal(pid: u32, sig: &str) {
    assert!(std::process::Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success());
}

/// The child's output once it exits: its object's key and its last line.
pub(crate) fn finish(child: std::process::Child) -> (String, String) {
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let object = text.lines().find_map(|l| l.strip_prefix("object ")).unwrap_or_default().to_string();
    let last =
        text.lines().rev().find(|l| l.starts_with("ok ") || l.starts_with("err ")).unwrap_or_default().to_string();
    (object, last)
}

/// One suspend: the child stops at `point`, the resolver runs with a clock an hour on, GC
/// collects, the child resumes and must not land; the lake loses nothing.
async fn suspended_writer_cannot_land(op: &str, point: &str) {
    let lake = new_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let before = lake.engine.versions("t").await.unwrap().len() as u64;
    let child = child_writer(&lake, op, &[("LAKE_PAUSEPOINT", point)]);
    let pid = child.id();
    wait_stopped(pid).await;
    assert_eq!(intent_keys(&lake).await.len(), 1, "{op} at {point}: the writer's intent exists");
    // The resolver's clock: an hour on (a host clock stepped forward, or a suspend of the writer
    // longer than its deadline).
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert!(
        matches!(report.intents[..], [ref i] if i.resolution == Resolution::Abandoned { proof: before + 1 }),
        "{op} at {point}: {report:?}"
    );
    gc_all(&lake).await;
    signal(pid, "-CONT");
    let (object, last) = finish(child);
    assert!(last.starts_with("err "), "{op} at {point}: the resumed writer must not land: {last}");
    assert_eq!(lake.engine.versions("t").await.unwrap().len() as u64, before + 1, "{op} at {point}: only the fence");
    assert!(!referenced(&lake, "t").await.contains(&object), "{op} at {point}");
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("{op} at {point}: {p:?}"));
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
    assert!(intent_keys(&lake).await.is_empty());
}

/// The run's input: a writer suspended right before its manifest write (its liveness checked),
/// resolved meanwhile by a resolver whose clock is past its deadline. Before, it resumed and
/// committed "as version 3" over the fence, referencing an object GC had deleted. Its manifest
/// write now targets the fence's slot (taken), and its retry finds its intent gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_suspended_before_its_manifest_write_cannot_land_after_the_fence() {
    suspended_writer_cannot_land("append", "commit.before_manifest").await;
}

/// Suspended right after its intent, before its guard and liveness check: it resumes, finds
/// its intent gone and publishes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_suspended_after_its_intent_is_refused_when_it_resumes() {
    suspended_writer_cannot_land("append", "commit.after_intent").await;
}

/// An update (Lance commits inside its own call, through the protocol's handler) suspended
/// before its manifest write: the same.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_suspended_before_its_manifest_write_cannot_land_after_the_fence() {
    suspended_writer_cannot_land("update", "commit.before_manifest").await;
}

// ---------------------------------------------------------------------------------------------
// Door 3: `lake branch delete` ignored the branch's pending writes.

async fn lake_with_branch() -> (TestLake, Arc<ManifestHold>) {
    let (lake, hold) = held_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    lake.engine.create_branch("t", "b", &lake_lance::branch::BranchSource::Version(1)).await.unwrap();
    (lake, hold)
}

/// Another process's engine on the same lake (no held writes).
fn other_engine(lake: &TestLake) -> LanceEngine {
    LanceEngine::new(lake.store.clone()).with_memory_budget(2048)
}

/// The run's input: a write to `t@b` paused mid-commit (its manifest write held) while the branch
/// is deleted. Before, it reported success into the deleted branch, which came back half-made,
/// and every GC of the lake refused. The deletion now revokes and fences the write first; the
/// held manifest lands in the deleted branch's folder, and the writer's journal step refuses:
/// the branch is no longer registered. GC names the leftover until `lake branch delete` runs
/// again, and deletes nothing meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_paused_while_its_branch_is_deleted_fails_and_gc_stays_safe() {
    let (lake, hold) = lake_with_branch().await;
    let lake = Arc::new(lake);
    let paused = lake.upload("paused", b"a write to the branch").await;
    hold.set(Mode::Hold);
    let writer = {
        let (lake, paused) = (lake.clone(), paused.clone());
        tokio::spawn(async move { lake.engine.append("t@b", one("e1", &paused)).await })
    };
    hold.wait_held(1).await;
    hold.set(Mode::Off);
    other_engine(&lake).delete_branch("t", "b").await.unwrap();
    hold.release_all().await;
    let outcome = writer.await.unwrap();
    let err = outcome.expect_err("a write into a deleted branch reports failure");
    assert!(err.to_string().contains("no longer registered"), "{err}");
    assert!(lake_lance::LanceEngine::branches(&lake.engine, "t").await.unwrap().is_empty());
    // Whatever the leftover, GC deletes nothing anything references.
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    other_engine(&lake).delete_branch("t", "b").await.unwrap();
    lineage_complete(&lake).await.unwrap();
    assert!(intent_keys(&lake).await.is_empty());
    assert!(gc_all(&lake).await.contains(&paused.key), "the failed write's object is an orphan");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

/// The writer killed instead: before, its intent outlived the branch naming a log that went with
/// it, `lake refs recover` called it a create to remove by hand, and GC stopped lake-wide. The
/// deletion resolves it first.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_write_to_a_branch_is_resolved_when_the_branch_is_deleted() {
    let (lake, hold) = lake_with_branch().await;
    let lake = Arc::new(lake);
    let killed = lake.upload("killed", b"a killed write to the branch").await;
    kill_after_intent(&lake, &hold, "t@b", &killed).await;
    other_engine(&lake).delete_branch("t", "b").await.unwrap();
    assert!(intent_keys(&lake).await.is_empty(), "the deletion resolved the write");
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert!(report.intents.is_empty() && report.left() == 0, "{report:?}");
    lineage_complete(&lake).await.unwrap();
    assert!(gc_all(&lake).await.contains(&killed.key));
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

/// A write to the branch killed after its commit (no journal entry yet): the deletion journals
/// it from its manifests while resolving the write, then deletes the branch.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_with_an_unjournaled_write_is_journaled_then_deleted() {
    let (lake, _hold) = lake_with_branch().await;
    let landed = lake.upload("landed", b"committed to the branch, then killed").await;
    let stopped = failpoint::scope("commit.after_manifest", lake.engine.append("t@b", one("e1", &landed))).await;
    assert!(stopped.unwrap_err().to_string().contains("commit.after_manifest"));
    let report = lake.engine.recover_writes_with(None, &RecoverOptions { wait: Wait::No, progress: None }).await;
    assert!(report.is_ok());
    other_engine(&lake).delete_branch("t", "b").await.unwrap();
    assert!(intent_keys(&lake).await.is_empty());
    lineage_complete(&lake).await.unwrap();
    assert!(gc_all(&lake).await.contains(&landed.key), "the branch's object is an orphan once it is gone");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

// ---------------------------------------------------------------------------------------------
// Door 4: a store that ignores create-only PUTs. On LocalStack behind a proxy that drops
// `If-None-Match`.

async fn s3_lake_behind(proxy: &crate::hold_proxy::HoldProxy, name: &str) -> (String, lake_store::LakeStore) {
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET: run through scripts/test.sh");
    let root = format!("s3://{bucket}/{name}-{}", ulid::Ulid::new().to_string().to_lowercase());
    let options = std::collections::HashMap::from([("aws_endpoint".to_string(), proxy.endpoint())]);
    (root.clone(), lake_store::LakeStore::open_with_options(&root, &options).unwrap())
}

/// The run's input: behind a store that accepts a create-only PUT over an existing key, 12
/// concurrent ingests all exited 0 and three lost their rows. Now creating a lake there, and
/// every write to a lake there, is refused with a typed error naming the capability; nothing is
/// written. The same store without the proxy passes the probe.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_a_store_that_ignores_create_only_writes_is_refused() {
    use lake_store::descriptor::LakeDescriptor;
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
    let proxy = crate::hold_proxy::HoldProxy::start(&endpoint).await;
    proxy.ignore_conditions(true);
    let capability = |e: &lake_store::StoreError| matches!(e, lake_store::StoreError::Capability { .. });
    // `lake init` there.
    let (_, store) = s3_lake_behind(&proxy, "capability-init").await;
    let err = LakeDescriptor::create(&store, HOUR).await.unwrap_err();
    assert!(capability(&err) && err.to_string().contains("If-None-Match"), "{err}");
    assert!(
        store.list_all("").await.unwrap().iter().all(|(k, _)| k.starts_with("_lake/clock/")),
        "only the probe was written"
    );
    // A lake created on the store directly, then written to through the proxy: 4 concurrent
    // appends are all refused; no row lands.
    let (root, through_proxy) = s3_lake_behind(&proxy, "capability-write").await;
    let direct = lake_store::LakeStore::open(&root).unwrap();
    LakeDescriptor::create(&direct, HOUR).await.unwrap();
    let writer = lake_store::writer::ManagedObjectWriter::new(direct.clone());
    let engine = Arc::new(LanceEngine::new(through_proxy));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let o = writer.upload(&format!("o{i}"), format!("object {i}").as_bytes()).await.unwrap();
        let engine = engine.clone();
        tasks.push(tokio::spawn(async move { engine.append("t", one(&format!("e{i}"), &o)).await }));
    }
    for task in tasks {
        let err = task.await.unwrap().unwrap_err();
        assert!(matches!(&err, LanceEngineError::Objects(e) if capability(e)), "{err}");
    }
    assert!(!LanceEngine::new(direct.clone()).table_exists("t").await.unwrap(), "nothing was committed");
    // The same lake written directly passes the probe.
    let o = writer.upload("ok", b"ok".as_slice()).await.unwrap();
    LanceEngine::new(direct).append("t", one("ok", &o)).await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Door 5: one killed write blocked GC or retention for good, or silently for long.

/// The run's input: a killed first ingest (a create) left an intent that stayed pending for ever
/// and stopped every GC of the lake until someone removed a file by hand. Now its table's folder
/// is no problem of the lake while its intent exists (the intent protects what the create may
/// publish), and resolution fences the create with an empty version 1 (the schema its intent
/// records): the table exists, the create can never land, its object is an orphan.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_first_ingest_blocks_no_gc_and_is_resolved() {
    let lake = new_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let child = child_writer(&lake, "create", &[("LAKE_CRASHPOINT", "commit.after_intent")]);
    let (object, last) = finish(child);
    assert!(last.is_empty(), "the child was killed: {last}");
    assert_eq!(intent_keys(&lake).await.len(), 1);
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("one killed create stops no GC of the lake: {p:?}"));
    assert!(!gc_all(&lake).await.contains(&object), "its intent keeps the object");
    // Within its deadline: `--no-wait` says when it can be resolved.
    let report =
        lake.engine.recover_writes_with(None, &RecoverOptions { wait: Wait::No, progress: None }).await.unwrap();
    assert!(
        matches!(&report.intents[0].resolution, Resolution::Pending { reason } if reason.contains("can be resolved from")),
        "{report:?}"
    );
    // Past it: fenced.
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Abandoned { proof: 1 });
    let ds = Dataset::open(&lake.engine.dataset_uri("fresh")).await.unwrap();
    assert_eq!((ds.version().version, ds.count_rows(None).await.unwrap()), (1, 0));
    lineage_complete(&lake).await.unwrap();
    assert!(gc_all(&lake).await.contains(&object));
    assert_nothing_referenced_is_missing(&lake, &["t", "fresh"], &[]).await;
    // `lake cleanup` of the table works; the retry appends.
    lake.engine.cleanup("fresh", Duration::ZERO).await.unwrap();
    let again = lake.upload("again", b"the retry").await;
    assert_eq!(lake.engine.append("fresh", one("e0", &again)).await.unwrap().version, 2);
}

/// The run's input: a gap in the version history after a pending intent's read version (a
/// manifest removed by pylance's cleanup) made the intent pending for ever and `lake cleanup`
/// refuse every time. A version that is gone no longer decides anything: resolution says the
/// write can no longer land, and cleanup runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_gap_after_an_intents_read_version_keeps_nothing_pending() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let killed = lake.upload("killed", b"killed").await;
    kill_after_intent(&lake, &hold, "t", &killed).await;
    let other = other_engine(&lake);
    for i in 0..2 {
        other.append("t", one(&format!("o{i}"), &lake.upload(&format!("o{i}"), b"o").await)).await.unwrap();
    }
    // Another client's cleanup removes versions 1 and 2 (Lance keeps the latest).
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.cleanup_old_versions(chrono::Duration::zero(), Some(false), Some(false)).await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.expect("cleanup is not refused");
    let report = engine_later(&lake, HOUR).recover_writes(None).await.unwrap();
    assert!(
        matches!(&report.intents[0].resolution, Resolution::CleanedUp { versions, .. } if versions.contains(&2)),
        "{report:?}"
    );
    assert!(intent_keys(&lake).await.is_empty());
    hold.release_all().await;
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

/// The run's input: `lake refs recover` waited silently up to 30 minutes behind a killed update
/// (Lance's commit timeout) and GC refused until then. Now an update's deadline is lake's
/// (at most 5 minutes), its landed version is journaled at once from its manifests (its intent
/// claims it), and recover announces each wait with its end, or reports with --no-wait.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_update_blocks_gc_for_no_time_and_recover_says_what_it_waits_for() {
    let mut lake = new_lake().await;
    // A short deadline, so that waiting for it is quick.
    lake.engine =
        LanceEngine::new(lake.store.clone()).with_memory_budget(2048).with_commit_deadline(Duration::from_secs(3));
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", one("e0", &first)).await.unwrap();
    let set: lake_lance::update::Assignment = "file = NULL".parse().unwrap();
    let stopped =
        failpoint::scope("commit.after_manifest", lake.engine.update("t", &[set], Some("episode = 'e0'"))).await;
    assert!(stopped.unwrap_err().to_string().contains("commit.after_manifest"));
    let (listed, _) = lake_store::intents::list(&lake.store, Some("t")).await.unwrap();
    assert_eq!(listed[0].intent.as_ref().unwrap().deadline_ms, 3000);
    // The default: the guard's margin clamped to at most 5 minutes, not Lance's 30.
    let guard = lake_store::guard::PublicationGuard::new(Duration::from_secs(7 * 86400));
    assert_eq!(lake_lance::commit::default_commit_deadline(&guard), Duration::from_secs(300));
    let report =
        lake.engine.recover_writes_with(None, &RecoverOptions { wait: Wait::No, progress: None }).await.unwrap();
    assert!(
        matches!(&report.versions[..], [v] if v.version == 2 && matches!(v.outcome, VersionRecovery::Journaled { .. })),
        "{report:?}"
    );
    assert!(
        matches!(&report.intents[0].resolution, Resolution::Pending { reason } if reason.contains("allowing it to wait")),
        "{report:?}"
    );
    lineage_complete(&lake).await.unwrap();
    let entry = lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().unwrap().unwrap();
    assert_eq!(entry.removed.iter().map(|r| r.identity.uri.clone()).collect::<Vec<_>>(), vec![first.key.clone()]);
    // Waiting: one announced wait (the 3 s deadline), then the intent is resolved.
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let options = RecoverOptions {
        wait: Wait::UntilDue,
        progress: Some(Arc::new(move |line: &str| seen.lock().unwrap().push(line.to_string()))),
    };
    let report = lake.engine.recover_writes_with(None, &options).await.unwrap();
    assert_eq!(report.intents[0].resolution, Resolution::Committed { version: 2 });
    let lines = lines.lock().unwrap().clone();
    assert!(
        !lines.is_empty() && lines[0].contains("waiting until") && lines[0].contains("without waiting"),
        "{lines:?}"
    );
}

/// The run's input: a GC apply that met a branch deleted meanwhile (its dataset gone, its
/// registry entry not yet) stopped with a bare "no dataset at ...". It now names the lineage
/// and says to plan again, deleting nothing more.
#[tokio::test(flavor = "multi_thread")]
async fn an_apply_that_meets_a_deleted_branch_says_so() {
    let (lake, _hold) = lake_with_branch().await;
    let orphan = lake.upload("orphan", b"an orphan").await;
    let options = lake_gc::unchecked::PlanOptions::new(lake.store.root(), Duration::from_secs(1), Utc::now() + HOUR);
    let inventory = lake_gc::inventory::for_store(&lake.store);
    let (plan, _) =
        lake_gc::unchecked::plan_with_unchecked_cutoff(&lake.engine, inventory.as_ref(), &options).await.unwrap();
    assert!(plan.lineage_complete && planned_objects(&plan).contains(&orphan.key), "{:?}", plan.problems);
    // Lance's part of the deletion only (the registry entry stays).
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.delete_branch("b").await.unwrap();
    let err = apply_fresh(&lake, &plan, &Default::default()).await.unwrap_err().to_string();
    assert!(err.contains("t@b") && err.contains("deleted since the plan") && !err.contains("no dataset"), "{err}");
    assert!(lake.store.head(&orphan.key).await.unwrap().is_some(), "nothing was deleted");
}

// ---------------------------------------------------------------------------------------------
// The protocol stopped at every step.

/// The steps of a write at which a failure point stops it (docs/protocol.md, "Steps").
const WRITE_STEPS: [&str; 6] = [
    "commit.after_intent",
    "commit.before_manifest",
    "commit.lost_manifest_response",
    "commit.after_manifest",
    "commit.after_entry",
    "commit.after_registry",
];

/// After a write stopped or killed: GC deletes nothing referenced or protected; a resolver (its
/// clock past every deadline) leaves nothing pending and lineage complete; the next write
/// commits; the journal equals full scans.
async fn check_after_stop(lake: &TestLake, what: &str, object: &ObjectIdentity) {
    let protected: Vec<ManagedObject> = if intent_keys(lake).await.is_empty() {
        Vec::new()
    } else {
        vec![ManagedObject {
            key: object.uri.clone(),
            sha256: object.sha256,
            size: object.size,
            last_modified: Utc::now(),
        }]
    };
    gc_all(lake).await;
    assert_nothing_referenced_is_missing(lake, &["t"], &protected.iter().collect::<Vec<_>>()).await;
    let report = engine_later(lake, HOUR).recover_writes(None).await.unwrap();
    assert_eq!((report.pending(), report.left()), (0, 0), "{what}: {report:?}");
    lineage_complete(lake).await.unwrap_or_else(|p| panic!("{what}: {p:?}"));
    gc_all(lake).await;
    assert_nothing_referenced_is_missing(lake, &["t"], &[]).await;
    let next = lake.upload("next", b"the next write").await;
    lake.engine.append("t", one("next", &next)).await.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(intent_keys(lake).await.is_empty(), "{what}");
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok(), "{what}");
}

async fn stopped_at_every_step(lake_at: impl Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = TestLake>>>) {
    for step in WRITE_STEPS {
        let lake = lake_at().await;
        lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
        let o = lake.upload("stopped", b"a write stopped at a step").await;
        let outcome = failpoint::scope(step, lake.engine.append("t", one("e1", &o))).await;
        match (step, &outcome) {
            // The manifest landed and its answer was lost: the writer's own resolution finds it.
            ("commit.lost_manifest_response", Ok(c)) => assert_eq!(c.version, 2),
            (_, Err(e)) => assert!(e.to_string().contains(step), "{step}: {e}"),
            (_, Ok(c)) => panic!("{step}: committed as {}", c.version),
        }
        check_after_stop(&lake, step, &o.identity()).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_write_stopped_at_every_step_of_the_protocol_loses_nothing() {
    stopped_at_every_step(|| Box::pin(new_lake())).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_a_write_stopped_at_every_step_of_the_protocol_loses_nothing() {
    stopped_at_every_step(|| Box::pin(crate::support::new_s3_lake("protocol-steps"))).await;
}

/// The same steps, the writer process killed there (`abort`, as `kill -9`).
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_killed_at_every_step_of_the_protocol_loses_nothing() {
    for step in WRITE_STEPS {
        let lake = new_lake().await;
        lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
        let (object, last) = finish(child_writer(&lake, "append", &[("LAKE_CRASHPOINT", step)]));
        assert!(last.is_empty(), "{step}: the child should have been killed: {last}");
        let meta = lake.store.head(&object).await.unwrap().expect("the child's upload");
        let bytes = lake.store.get(&object).await.unwrap().unwrap();
        let identity = ObjectIdentity::new(&object, <sha2::Sha256 as sha2::Digest>::digest(&bytes).into(), meta.size);
        check_after_stop(&lake, step, &identity).await;
    }
}

/// A resolver stopped at each of its steps (after the revocation, the fence, the journal, the
/// intent's removal): what it leaves is safe, and the next resolver finishes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_resolver_stopped_at_every_step_leaves_what_the_next_one_finishes() {
    for step in ["resolve.after_revoke", "resolve.after_fence", "resolve.after_journal", "resolve.after_intent_removed"]
    {
        for lands in [true, false] {
            let (lake, hold) = held_lake().await;
            let lake = Arc::new(lake);
            lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
            let killed = lake.upload("killed", b"killed").await;
            kill_after_intent(&lake, &hold, "t", &killed).await;
            if lands {
                assert_eq!(hold.release_all().await, vec![true]);
            }
            let later = engine_later(&lake, HOUR);
            let report = failpoint::scope(step, later.recover_writes(None)).await.unwrap();
            assert!(
                matches!(&report.intents[0].resolution, Resolution::Pending { reason } if reason.contains(step)),
                "{step}: {report:?}"
            );
            gc_all(&lake).await;
            let protected: Vec<&ManagedObject> =
                if intent_keys(&lake).await.is_empty() { vec![] } else { vec![&killed] };
            assert_nothing_referenced_is_missing(&lake, &["t"], &protected).await;
            let report = later.recover_writes(None).await.unwrap();
            assert_eq!((report.pending(), report.left()), (0, 0), "{step}: {report:?}");
            if !lands {
                assert_eq!(hold.release_all().await, vec![false], "{step}");
            }
            assert!(intent_keys(&lake).await.is_empty(), "{step}");
            assert_eq!(referenced(&lake, "t").await.contains(&killed.key), lands, "{step}");
            lineage_complete(&lake).await.unwrap_or_else(|p| panic!("{step}: {p:?}"));
            gc_all(&lake).await;
            assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
            assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok(), "{step}");
        }
    }
}
