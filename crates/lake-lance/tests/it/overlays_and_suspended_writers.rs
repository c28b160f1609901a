//! A second adversarial pass against the one write protocol (`lake_lance::commit`,
//! docs/protocol.md). Each test asserts the safety property (GC plans no object a retained
//! version references; a write that reported success keeps its rows; or a typed refusal); its
//! doc comment gives the exact interleaving and, for a finding, the line of the library that
//! allowed it.
//!
//! Findings (failed on def6d16; each is fixed and its test passes now):
//! - `a_data_overlay_carrying_the_lake_marker_is_diffed_not_journaled_as_empty`
//! - `a_plain_rewrite_that_adds_an_overlay_is_not_implied_empty`
//! - `a_write_held_while_its_branch_is_deleted_cannot_land_in_a_new_branch_of_its_name`
//!
//! New interleavings that pass (named `passes_*`): a writer suspended (`SIGSTOP`) after its
//! manifest landed, or after its entry, while a resolver whose clock is two hours ahead revokes,
//! fences, journals and concludes it, then GC applies, then the writer resumes; and a writer
//! suspended before its manifest write, resolved (fenced), then `lake cleanup` removes the
//! fence's version and the writer resumes (its manifest lands in the freed slot; the writer fails
//! with `sidecar_conflict` and GC refuses the table: safe, but see the test's comment).

use crate::intents::{assert_nothing_referenced_is_missing, held_lake, intent_keys};
use crate::protocol::{child_writer, finish, gc_all, signal, wait_stopped};
use crate::support::{engine_later, new_lake, TestLake, LATER};
use crate::truth::{referenced, scanned_keys};
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchIterator, RecordBatchReader, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_lance::commit::marker::CommitMarker;
use lake_lance::commit::Resolution;
use lake_lance::LanceEngine;
use lake_store::writer::ManagedObject;
use lance::dataset::transaction::{Operation, RewriteGroup, Transaction};
use lance::dataset::CommitBuilder;
use lance::Dataset;
use std::sync::Arc;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Helpers.

/// A table schema whose DataLocation column is NOT nullable (Lance's overlay writer refuses a
/// nullable struct; a non-nullable DataLocation column is an ordinary lake schema).
fn strict_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), data_location_field("file", false)]))
}

fn strict_rows(rows: &[(&str, &ManagedObject)]) -> Box<dyn RecordBatchReader + Send> {
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|(e, _)| *e)));
    let mut files = DataLocationBuilder::new();
    for (_, o) in rows {
        files.append(&o.key, o.sha256, o.size);
    }
    let batch = RecordBatch::try_new(strict_schema(), vec![episodes, Arc::new(files.finish())]).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(batch)], strict_schema()))
}

/// An object under a managed key minted `age` ago (a candidate of any plan once unreferenced).
async fn object_minted_ago(lake: &TestLake, name: &str, age: Duration) -> ManagedObject {
    let key = format!("objects/{}/{name}", ulid::Ulid::from_datetime(std::time::SystemTime::now() - age));
    let bytes = format!("{name}, uploaded long ago").into_bytes();
    lake.store.put(&key, bytes.clone()).await.unwrap();
    ManagedObject {
        key,
        sha256: <sha2::Sha256 as sha2::Digest>::digest(&bytes).into(),
        size: bytes.len() as u64,
        last_modified: chrono::Utc::now(),
    }
}

/// A data overlay on fragment `fragment` of `ds` setting the `file` cell of physical row
/// `offset` to `o` (Lance's public `FileFragment::write_overlay`).
async fn overlay_file_cell(
    ds: &Arc<Dataset>,
    fragment: usize,
    offset: u32,
    o: &ManagedObject,
) -> lance::dataset::transaction::DataOverlayGroup {
    let field = ds.schema().field("file").unwrap().id;
    let overlay_schema = ds.schema().project_by_ids(&[field], true);
    let mut writer = ds.get_fragment(fragment).unwrap().write_overlay(&overlay_schema).await.unwrap();
    let mut files = DataLocationBuilder::new();
    files.append(&o.key, o.sha256, o.size);
    let files = files.finish();
    let schema = Arc::new(Schema::new(vec![
        Field::new("_rowaddr", DataType::UInt64, false),
        Field::new("file", files.data_type().clone(), true),
    ]));
    let address = ((fragment as u64) << 32) | u64::from(offset);
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(vec![address])), Arc::new(files)]).unwrap();
    writer.write_batch(&batch).await.unwrap();
    writer.finish().await.unwrap().expect("one cell staged")
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

async fn latest(lake: &TestLake, table: &str) -> Dataset {
    Dataset::open(&lake.engine.dataset_uri(table)).await.unwrap()
}

// ---------------------------------------------------------------------------------------------
// Finding 1: a data overlay (Lance 14 `Operation::DataOverlay`, `Fragment::overlays`) changes
// cell values without changing a fragment's data files, row count or deletion vector.
// `version_diff::compare_fragments` sees the fragment changed (`new != old` includes overlays)
// and hands it to `grown_deletions`, which compares only `files`, `physical_rows` and the
// deletion vectors (crates/lake-lance/src/version_diff.rs, `grown_deletions`: `if old.files !=
// new.files || old.physical_rows != new.physical_rows { return Ok(None) }`): both deletion
// vectors are empty, so it answers "a grown deletion vector that removed no row", and the
// version's entry computed "from what the version is" is EMPTY. Every entry the protocol
// computes from manifests (`committed_entry`: recovery, resolution, Journal::Manifests) and the
// implied entries of `foreign::proven_against_previous` (a `Rewrite` is judged by `diff_entry`)
// inherit the blind spot.

/// Input: table `t` (a non-nullable DataLocation column) with rows e0 -> a, e1 -> b. Another
/// Lance client commits version 2: a `DataOverlay` on fragment 0 that sets e1's `file` cell to
/// `c`, an object minted two days ago and referenced by nothing, its transaction carrying the
/// lake's marker (`lake.writer`, `lake.root`, `lake.operation`, `lake.write`: properties any
/// client can set; docs/protocol.md says the entry is what the version is, so a forged marker
/// "gains nothing"). `lake refs recover` journals version 2 (`recover::recover_version`: the
/// marker names this root) from `version_diff::committed_entry`, which computes an empty delta;
/// the guard check there sees no added reference, so the two-day-old `c` passes too.
///
/// Observed: version 2's entry is empty; the journal says the lake references a and b, the
/// latest version references a and c; GC (lineage complete) plans and deletes `c`, which the
/// latest version references. Suggested fix: in `grown_deletions` (and
/// `foreign::proven_against_previous`), treat a fragment whose `overlays` (or any field other
/// than the deletion file) changed as rewritten (scan it in both versions), or refuse to journal
/// a version whose manifest carries overlays lake cannot diff.
///
/// Fix: `grown_deletions` compares overlays too (a fragment whose overlays changed is scanned in
/// both versions); version 2's entry removes b and adds c, and the guard refuses the two-day-old
/// c: the version stays a lineage problem and GC refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_data_overlay_carrying_the_lake_marker_is_diffed_not_journaled_as_empty() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    lake.engine.append("t", strict_rows(&[("e0", &a), ("e1", &b)])).await.unwrap();
    let c = object_minted_ago(&lake, "c.bin", Duration::from_secs(2 * 86400)).await;
    // The other client's overlay, marked as lake's.
    let ds = Arc::new(latest(&lake, "t").await);
    let group = overlay_file_cell(&ds, 0, 1, &c).await;
    let mut tx = Transaction::new(ds.version().version, Operation::DataOverlay { groups: vec![group] }, None);
    CommitMarker::new(&lake.store.root().to_string(), "update", &ulid::Ulid::new().to_string()).set_on(&mut tx);
    let v2 = CommitBuilder::new(ds.clone()).with_skip_auto_cleanup(true).execute(tx).await.unwrap();
    assert_eq!(v2.version().version, 2);
    let now = scanned_keys(&latest(&lake, "t").await).await;
    assert!(now.contains(&c.key) && !now.contains(&b.key), "premise: version 2 references c instead of b: {now:?}");
    // An operator (or the next write's step 1) journals version 2 from its manifests.
    let report = lake.engine.recover_writes(None).await.unwrap();
    let entry = lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap();
    let verify = lake.engine.verify_refs(&[]).await.unwrap();
    // GC at a cutoff an hour ahead.
    let planned = gc_all(&lake).await;
    assert!(
        !planned.contains(&c.key) && lake.store.head(&c.key).await.unwrap().is_some(),
        "GC deleted {}, which the latest version of `t` references (through a data overlay).\n\
         recover: {:?}\nentry of version 2: {entry:?}\nverify: ok={}",
        c.key,
        report.versions,
        verify.is_ok()
    );
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

/// Input: the same table, its rows in two fragments (e0 -> a, e1 -> b in fragment 0; e2 -> d in
/// fragment 1). A plain Lance client (no marker, no intent, no file of lake's touched) commits
/// version 3: a `Rewrite` whose one group replaces fragment 1 by fragment 1 with an overlay that
/// sets e2's `file` cell to `c` (minted two days ago). Its row counts match (1 row, no
/// deletions: `foreign::preserves_content` accepts it), and `foreign::proven_against_previous`
/// judges a rewrite by `diff_entry`, which computes an empty delta for the overlaid fragment
/// (Finding 1). So the version is an implied empty entry of the journal: no lineage problem,
/// no `lake refs repair`.
///
/// Observed: GC's lineage is complete; it plans and deletes `c`, which the latest version
/// references. Suggested fix: as above (`grown_deletions` must not treat a fragment whose
/// overlays changed as an unchanged one); `preserves_content` could also refuse a `Rewrite`
/// whose new fragments carry overlays or reuse old fragment ids.
///
/// Fix: as above, and `foreign::preserves_content` refuses a rewrite whose new fragments carry
/// overlays: the version is a lineage problem, and GC refuses.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_rewrite_that_adds_an_overlay_is_not_implied_empty() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let d = lake.upload("d.bin", b"d").await;
    lake.engine.append("t", strict_rows(&[("e0", &a), ("e1", &b)])).await.unwrap();
    lake.engine.append("t", strict_rows(&[("e2", &d)])).await.unwrap();
    let c = object_minted_ago(&lake, "c.bin", Duration::from_secs(2 * 86400)).await;
    let ds = Arc::new(latest(&lake, "t").await);
    let old = ds.manifest().fragments.iter().find(|f| f.id == 1).expect("premise: fragment 1").clone();
    let group = overlay_file_cell(&ds, 1, 0, &c).await;
    let mut new = old.clone();
    new.overlays = group.overlays;
    let op = Operation::Rewrite {
        groups: vec![RewriteGroup { old_fragments: vec![old], new_fragments: vec![new] }],
        rewritten_indices: vec![],
        frag_reuse_index: None,
    };
    let v3 = CommitBuilder::new(ds.clone())
        .with_skip_auto_cleanup(true)
        .execute(Transaction::new(ds.version().version, op, None))
        .await
        .unwrap();
    assert_eq!(v3.version().version, 3);
    let now = scanned_keys(&latest(&lake, "t").await).await;
    assert!(now.contains(&c.key) && !now.contains(&d.key), "premise: version 3 references c instead of d: {now:?}");
    let complete = lineage_complete(&lake).await;
    let planned = gc_all(&lake).await;
    assert!(
        !planned.contains(&c.key) && lake.store.head(&c.key).await.unwrap().is_some(),
        "GC deleted {}, which the latest version of `t` references (a plain client's rewrite adding an \
         overlay, taken for an implied empty entry). lineage complete before: {complete:?}",
        c.key
    );
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
}

// ---------------------------------------------------------------------------------------------
// Finding 2: a branch deleted and created again under the same name while a write to it is
// between its last liveness check and its manifest write.
//
// The fence argument (docs/protocol.md, "Revocation") needs every slot up to the fence to stay
// taken; `lake branch delete` removes the branch's folder (every slot freed), and the doc's
// answer for a late manifest, "its writer's step 9 then refuses (the branch is no longer
// registered)", rests on the registry entry of the NAME `t@b` (`publish.rs`, `publish`: `if
// branch && !registers && registry::current(self.store(), table).await?.is_none()`). A branch
// created again under that name is registered again, and its first version has the source's
// number, so the late manifest's slot is free there.

/// Input: `t` (e0 -> first), branch `b` from version 1 (`t@b` version 1). A write to `t@b` (an
/// append of e1 -> paused) passes its liveness check and its manifest write for `t@b` slot 2 is
/// held in flight (a slow PUT). Another process runs `lake branch delete t b` (revokes the
/// write, fences `t@b` at slot 2, concludes "abandoned", deletes the branch's folder with the
/// write's data file, forgets its journal and registry), then `lake branch create t b 1` (a new
/// `t@b`, version 1, registered). The held PUT is released: slot 2 of the new branch is free.
///
/// Observed: the manifest lands as version 2 of the new branch; the writer's step 9 finds `t@b`
/// registered, journals version 2 as its delta, advances the registry and reports success ("as
/// version 2"); but version 2 names the data file that the deletion removed: the rows the write
/// reported committed are lost, and the new branch's latest version cannot be read. Suggested
/// fix: bind a write to the branch's incarnation, not its name (the registry entry's creation id,
/// or the Lance branch document's identifier, recorded in the intent and compared in `publish`
/// before the entry; or check in `publish` that the committed manifest's read version is the
/// one the write read from this incarnation), and refuse (and remove the version) otherwise.
///
/// Fix: a branch name is used once (`lake_store::layout::deleted_branch_key`): deleting a
/// registered branch spends its name before Lance deletes it, a write to a branch starts only
/// while the branch is registered, and `create_branch` refuses a spent name. The held manifest
/// lands in the deleted branch's folder, its writer fails, and `lake branch delete` removes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_held_while_its_branch_is_deleted_cannot_land_in_a_new_branch_of_its_name() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    lake.engine
        .append(
            "t",
            crate::support::reader(vec![crate::support::batch(&[("e0", Some(&lake.upload("first", b"first").await))])]),
        )
        .await
        .unwrap();
    lake.engine.create_branch("t", "b", &lake_lance::branch::BranchSource::Version(1)).await.unwrap();
    let paused = lake.upload("paused", b"a write to the branch").await;
    hold.set(crate::hold::Mode::Hold);
    let writer = {
        let (lake, paused) = (lake.clone(), paused.clone());
        tokio::spawn(async move {
            lake.engine
                .append("t@b", crate::support::reader(vec![crate::support::batch(&[("e1", Some(&paused))])]))
                .await
        })
    };
    hold.wait_held(1).await;
    hold.set(crate::hold::Mode::Off);
    let other = LanceEngine::new(lake.store.clone()).with_memory_budget(2048);
    other.delete_branch("t", "b").await.unwrap();
    // Fixed: the deletion spent the name; a new branch `b` is refused, typed and named.
    let again = other.create_branch("t", "b", &lake_lance::branch::BranchSource::Version(1)).await;
    assert!(
        matches!(&again, Err(lake_lance::LanceEngineError::InvalidInput(m)) if m.contains("used once")),
        "a deleted branch's name must be refused: {again:?}"
    );
    // A branch of another name is what the operator makes instead.
    other.create_branch("t", "b2", &lake_lance::branch::BranchSource::Version(1)).await.unwrap();
    let landed = hold.release_all().await;
    let outcome = writer.await.unwrap();
    if let Ok(committed) = &outcome {
        // Success was reported: the write's row must be in the branch.
        let uri = lake.engine.dataset_uri("t@b");
        let scan = async {
            let ds = Dataset::open(&uri).await.map_err(|e| e.to_string())?;
            let version = ds.version().version;
            let mut stream = ds.scan().try_into_stream().await.map_err(|e| e.to_string())?;
            let mut rows = 0usize;
            while let Some(b) = futures::TryStreamExt::try_next(&mut stream).await.map_err(|e| e.to_string())? {
                rows += b.num_rows();
            }
            Ok::<_, String>((version, rows))
        }
        .await;
        panic!(
            "the write reported success as version {} of the re-created branch (held manifest landed: {landed:?}); \
             scanning `t@b` now gives {scan:?} (expected the rows of version 1 plus the write's row)",
            committed.version
        );
    }
    // A typed failure is the safe outcome. The late manifest, if it landed, is in the deleted
    // branch's folder: GC refuses until `lake branch delete` removes what is left of it.
    eprintln!("held manifest landed: {landed:?}; writer: {outcome:?}");
    if lake.engine.delete_branch("t", "b").await.is_ok() {
        eprintln!("removed what was left of the deleted branch");
    }
    assert_eq!(lineage_complete(&lake).await, Ok(()));
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t", "t@b2"], &[]).await;
}

// ---------------------------------------------------------------------------------------------
// New interleavings that pass: a writer suspended after its manifest landed.

/// PASSES (new interleaving). A child writer's append lands its manifest (version 2) and stops
/// itself (`SIGSTOP`) at `commit.after_manifest`, before its entry. A resolver whose store clock
/// reads two hours ahead revokes it, fences (version 3), journals version 2 from its manifests,
/// finds it committed, removes the intent and the write's log (its entry does not name it); GC
/// applies at a cutoff an hour ahead; the writer resumes (`SIGCONT`): its head meets the
/// resolver's entry bound to the same manifest and accepts it; it reports version 2, its row is
/// there, nothing referenced is missing, and the journal equals the scans.
#[tokio::test(flavor = "multi_thread")]
async fn passes_a_writer_suspended_after_its_manifest_landed_is_journaled_by_a_resolver_and_resumes() {
    suspended_after_landing("commit.after_manifest").await;
}

/// PASSES (new interleaving). The same, the writer stopped at `commit.after_entry` (its own
/// head written, the registry not advanced, its intent not removed): the resolver finds every
/// version journaled, concludes "committed", keeps the log the head names; the writer resumes,
/// advances the registry and removes an intent that is gone already.
#[tokio::test(flavor = "multi_thread")]
async fn passes_a_writer_suspended_after_its_entry_is_concluded_by_a_resolver_and_resumes() {
    suspended_after_landing("commit.after_entry").await;
}

async fn suspended_after_landing(point: &str) {
    let lake = new_lake().await;
    let first = lake.upload("first", b"first").await;
    lake.engine
        .append("t", crate::support::reader(vec![crate::support::batch(&[("e0", Some(&first))])]))
        .await
        .unwrap();
    let child = child_writer(&lake, "append", &[("LAKE_PAUSEPOINT", point)]);
    let pid = child.id();
    wait_stopped(pid).await;
    assert_eq!(intent_keys(&lake).await.len(), 1, "{point}: the writer's intent exists");
    let report = engine_later(&lake, LATER).recover_writes(None).await.unwrap();
    assert!(
        matches!(report.intents[..], [ref i] if i.resolution == Resolution::Committed { version: 2 }),
        "{point}: {report:?}"
    );
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    signal(pid, "-CONT");
    let (object, last) = finish(child);
    assert_eq!(last, "ok 2", "{point}: the resumed writer reports its version");
    assert!(referenced(&lake, "t").await.contains(&object), "{point}: the write's row is there");
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("{point}: {p:?}"));
    gc_all(&lake).await;
    assert!(lake.store.head(&object).await.unwrap().is_some(), "{point}: the write's object was deleted");
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok(), "{point}: journal != scans");
    assert!(intent_keys(&lake).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// PASSES (new interleaving, a weak point): the fence's slots freed by `lake cleanup`.
//
// The fence argument needs every slot up to the fence to stay taken until the write can no
// longer retry. `lake cleanup` (Lance's `cleanup_old_versions`) deletes the manifests of old
// versions, the fence's included, once a later version exists: a manifest write that passed its
// liveness check before the revocation and is released after the cleanup finds its slot free.

/// Input: `t` (e0 -> first, version 1). A child writer appends (`op`) and stops itself
/// (`SIGSTOP`) at `commit.before_manifest`: its liveness check passed, its manifest write is
/// next. A resolver whose store clock reads two hours ahead revokes it, fences (version 2) and
/// concludes "abandoned". Another write appends e2 (version 3). `lake cleanup t --older-than 0`
/// removes versions 1 and 2. The writer resumes (`SIGCONT`).
///
/// Safe outcome: the writer reports a failure (its slot is taken, or its intent gone), or, if it
/// reports success, its row is in the table; GC deletes nothing referenced.
///
/// Observed (passes, but the fence argument of docs/protocol.md does not hold here): the late
/// manifest LANDS in the freed slot (the version cleanup removed comes back, below the latest,
/// holding the write's row); the writer then fails with `sidecar_conflict` (the fence's entry
/// was kept, bound to the fence's manifest), not `revoked`; GC refuses the table with "the
/// table's Lance files were replaced under its journal (copied from another table or another
/// backup)" until an operator cleans the resurrected version up again. Safe only because the
/// sidecars of cleaned-up versions are never removed.
async fn suspended_writer_released_after_cleanup(op: &str, table: &str) {
    let lake = new_lake().await;
    let first = lake.upload("first", b"first").await;
    if op == "append" {
        lake.engine
            .append("t", crate::support::reader(vec![crate::support::batch(&[("e0", Some(&first))])]))
            .await
            .unwrap();
    }
    let child = child_writer(&lake, op, &[("LAKE_PAUSEPOINT", "commit.before_manifest")]);
    let pid = child.id();
    wait_stopped(pid).await;
    let report = engine_later(&lake, LATER).recover_writes(None).await.unwrap();
    // Before pause points stopped their own thread (`lake_store::failpoint::step`), a
    // process-directed SIGSTOP let the writing thread run on past the step about once in ten runs
    // under load: the child was found stopped with its version landed.
    assert!(
        matches!(report.intents[..], [ref i] if matches!(i.resolution, Resolution::Abandoned { .. })),
        "the {op} stopped at commit.before_manifest must be resolved as abandoned: {report:?}"
    );
    let later = lake.upload("later", b"a later write").await;
    lake.engine
        .append(table, crate::support::reader(vec![crate::support::batch(&[("e2", Some(&later))])]))
        .await
        .unwrap();
    let cleaned = lake.engine.cleanup(table, Duration::ZERO).await.unwrap();
    assert!(cleaned.old_versions >= 1, "premise: cleanup removed the fence's version: {cleaned:?}");
    signal(pid, "-CONT");
    let (object, last) = finish(child);
    let versions: Vec<u64> = lake.engine.versions(table).await.unwrap().iter().map(|v| v.version).collect();
    let now = scanned_keys(&latest(&lake, table).await).await;
    eprintln!("{op}: resumed writer said {last:?}; versions {versions:?}; cleanup {cleaned:?}");
    if last.starts_with("ok ") {
        assert!(
            now.contains(&object),
            "the suspended {op} reported success ({last}) after its fence's slot was freed by cleanup, but its \
             row is not in the table: versions now {versions:?}, latest references {now:?}"
        );
    }
    let complete = lineage_complete(&lake).await;
    eprintln!("{op}: GC lineage after the late manifest: {complete:?}");
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &[table], &[]).await;
    // The runbook's answer to a late manifest below the latest version (docs/protocol.md,
    // "Cleanup and late manifests", and the lineage problem's message): `lake cleanup` removes
    // it again, and GC goes on.
    lake.engine.cleanup(table, Duration::ZERO).await.unwrap();
    assert_eq!(lineage_complete(&lake).await, Ok(()), "{op}: after cleaning the late version up");
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &[table], &[]).await;
}

/// See [`suspended_writer_released_after_cleanup`]: an append.
#[tokio::test(flavor = "multi_thread")]
async fn passes_an_append_suspended_before_its_manifest_write_lands_in_a_slot_freed_by_cleanup() {
    suspended_writer_released_after_cleanup("append", "t").await;
}

/// See [`suspended_writer_released_after_cleanup`]: a first ingest (create of `fresh`), fenced
/// by the resolver's empty version 1, which the cleanup then removes (the create's gate lets a
/// create publish version 1 only, and that slot is free again).
#[tokio::test(flavor = "multi_thread")]
async fn passes_a_create_suspended_before_its_manifest_write_lands_in_a_slot_freed_by_cleanup() {
    suspended_writer_released_after_cleanup("create", "fresh").await;
}
