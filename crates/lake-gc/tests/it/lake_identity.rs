//! A lake has an identity (`lake_id`, minted when it is created): a lake deleted and created
//! again at the same root is another lake. Plans and checkpoints are bound to it, so a
//! checkpoint of the old lake is replaced by the new lake's apply instead of sending the
//! operator round in a circle ("plan again" / "finish the recorded apply first"). One apply
//! owns a checkpoint at a time.

use crate::refused;
use lake_common::ErrorKind;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::ManagedObjectWriter;
use lake_store::LakeStore;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn horizon() -> Horizon {
    Horizon::new(Duration::from_secs(3600))
}

/// A lake at `root` with a one-hour floor and `orphans` unreferenced objects.
async fn create(root: &Path, orphans: usize) -> LakeStore {
    let store = LakeStore::open(root.to_str().unwrap()).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    let writer = ManagedObjectWriter::new(store.clone());
    for i in 0..orphans {
        writer.upload(&format!("o{i}.bin"), &b"o"[..]).await.unwrap();
    }
    store
}

async fn collector<'e>(store: &LakeStore, engine: &'e MemoryEngine) -> GarbageCollector<'e> {
    // Opened on a fresh store value each time: the descriptor is read as the lake is now.
    let store = LakeStore::open(store.root().to_string().as_str()).unwrap();
    GarbageCollector::open(store, engine)
        .await
        .unwrap()
        .with_unchecked_clock(FixedClock(chrono::Utc::now() + chrono::Duration::hours(2)))
}

fn ckpt(dir: &Path, name: &str) -> CheckpointLocation {
    CheckpointLocation::parse(dir.join(name).to_str().unwrap()).unwrap()
}

/// An unfinished apply of a lake that is then deleted and created again at the same root.
async fn unfinished_apply_of_a_deleted_lake(dir: &Path, engine: &MemoryEngine) -> (PathBuf, LakeStore) {
    let root = dir.join("lake");
    let old = create(&root, 3).await;
    let gc = collector(&old, engine).await;
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let stop_early = ApplyOptions { page_size: 1, max_pages: Some(1), ..ApplyOptions::default() };
    let first = gc.apply(&plan, &horizon(), &ckpt(dir, "gc.ckpt"), &stop_early).await.unwrap();
    assert!(!first.checkpoint.complete);
    drop(gc);
    std::fs::remove_dir_all(&root).unwrap();
    let new = create(&root, 2).await;
    (root, new)
}

/// The run's input: the old lake's unfinished checkpoint neither blocks the new lake's apply
/// nor is resumed against it. A scheduled run (resume what is unfinished, else plan and apply)
/// plans anew and its apply replaces the record, saying so.
#[tokio::test]
async fn a_checkpoint_of_a_lake_deleted_and_created_again_is_replaced_by_the_new_lakes_apply() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MemoryEngine::new();
    let (_, new) = unfinished_apply_of_a_deleted_lake(dir.path(), &engine).await;
    let gc = collector(&new, &engine).await;
    let at = ckpt(dir.path(), "gc.ckpt");
    assert!(gc.resume_unfinished(&horizon(), &at, &ApplyOptions::default()).await.unwrap().is_none());
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    assert_eq!(plan.lake_id.as_deref(), Some(gc.policy().identity().as_str()));
    let done = gc.apply(&plan, &horizon(), &at, &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == 2, "{:?}", done.checkpoint);
    assert!(done.replaced.as_ref().is_some_and(|r| r.other_lake), "{:?}", done.replaced);
}

/// Resuming the old lake's checkpoint explicitly is refused, saying that a new plan's apply
/// replaces it (not "finish the recorded apply first"); nothing is deleted.
#[tokio::test]
async fn resuming_a_checkpoint_of_a_deleted_lake_says_a_new_apply_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MemoryEngine::new();
    let (root, new) = unfinished_apply_of_a_deleted_lake(dir.path(), &engine).await;
    let gc = collector(&new, &engine).await;
    let err = gc.resume(&horizon(), &ckpt(dir.path(), "gc.ckpt"), &ApplyOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("replaces this record"), "{err}");
    refused(err, ErrorKind::BoundToRoot);
    let objects = walk(&root.join("objects"));
    assert_eq!(objects, 2, "nothing deleted");
}

/// A plan of the deleted lake is refused by the lake created again at its root (same root
/// string, another identity); a plan that records none (an earlier build's) is taken for the
/// lake now at its root, and applied after the usual revalidation.
#[tokio::test]
async fn a_plan_of_a_deleted_lake_is_refused_by_the_lake_created_again() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MemoryEngine::new();
    let root = dir.path().join("lake");
    let old = create(&root, 1).await;
    let old_plan = collector(&old, &engine).await.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    std::fs::remove_dir_all(&root).unwrap();
    let new = create(&root, 1).await;
    let gc = collector(&new, &engine).await;
    assert_eq!(old_plan.root, gc.store().root().to_string());
    let err = gc.apply(&old_plan, &horizon(), &ckpt(dir.path(), "a"), &ApplyOptions::default()).await.unwrap_err();
    assert!(err.to_string().contains("deleted and created again"), "{err}");
    refused(err, ErrorKind::BoundToRoot);
    assert_eq!(walk(&root.join("objects")), 1, "nothing deleted");
    let mut anonymous = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    anonymous.lake_id = None;
    let done = gc.apply(&anonymous, &horizon(), &ckpt(dir.path(), "b"), &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == 1);
}

/// A checkpoint copied from another lake (another root) to this lake's checkpoint path is
/// another lake's record: a scheduled run does not resume it, and its apply replaces it.
#[tokio::test]
async fn a_checkpoint_copied_from_another_lake_is_replaced_not_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MemoryEngine::new();
    let other = create(&dir.path().join("other"), 3).await;
    let gc_other = collector(&other, &engine).await;
    let plan = gc_other.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let stop_early = ApplyOptions { page_size: 1, max_pages: Some(1), ..ApplyOptions::default() };
    gc_other.apply(&plan, &horizon(), &ckpt(dir.path(), "theirs.ckpt"), &stop_early).await.unwrap();
    for suffix in ["", ".plan.json"] {
        std::fs::copy(dir.path().join(format!("theirs.ckpt{suffix}")), dir.path().join(format!("ours.ckpt{suffix}")))
            .unwrap();
    }
    let ours = create(&dir.path().join("ours"), 1).await;
    let gc = collector(&ours, &engine).await;
    let at = ckpt(dir.path(), "ours.ckpt");
    assert!(gc.resume_unfinished(&horizon(), &at, &ApplyOptions::default()).await.unwrap().is_none());
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let done = gc.apply(&plan, &horizon(), &at, &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.replaced.is_some_and(|r| r.other_lake));
    assert_eq!(walk(&dir.path().join("other/objects")), 2, "the other lake keeps what its apply left");
}

/// While one apply holds a checkpoint, another apply or resume of it is refused and deletes
/// nothing; once the holder ends (here: drops its lock, as a process that ends or crashes
/// does), the next apply proceeds.
#[tokio::test]
async fn one_apply_owns_a_checkpoint_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let engine = MemoryEngine::new();
    let store = create(&dir.path().join("lake"), 2).await;
    let gc = collector(&store, &engine).await;
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let at = ckpt(dir.path(), "gc.ckpt");
    let running = at.hold(gc.store()).unwrap().own().unwrap();
    let busy = |r: Result<lake_gc::apply::ApplyReport, GcError>| match r {
        Err(GcError::Checkpoint { message, .. }) => assert!(message.contains("another apply is running"), "{message}"),
        other => panic!("expected the checkpoint to be busy, got {other:?}"),
    };
    busy(gc.apply(&plan, &horizon(), &at, &ApplyOptions::default()).await);
    let resumed = gc.resume(&horizon(), &at, &ApplyOptions::default()).await;
    busy(resumed.map(|r| r.expect("a report")));
    // A second hold in this process is refused too.
    assert!(at.hold(gc.store()).unwrap().own().is_err());
    assert_eq!(walk(&dir.path().join("lake/objects")), 2, "nothing deleted while it was busy");
    // No checkpoint takes the name of the lock file (whose saves would replace it and let a
    // second apply lock the new file) or of a plan document.
    for name in ["gc.ckpt.lock", "gc.ckpt.plan.json"] {
        assert!(CheckpointLocation::parse(dir.path().join(name).to_str().unwrap()).is_err(), "{name}");
    }
    drop(running);
    let done = gc.apply(&plan, &horizon(), &at, &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == 2);
}

/// Files under `dir`, at any depth.
fn walk(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.flatten().map(|e| if e.file_type().unwrap().is_dir() { walk(&e.path()) } else { 1 }).sum()
        })
        .unwrap_or(0)
}
