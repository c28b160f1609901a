//! A document lands in the folder that was checked, whatever happens to its path afterwards:
//! plans, metrics files, sharded plans and checkpoints are written relative to a folder handle
//! held from the check on (`lake_store::outside`), so a symbolic link re-pointed into the lake
//! during a run (once, or in a loop) writes nothing there; an overlay whose upper layer is a
//! folder of the lake is judged inside the lake by where its writes land.

use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::deleter::{DeleteOutcome, ObjectDeleter};
use lake_gc::output::{DocumentKind, OutputPath};
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::ManagedObjectWriter;
use lake_store::{LakeStore, StoreError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct Lake {
    dir: tempfile::TempDir,
    root: PathBuf,
    store: LakeStore,
    /// A live object's folder (`objects/<ULID>`) holding files named like the documents.
    live: PathBuf,
}

const LIVE: &[u8] = b"a live object";

/// A lake with a one-hour floor, `orphans` unreferenced objects and a folder of young objects
/// named `ckpt`, `ckpt.plan.json`, `plan.json`, `metrics.prom` and `manifest.json`.
async fn lake(orphans: usize) -> Lake {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake");
    let store = LakeStore::open(root.to_str().unwrap()).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    let writer = ManagedObjectWriter::new(store.clone());
    for i in 0..orphans {
        writer.upload(&format!("o{i}.bin"), &b"o"[..]).await.unwrap();
    }
    // Minted three hours from now: young for every collector here (its clock is two hours
    // ahead, its horizon one hour), so never a candidate, as a referenced object would not be.
    let minted = chrono::Utc::now().timestamp_millis() as u64 + 3 * 3600 * 1000;
    let live = root.join(format!("objects/{}", ulid::Ulid::from_parts(minted, 7)));
    std::fs::create_dir_all(&live).unwrap();
    for name in ["ckpt", "ckpt.plan.json", "plan.json", "metrics.prom", "manifest.json"] {
        std::fs::write(live.join(name), LIVE).unwrap();
    }
    let root = root.canonicalize().unwrap();
    let live = live.canonicalize().unwrap();
    Lake { dir, root, store, live }
}

impl Lake {
    fn outside(&self, name: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    /// The live folder holds its objects, unchanged, and nothing else (no temporary file).
    fn assert_live_untouched(&self) {
        let mut names: Vec<String> =
            std::fs::read_dir(&self.live).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, ["ckpt", "ckpt.plan.json", "manifest.json", "metrics.prom", "plan.json"]);
        for name in &names {
            assert_eq!(std::fs::read(self.live.join(name)).unwrap(), LIVE, "{name} was overwritten");
        }
    }
}

/// Points the symbolic link `link` at `target`, replacing it.
fn repoint(link: &Path, target: &Path) {
    let tmp = link.with_extension("new");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

fn collector<'e>(l: &Lake, engine: &'e MemoryEngine) -> impl std::future::Future<Output = GarbageCollector<'e>> {
    let store = l.store.clone();
    async move {
        GarbageCollector::open(store, engine)
            .await
            .unwrap()
            .with_unchecked_clock(FixedClock(chrono::Utc::now() + chrono::Duration::hours(2)))
    }
}

/// A deleter that re-points a link before its first page, then deletes as the store's does.
struct RepointFirst {
    inner: Box<dyn ObjectDeleter>,
    link: PathBuf,
    target: PathBuf,
    done: AtomicBool,
}

#[async_trait::async_trait]
impl ObjectDeleter for RepointFirst {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        if !self.done.swap(true, Ordering::SeqCst) {
            repoint(&self.link, &self.target);
        }
        self.inner.delete_batch(keys).await
    }
}

/// The fourth adversarial run's input: `--checkpoint link/ckpt` with `link` pointing outside,
/// re-pointed at a live object's folder once the apply has started. Every later checkpoint
/// save lands in the folder that was checked; the live objects named `ckpt` and
/// `ckpt.plan.json` are untouched.
#[tokio::test]
async fn a_checkpoint_link_repointed_during_an_apply_writes_nothing_into_the_lake() {
    let l = lake(5).await;
    let engine = MemoryEngine::new();
    let outside = l.outside("checkpoints");
    let link = l.dir.path().join("link");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let deleter = RepointFirst {
        inner: lake_gc::deleter::for_store(&l.store),
        link: link.clone(),
        target: l.live.clone(),
        done: AtomicBool::new(false),
    };
    let gc = collector(&l, &engine).await.with_deleter(Box::new(deleter));
    let horizon = Horizon::new(Duration::from_secs(3600));
    let plan = gc.plan(&horizon, &PlanSettings::default()).await.unwrap().plan;
    assert_eq!(plan.candidates.len(), 5);
    let at = CheckpointLocation::parse(link.join("ckpt").to_str().unwrap()).unwrap();
    // One key a page: a checkpoint save after each, all after the link moved.
    let options = ApplyOptions { page_size: 1, ..ApplyOptions::default() };
    let done = gc.apply(&plan, &horizon, &at, &options).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == 5, "{:?}", done.checkpoint);
    l.assert_live_untouched();
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(outside.join("ckpt")).unwrap()).unwrap();
    assert_eq!(saved["complete"], true, "the checked folder holds the finished checkpoint");
}

/// The same link swapped back and forth in a loop while a dry run writes its plan (the run's
/// second input): every write lands in the folder checked first, none in the lake, and no
/// temporary file is left among the objects.
#[tokio::test]
async fn a_link_swapped_in_a_loop_during_a_dry_run_writes_nothing_into_the_lake() {
    let l = lake(2).await;
    let engine = MemoryEngine::new();
    let gc = collector(&l, &engine).await;
    let plan = gc.plan(&Horizon::new(Duration::from_secs(3600)), &PlanSettings::default()).await.unwrap().plan;
    let outside = l.outside("plans");
    let link = l.dir.path().join("out");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let out = OutputPath::new(link.join("plan.json"));
    out.check(l.store.root(), DocumentKind::Plan).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, link, live, outside) = (stop.clone(), link.clone(), l.live.clone(), outside.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::SeqCst) || swaps < 2 {
                repoint(&link, if swaps.is_multiple_of(2) { &live } else { &outside });
                swaps += 1;
            }
        })
    };
    for _ in 0..50 {
        plan.save(&out).unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    swapper.join().unwrap();
    l.assert_live_untouched();
    assert_eq!(std::fs::read(outside.join("plan.json")).unwrap(), plan.to_document().unwrap());
}

/// A metrics file's link re-pointed between its check and its write: the write lands where it
/// was checked.
#[tokio::test]
async fn a_metrics_file_is_written_where_it_was_checked() {
    let l = lake(0).await;
    let outside = l.outside("metrics");
    let link = l.dir.path().join("m");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let out = OutputPath::new(link.join("metrics.prom"));
    out.check(l.store.root(), DocumentKind::Metrics).unwrap();
    repoint(&link, &l.live);
    out.write(l.store.root(), DocumentKind::Metrics, |w| w.write_all(b"lake_gc_runs 1\n")).unwrap();
    l.assert_live_untouched();
    assert_eq!(std::fs::read(outside.join("metrics.prom")).unwrap(), b"lake_gc_runs 1\n");
}

/// A sharded plan's folder re-pointed after it was prepared: every shard and the manifest land
/// in the prepared folder.
#[tokio::test]
async fn a_sharded_plan_is_written_into_the_folder_that_was_prepared() {
    let l = lake(3).await;
    let engine = MemoryEngine::new();
    let gc = collector(&l, &engine).await;
    let horizon = Horizon::new(Duration::from_secs(3600));
    let sharded = gc.plan_sharded(&horizon, &PlanSettings::default(), 2).await.unwrap().plan;
    let outside = l.outside("shards");
    let link = l.dir.path().join("s");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let out = OutputPath::new(&link);
    out.prepare_folder(l.store.root()).unwrap();
    repoint(&link, &l.live);
    sharded.save_to(&out).unwrap();
    l.assert_live_untouched();
    assert!(outside.join("manifest.json").is_file());
}

/// An overlay mount whose upper layer is a folder of the lake (writes into the overlay land
/// there): a plan, a checkpoint or a metrics file in it is refused as inside the lake, and
/// nothing is written. Tried only where this machine allows mounts.
#[tokio::test]
async fn an_overlay_whose_upper_layer_is_in_the_lake_is_inside_the_lake() {
    let l = lake(1).await;
    let engine = MemoryEngine::new();
    let lower = l.outside("ov/lower");
    let work = l.outside("ov/work");
    let merged = l.outside("ov/merged");
    let options = format!("lowerdir={},upperdir={},workdir={}", lower.display(), l.live.display(), work.display());
    let mounted = std::process::Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o", &options])
        .arg(&merged)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("overlay mounts are not allowed here: the overlay route is not tried");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(merged.clone());
    let gc = collector(&l, &engine).await;
    let horizon = Horizon::new(Duration::from_secs(3600));
    let plan = gc.plan(&horizon, &PlanSettings::default()).await.unwrap().plan;
    let inside = |r: Result<(), GcError>, what: &str| match r {
        Err(GcError::Store(StoreError::Root { message, .. })) => {
            assert!(message.contains("inside the lake root"), "{what}: {message}")
        }
        other => panic!("{what}: expected a refusal inside the lake root, got {other:?}"),
    };
    inside(plan.save(&OutputPath::new(merged.join("plan.json"))), "a plan");
    let metrics = OutputPath::new(merged.join("metrics.prom"));
    inside(metrics.check(l.store.root(), DocumentKind::Metrics).map(|_| ()), "a metrics file");
    let at = CheckpointLocation::parse(merged.join("ckpt").to_str().unwrap()).unwrap();
    inside(gc.apply(&plan, &horizon, &at, &ApplyOptions::default()).await.map(|_| ()), "a checkpoint");
    drop(_unmount);
    l.assert_live_untouched();
    assert!(plan.candidates.keys().unwrap().iter().all(|k| l.root.join(k).exists()), "nothing was deleted");
}
