//! Documents written for an operator: plans, sharded plans, metrics files and
//! checkpoints never land inside the lake root by any spelling or route, replace only a
//! document of their own kind, and are written atomically (`lake_gc::output`); a
//! checkpoint of another plan is replaced when finished and refused when not (kind 6); shard
//! documents are checked against their manifest before any shard deletes (kind 7); an apply
//! meeting a version whose journal entry is not written yet says to rerun, not to repair.
//! Every test asserts the safe outcome on a real local store, and that nothing under the root
//! changed (every path and byte).

use crate::public_api_refusals::tree;
use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_common::ObjectIdentity;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::output::{DocumentKind, OutputPath};
use lake_gc::plan::GcPlan;
use lake_gc::shards::{save_shard, shard_file_name, ShardEntry, ShardManifest, ShardedPlan, MANIFEST_FILE};
use lake_gc::GcError;
use lake_store::clock::FixedClock;
use lake_store::descriptor::LakeDescriptor;
use lake_store::LakeStore;
use std::path::{Path, PathBuf};
use std::time::Duration;
use ulid::Ulid;

const HOUR_MS: i64 = 3_600_000;

/// A local lake (policy floor 1 h) whose collector reads the store's clock two hours ahead, so
/// that a one-hour horizon's cutoff is an hour from now: every object written now is old by its
/// `last_modified`, and its age by mint time is the ULID's.
struct Lake {
    dir: tempfile::TempDir,
    root: PathBuf,
    store: LakeStore,
    engine: MemoryEngine,
    now: DateTime<Utc>,
}

impl Lake {
    async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store = LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap();
        LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
        let root = store.local_dir().unwrap().to_path_buf();
        Self { dir, root, store, engine: MemoryEngine::new(), now: Utc::now() }
    }

    /// An object minted `hours_ago` before now, with `random` bits (distinct keys).
    async fn object(&self, hours_ago: i64, random: u128) -> String {
        let ms = self.now.timestamp_millis() - hours_ago * HOUR_MS;
        let key = format!("objects/{}/o{random}.bin", Ulid::from_parts(ms as u64, random));
        self.store.put(&key, format!("object {random}").into_bytes()).await.unwrap();
        key
    }

    async fn collector(&self) -> GarbageCollector<'_> {
        let clock = FixedClock(self.now + chrono::Duration::hours(2));
        GarbageCollector::open(self.store.clone(), &self.engine).await.unwrap().with_unchecked_clock(clock)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn ckpt(&self, name: &str) -> CheckpointLocation {
        CheckpointLocation::parse(self.path(name).to_str().unwrap()).unwrap()
    }
}

fn horizon() -> Horizon {
    Horizon::new(Duration::from_secs(3600))
}

fn is_root_refusal(result: Result<(), GcError>, what: &str) {
    match result {
        Err(lake_gc::GcError::Store(lake_store::StoreError::Root { message, .. })) => {
            assert!(message.contains("inside the lake root"), "{what}: {message}")
        }
        other => panic!("{what}: expected a refusal inside the lake root, got {other:?}"),
    }
}

fn is_output_refusal(result: Result<(), GcError>, needle: &str) {
    match result {
        Err(GcError::Output { message, .. }) => {
            assert!(message.contains(needle), "expected `{needle}` in {message}")
        }
        other => panic!("expected an output refusal ({needle}), got {other:?}"),
    }
}

/// A bind mount (root, or a user namespace) undone when dropped; `None` where mounts are not
/// allowed (the test then skips that route and says so).
struct BindMount(PathBuf);

impl BindMount {
    fn new(from: &Path, to: &Path) -> Option<Self> {
        std::fs::create_dir_all(to).unwrap();
        let ok = std::process::Command::new("mount")
            .arg("--bind")
            .arg(from)
            .arg(to)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("mount --bind is not allowed here: the bind-mount route is not tried");
        }
        ok.then(|| Self(to.to_path_buf()))
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Kind 1 through the library (what the CLI, Python's `Plan.save` and `ShardedPlan.save` and a
/// Ray driver call): a plan, a sharded plan, a shard, a manifest, a metrics file and a
/// checkpoint, each aimed inside the root by every spelling and route, are refused, and no path
/// or byte under the root changes.
#[tokio::test(flavor = "multi_thread")]
async fn documents_are_never_written_inside_the_lake_by_any_route() {
    let l = Lake::new().await;
    let live = l.object(5, 1).await;
    l.engine.append("t", &[ObjectIdentity::new(live.clone(), [0; 32], 8)]);
    l.object(5, 2).await;
    let gc = l.collector().await;
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    assert_eq!(plan.candidates.len(), 1);
    let sharded = gc.plan_sharded(&horizon(), &PlanSettings::default(), 2).await.unwrap().plan;
    let root = l.root.display().to_string();
    let dir = l.dir.path().canonicalize().unwrap().display().to_string();
    std::os::unix::fs::symlink(&l.root, l.path("rootlink")).unwrap();
    std::os::unix::fs::symlink(l.root.join("objects"), l.path("objlink")).unwrap();
    std::os::unix::fs::symlink(l.root.join("_lake/lake.json"), l.path("descriptor-link.json")).unwrap();
    std::fs::create_dir(l.path("sub")).unwrap();
    // Bind mounts of the root, of `objects/`, of `_lake/` and of a live object's own folder
    // (any depth: found by the mount table, not by folder identities), elsewhere: the same
    // folders under other paths (each route tried only where this machine allows mounts).
    let live_folder = live.rsplit_once('/').unwrap().0.to_string();
    let mounts: Vec<(&str, BindMount)> =
        [("", "mnt-root"), ("objects", "mnt-objects"), ("_lake", "mnt-meta"), (live_folder.as_str(), "mnt-deep")]
            .iter()
            .filter_map(|(inside, at)| BindMount::new(&l.root.join(inside), &l.path(at)).map(|m| (*at, m)))
            .collect();
    let before = tree(&l.root);
    let mut files = vec![
        format!("{root}/{live}"),
        format!("{root}/_lake/lake.json"),
        format!("{root}/plan.json"),
        format!("{root}/./plan.json"),
        format!("{root}//plan.json"),
        format!("{root}/objects/../plan.json"),
        format!("{dir}/sub/../lake/plan.json"),
        format!("{dir}/rootlink/plan.json"),
        format!("{dir}/objlink/new.json"),
        format!("{dir}/descriptor-link.json"),
        format!("/proc/self/root{root}/plan.json"),
        format!("{root}/objects/{}/new.json", Ulid::new()),
    ];
    for (at, _) in &mounts {
        files.extend([format!("{dir}/{at}/new.json"), format!("{dir}/{at}/lake.json")]);
    }
    if mounts.iter().any(|(at, _)| *at == "mnt-deep") {
        // The live object itself, through the mount of its folder.
        let name = live.rsplit_once('/').unwrap().1;
        files.push(format!("{dir}/mnt-deep/{name}"));
    }
    for text in &files {
        let out = OutputPath::new(text);
        is_root_refusal(plan.save(&out), &format!("plan at {text}"));
        is_root_refusal(plan.save(&out.clone().force(true)), &format!("plan at {text}, forced"));
        let metrics = out.write(l.store.root(), DocumentKind::Metrics, |w| w.write_all(b"lake_gc_x 1\n"));
        is_root_refusal(metrics, &format!("metrics at {text}"));
        if let Ok(at) = CheckpointLocation::parse(text) {
            let applied = gc.apply(&plan, &horizon(), &at, &ApplyOptions::default()).await;
            assert!(
                matches!(applied, Err(lake_gc::GcError::Store(lake_store::StoreError::Root { .. }))),
                "checkpoint at {text}: {applied:?}"
            );
        }
    }
    // `file:` URLs of an operator's value are paths too.
    for text in [format!("file://{root}/plan.json"), format!("file:{root}/objects/x.json")] {
        is_root_refusal(plan.save(&OutputPath::parse("--out", &text).unwrap()), &text);
    }
    let mut folders = vec![
        root.clone(),
        format!("{root}/objects"),
        format!("{root}/plans"),
        format!("{root}/_lake/../plans"),
        format!("{dir}/rootlink"),
        format!("{dir}/rootlink/plans"),
        format!("{dir}/objlink"),
    ];
    for (at, _) in &mounts {
        folders.extend([format!("{dir}/{at}"), format!("{dir}/{at}/plans")]);
    }
    for text in &folders {
        let folder = OutputPath::new(text);
        is_root_refusal(sharded.save_to(&folder), &format!("sharded plan in {text}"));
        is_root_refusal(sharded.save_to(&folder.clone().force(true)), &format!("sharded plan in {text}, forced"));
        is_root_refusal(sharded.manifest.save(Path::new(text)), &format!("manifest in {text}"));
        is_root_refusal(save_shard(&sharded.plans[0], Path::new(text)), &format!("shard in {text}"));
    }
    drop(mounts);
    assert_eq!(tree(&l.root), before, "a path or byte under the lake root changed");
    assert!(l.store.head(&live).await.unwrap().is_some());
    // The same documents outside the lake are written.
    plan.save(&OutputPath::new(l.path("plan.json"))).unwrap();
    sharded.save(&l.path("plans")).unwrap();
    assert_eq!(ShardedPlan::load(&l.path("plans")).unwrap(), sharded);
}

/// An existing file is replaced only by a document of its kind (or an empty file), or with
/// force; never a folder or a device; atomically, with no temporary file left and the file's
/// permissions kept.
#[tokio::test(flavor = "multi_thread")]
async fn an_existing_file_is_replaced_only_by_a_document_of_its_kind() {
    use std::os::unix::fs::PermissionsExt;
    let l = Lake::new().await;
    l.object(5, 1).await;
    let gc = l.collector().await;
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let user = l.path("notes.txt");
    std::fs::write(&user, b"my notes").unwrap();
    let metrics_text = l.path("metrics.prom");
    std::fs::write(&metrics_text, b"# HELP lake_gc_x X.\n# TYPE lake_gc_x gauge\nlake_gc_x{root=\"r\"} 1\n").unwrap();
    let json = l.path("other.json");
    std::fs::write(&json, br#"{"digest": "x", "manifest": {"format_version": 1}}"#).unwrap();
    is_output_refusal(plan.save(&OutputPath::new(&user)), "not a GC plan document");
    is_output_refusal(plan.save(&OutputPath::new(&metrics_text)), "not a GC plan document");
    is_output_refusal(plan.save(&OutputPath::new(&json)), "refusing to replace it");
    let metrics = |path: &Path, force: bool| {
        OutputPath::new(path)
            .force(force)
            .write(l.store.root(), DocumentKind::Metrics, |w| w.write_all(b"lake_gc_y 2\n"))
    };
    is_output_refusal(metrics(&user, false), "not a lake metrics file");
    assert_eq!(std::fs::read(&user).unwrap(), b"my notes", "refusals leave the file as it was");
    // A folder or a device: never, even forced (the rename would replace the node itself).
    is_output_refusal(plan.save(&OutputPath::new(l.dir.path()).force(true)), "folder");
    is_output_refusal(plan.save(&OutputPath::new("/dev/null").force(true)), "not a regular file");
    is_output_refusal(plan.save(&OutputPath::new(l.path("missing/plan.json"))), "does not exist");
    assert!(!l.path("missing").exists(), "no folder is created from a file path");
    // Same kind, an empty file, or forced: replaced whole, permissions kept.
    metrics(&metrics_text, false).unwrap();
    assert_eq!(std::fs::read(&metrics_text).unwrap(), b"lake_gc_y 2\n");
    let p = l.path("plan.json");
    plan.save(&OutputPath::new(&p)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
    plan.save(&OutputPath::new(&p)).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o640);
    assert_eq!(
        GcPlan::from_document(&std::fs::read(&p).unwrap(), "p").unwrap().digest().unwrap(),
        plan.digest().unwrap()
    );
    let empty = l.path("empty.json");
    std::fs::write(&empty, b"").unwrap();
    plan.save(&OutputPath::new(&empty)).unwrap();
    plan.save(&OutputPath::new(&user).force(true)).unwrap();
    assert_eq!(
        GcPlan::from_document(&std::fs::read(&user).unwrap(), "u").unwrap().digest().unwrap(),
        plan.digest().unwrap()
    );
    let left: Vec<_> = std::fs::read_dir(l.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".lake-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// A sharded plan's folder: created when missing (only the last folder), written into when
/// empty or holding a sharded plan (an earlier plan's extra shard documents removed), refused
/// when it holds anything else unless forced (the other files are then left alone).
#[tokio::test(flavor = "multi_thread")]
async fn a_sharded_plan_is_written_only_into_an_empty_folder_or_over_a_sharded_plan() {
    let l = Lake::new().await;
    for i in 0..6 {
        l.object(10 - i, i as u128).await;
    }
    let gc = l.collector().await;
    let three = gc.plan_sharded(&horizon(), &PlanSettings::default(), 3).await.unwrap().plan;
    let two = gc.plan_sharded(&horizon(), &PlanSettings::default(), 2).await.unwrap().plan;
    assert_eq!((three.manifest.count, two.manifest.count), (3, 2));
    is_output_refusal(three.save(&l.path("a/b/plans")), "parent folder");
    assert!(!l.path("a").exists());
    three.save(&l.path("plans")).unwrap();
    two.save(&l.path("plans")).unwrap();
    assert!(!l.path("plans").join(shard_file_name(2)).exists(), "the earlier plan's third shard is removed");
    assert_eq!(ShardedPlan::load(&l.path("plans")).unwrap(), two);
    let mine = l.path("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("thesis.tex"), b"chapter 1").unwrap();
    is_output_refusal(two.save(&mine), "thesis.tex");
    std::fs::write(mine.join(MANIFEST_FILE), b"my manifest").unwrap();
    is_output_refusal(two.save_to(&OutputPath::new(&mine)), "not part of a sharded plan");
    assert_eq!(std::fs::read(mine.join(MANIFEST_FILE)).unwrap(), b"my manifest");
    two.save_to(&OutputPath::new(&mine).force(true)).unwrap();
    assert_eq!(std::fs::read(mine.join("thesis.tex")).unwrap(), b"chapter 1", "forced: other files left alone");
    assert_eq!(ShardedPlan::load(&mine).unwrap(), two);
}

/// Kind 6 in the library (`Gc.apply(plan, checkpoint=...)` in Python inherits it): a plan given
/// with a checkpoint that records a finished apply of another plan replaces it and deletes its
/// own candidates; one that records an unfinished apply is refused naming both plans, and
/// nothing is deleted; `resume_unfinished` (a scheduled run) resumes only an unfinished apply.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_given_with_a_checkpoint_of_another_plan_is_never_silently_ignored() {
    let l = Lake::new().await;
    let first = l.object(9, 1).await;
    let gc = l.collector().await;
    let options = ApplyOptions::default();
    let ck = l.ckpt("gc.ckpt");
    let old = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    assert!(gc.apply(&old, &horizon(), &ck, &options).await.unwrap().checkpoint.complete);
    assert!(l.store.head(&first).await.unwrap().is_none());
    // A finished checkpoint: the next run (a scheduled job with a fixed path) has nothing to
    // resume; a new plan replaces it.
    assert!(gc.resume_unfinished(&horizon(), &ck, &options).await.unwrap().is_none());
    assert!(gc.resume(&horizon(), &ck, &options).await.unwrap().unwrap().was_complete);
    let second = l.object(8, 2).await;
    let new = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    assert_ne!(new.digest().unwrap(), old.digest().unwrap());
    let done = gc.apply(&new, &horizon(), &ck, &options).await.unwrap();
    assert!(done.checkpoint.complete && !done.was_complete && !done.resumed);
    assert_eq!(done.checkpoint.deleted, 1, "the new plan's candidate is deleted, not ignored");
    assert_eq!(done.replaced.as_ref().map(|r| r.plan_digest.clone()), Some(old.digest().unwrap()));
    assert_eq!(done.replaced.map(|r| r.cutoff), Some(old.cutoff));
    assert!(l.store.head(&second).await.unwrap().is_none());
    // The same plan again: its finished apply is reported, nothing more.
    let again = gc.apply(&new, &horizon(), &ck, &options).await.unwrap();
    assert!(again.was_complete && again.resumed && again.replaced.is_none());

    // An unfinished apply of another plan: refused, naming both; nothing deleted.
    let (third, fourth) = (l.object(7, 3).await, l.object(7, 4).await);
    let unfinished = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let one_page = ApplyOptions { page_size: 1, max_pages: Some(1), ..ApplyOptions::default() };
    let partial = gc.apply(&unfinished, &horizon(), &ck, &one_page).await.unwrap();
    assert!(!partial.checkpoint.complete && partial.replaced.is_some());
    let fifth = l.object(6, 5).await;
    let later = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    let before = tree(&l.root);
    match gc.apply(&later, &horizon(), &ck, &options).await {
        Err(GcError::Checkpoint { message, .. }) => {
            for needle in [
                unfinished.digest().unwrap(),
                unfinished.cutoff.to_string(),
                later.digest().unwrap(),
                later.cutoff.to_string(),
            ] {
                assert!(message.contains(&needle), "`{needle}` not named in: {message}");
            }
            assert!(message.contains("records the apply of plan") && message.contains("not finished"), "{message}");
        }
        other => panic!("a plan over an unfinished apply of another was not refused: {other:?}"),
    }
    assert_eq!(tree(&l.root), before, "nothing deleted by the refusal");
    // Resuming finishes the recorded plan (the refused one's extra candidate stays).
    let resumed = gc.resume_unfinished(&horizon(), &ck, &options).await.unwrap().unwrap();
    assert!(resumed.resumed && resumed.checkpoint.complete);
    assert!(l.store.head(&third).await.unwrap().is_none() && l.store.head(&fourth).await.unwrap().is_none());
    assert!(l.store.head(&fifth).await.unwrap().is_some());
}

/// A shard document with candidates and a sharded plan saved, the manifest and its folder.
async fn saved_shards(l: &Lake, gc: &GarbageCollector<'_>, name: &str) -> (ShardedPlan, PathBuf) {
    let sharded = gc.plan_sharded(&horizon(), &PlanSettings::default(), 3).await.unwrap().plan;
    assert!(sharded.manifest.shards.iter().all(|e| e.candidates > 0), "{:?}", sharded.manifest.shards);
    let dir = l.path(name);
    sharded.save(&dir).unwrap();
    (sharded, dir)
}

/// Kind 7 in the library: shard documents swapped, renamed to a missing index, or naming a key
/// outside their range (digests recomputed) are refused by `check_folder`, `load_shard` and
/// `apply_shard` before anything is deleted; a finished shard checkpoint of an earlier
/// manifest is replaced, not resumed in the new shard's place.
#[tokio::test(flavor = "multi_thread")]
async fn shard_documents_are_checked_against_the_manifest_before_any_delete() {
    let l = Lake::new().await;
    for i in 0..9 {
        l.object(30 - 3 * i, i as u128).await;
    }
    let gc = l.collector().await;
    let (sharded, dir) = saved_shards(&l, &gc, "plans").await;
    let m = &sharded.manifest;
    let all = [0, 1, 2];
    m.check_folder(&dir, &all).unwrap();
    let before = tree(&l.root);
    // Swapped: each document is a valid shard of this manifest, under the other's name.
    let (zero, one) = (dir.join(shard_file_name(0)), dir.join(shard_file_name(1)));
    let (a, b) = (std::fs::read(&zero).unwrap(), std::fs::read(&one).unwrap());
    std::fs::write(&zero, &b).unwrap();
    std::fs::write(&one, &a).unwrap();
    for result in [m.check_folder(&dir, &all).map(|_| ()), m.load_shard(&dir, 0).map(|_| ())] {
        match result {
            Err(lake_gc::GcError::Refused { kind: refusal, message }) => {
                assert_eq!(refusal, ErrorKind::BoundToManifest, "{message}")
            }
            other => panic!("swapped shard documents accepted: {other:?}"),
        }
    }
    std::fs::write(&zero, &a).unwrap();
    std::fs::write(&one, &b).unwrap();
    // Renamed to a missing index: shard 2's document is gone.
    std::fs::rename(dir.join(shard_file_name(2)), dir.join(shard_file_name(3))).unwrap();
    assert!(matches!(m.check_folder(&dir, &all), Err(lake_gc::GcError::Store(lake_store::StoreError::Io { .. }))));
    std::fs::rename(dir.join(shard_file_name(3)), dir.join(shard_file_name(2))).unwrap();
    assert!(matches!(
        m.check_folder(&dir, &[3]),
        Err(lake_gc::GcError::Refused { kind: ErrorKind::ShardMismatch, .. })
    ));
    // Shard 0 forged to name shard 2's first key, its digest and the manifest's recomputed.
    let stolen = sharded.plans[2].candidates.to_vec().unwrap()[0].clone();
    let mut forged_plan = sharded.plans[0].clone();
    let mut list = forged_plan.candidates.to_vec().unwrap();
    list.push(stolen.clone());
    forged_plan.candidates = lake_gc::candidates::CandidateList::from_sorted(list);
    let mut forged = m.clone();
    forged.shards[0] = ShardEntry::of(&forged_plan).unwrap();
    let forged = ShardManifest::from_document(&forged.to_document(), "forged").unwrap();
    std::fs::write(&zero, forged_plan.to_document().unwrap()).unwrap();
    for result in [
        forged.check_folder(&dir, &[0]).map(|_| ()),
        forged.check_shard(&forged_plan),
        gc.apply_shard(&forged, &forged_plan, &horizon(), &l.ckpt("f.ckpt"), &ApplyOptions::default())
            .await
            .map(|_| ()),
    ] {
        match result {
            Err(lake_gc::GcError::Refused { kind: refusal, message }) => {
                assert_eq!(refusal, ErrorKind::BoundToManifest, "{message}")
            }
            other => panic!("a shard naming a key outside its range was accepted: {other:?}"),
        }
    }
    assert!(!l.path("f.ckpt").exists(), "no checkpoint written for a refused shard");
    std::fs::write(&zero, &a).unwrap();
    assert_eq!(tree(&l.root), before, "nothing deleted by any refusal");

    // Shard 1 applied; then a new sharded plan with the same checkpoint folder: its finished
    // checkpoint is not resumed in place of the new shard 1 (another plan), it is replaced.
    let ck = l.ckpt("shard-1.ckpt");
    let done = gc.apply_shard(m, &sharded.plans[1], &horizon(), &ck, &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.checkpoint.deleted == m.shards[1].candidates);
    for (i, hours_ago) in [28, 17, 8].into_iter().enumerate() {
        l.object(hours_ago, 100 + i as u128).await;
    }
    let (next, _) = saved_shards(&l, &gc, "plans-2").await;
    assert!(gc.resume_shard(&next.manifest, &horizon(), &ck, &ApplyOptions::default()).await.unwrap().is_none());
    let replaced =
        gc.apply_shard(&next.manifest, &next.plans[1], &horizon(), &ck, &ApplyOptions::default()).await.unwrap();
    assert_eq!(replaced.replaced.map(|r| r.plan_digest), Some(m.shards[1].digest.clone()));
    assert_eq!(replaced.checkpoint.deleted, next.manifest.shards[1].candidates);
}

/// Kind 9: an apply that meets a version committed since its plan without its journal entry
/// (a writer between its Lance commit and its sidecar) stops with a transient error that says
/// to run the same command again, and to repair only when no writer runs; nothing is deleted,
/// and the same apply resumes once the entry is there.
#[tokio::test(flavor = "multi_thread")]
async fn an_apply_meeting_a_writer_between_its_commit_and_its_journal_entry_says_to_rerun() {
    let l = Lake::new().await;
    let orphan = l.object(5, 1).await;
    let young_ref = l.object(5, 2).await;
    let gc = l.collector().await;
    let plan = gc.plan(&horizon(), &PlanSettings::default()).await.unwrap().plan;
    assert_eq!(plan.candidates.len(), 2);
    // The writer commits a version referencing one candidate; its journal entry is not written.
    let version = l.engine.append_without_sidecar("t", &[ObjectIdentity::new(young_ref.clone(), [0; 32], 8)]);
    let before = tree(&l.root);
    let ck = l.ckpt("gc.ckpt");
    let err = gc.apply(&plan, &horizon(), &ck, &ApplyOptions::default()).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    match &err {
        GcError::JournalPending { pending } => assert_eq!(pending, &vec![("t".to_string(), version)]),
        other => panic!("expected JournalPending, got {other}"),
    }
    let message = err.to_string();
    for needle in ["run the same command again", "do not repair", "Only if no writer is running", "`refs repair`"] {
        assert!(message.contains(needle), "`{needle}` not in: {message}");
    }
    assert_eq!(tree(&l.root), before, "nothing deleted");
    // The writer finishes (its entry appears): the same apply resumes and revives its object.
    l.engine.write_sidecar("t", version);
    let done = gc.apply(&plan, &horizon(), &ck, &ApplyOptions::default()).await.unwrap();
    assert!(done.checkpoint.complete && done.resumed);
    assert_eq!(done.checkpoint.revived, vec![young_ref.clone()]);
    assert!(l.store.head(&orphan).await.unwrap().is_none() && l.store.head(&young_ref).await.unwrap().is_some());
}
