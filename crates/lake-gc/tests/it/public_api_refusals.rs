//! Adversarial tests of the public API of lake-gc (no `unchecked` module, no
//! `with_unchecked_clock`): each test asserts the SAFE outcome, so it fails exactly when the
//! attack succeeds.

use chrono::{DateTime, Utc};
use lake_common::ErrorKind;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::candidates::CandidateList;
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};

use lake_gc::plan::{Candidate, GcPlan};
use lake_gc::GcError;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::LakeStore;
use lake_store::StoreError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Lake {
    dir: tempfile::TempDir,
    root: PathBuf,
    store: LakeStore,
}

/// A local lake whose policy floor is `floor_secs`.
async fn lake(floor_secs: u64) -> Lake {
    let dir = tempfile::tempdir().unwrap();
    let store = LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(floor_secs)).await.unwrap();
    let root = store.local_dir().unwrap().to_path_buf();
    Lake { dir, root, store }
}

async fn upload(l: &Lake, name: &str) -> ManagedObject {
    ManagedObjectWriter::new(l.store.clone()).upload(name, &b"bytes"[..]).await.unwrap()
}

async fn exists(l: &Lake, key: &str) -> bool {
    l.store.head(key).await.unwrap().is_some()
}

fn one_sec() -> Horizon {
    Horizon::new(Duration::from_secs(1))
}

fn ckpt(l: &Lake, name: &str) -> CheckpointLocation {
    CheckpointLocation::parse(l.dir.path().join(name).to_str().unwrap()).unwrap()
}

/// Every path under `dir` (folders too, not following links) with a file's bytes.
pub(crate) fn tree(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(format!("{rel}/"), None);
                walk(base, &path, out);
            } else {
                out.insert(rel, std::fs::read(&path).ok());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

// ---------------------------------------------------------------------------------------------
// 1. A dry run must write nothing under the lake root (not even an empty folder).

#[tokio::test]
async fn attack_dry_run_leaves_no_new_path_under_the_root() {
    let l = lake(1).await;
    upload(&l, "orphan.bin").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let before = tree(&l.root);
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let planned = gc.plan(&one_sec(), &PlanSettings::default()).await.unwrap();
    assert_eq!(planned.plan.candidates.len(), 1);
    let after = tree(&l.root);
    let added: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(added.is_empty(), "a dry run created {added:?} under the lake root");
    assert_eq!(after, before, "a dry run changed the tree under the lake root");
}

// ---------------------------------------------------------------------------------------------
// 2. GC's deleters are public: do they delete a live, young object without the collector?

// ---------------------------------------------------------------------------------------------
// 3. Checkpoints inside the root, spelled differently.

/// A lake with one old orphan, its collector's plan at a 1 s horizon (real store clock).
async fn planned_lake() -> (Lake, MemoryEngine, String) {
    let l = lake(1).await;
    let orphan = upload(&l, "orphan.bin").await.key;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    (l, MemoryEngine::new(), orphan)
}

fn no_checkpoint_under(root: &Path, before: &BTreeMap<String, Option<Vec<u8>>>) {
    let after = tree(root);
    let added: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).cloned().collect();
    assert!(added.is_empty(), "apply wrote {added:?} under the lake root");
}

#[tokio::test]
async fn attack_checkpoint_store_variant_on_the_local_root_is_refused() {
    let (l, engine, orphan) = planned_lake().await;
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let plan = gc.plan(&one_sec(), &PlanSettings::default()).await.unwrap().plan;
    let before = tree(&l.root);
    // The public enum variant, with the lake's own (local) store: check_outside only compares
    // Store with an S3 lake and Local with a local lake.
    let inside = CheckpointLocation::Store {
        store: Box::new(l.store.clone()),
        key: "gc.ckpt".into(),
        shown: "lake/gc.ckpt".into(),
    };
    let result = gc.apply(&plan, &one_sec(), &inside, &ApplyOptions::default()).await;
    let file_url = LakeStore::open(&format!("file://{}", l.root.display())).unwrap();
    let inside_url = CheckpointLocation::Store {
        store: Box::new(file_url),
        key: "gc2.ckpt".into(),
        shown: "file://lake/gc2.ckpt".into(),
    };
    let result_url = gc.resume(&one_sec(), &inside_url, &ApplyOptions::default()).await;
    let wrote = tree(&l.root).keys().filter(|k| !before.contains_key(*k)).cloned().collect::<Vec<_>>();
    assert!(
        matches!(result, Err(GcError::Store(StoreError::Root { .. }))),
        "a Store checkpoint on the lake's own local store was accepted: {:?}; wrote {wrote:?}; orphan deleted: {}",
        result.map(|r| r.checkpoint),
        !exists(&l, &orphan).await
    );
    assert!(
        matches!(result_url, Err(GcError::Store(StoreError::Root { .. }))),
        "resume accepted: {:?}",
        result_url.map(|_| ())
    );
    no_checkpoint_under(&l.root, &before);
}

#[tokio::test]
async fn attack_checkpoint_path_spellings_of_the_root_are_refused() {
    let (l, engine, orphan) = planned_lake().await;
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let plan = gc.plan(&one_sec(), &PlanSettings::default()).await.unwrap().plan;
    let root = l.root.display().to_string();
    let dir = l.dir.path().canonicalize().unwrap().display().to_string();
    std::os::unix::fs::symlink(&l.root, l.dir.path().join("rootlink")).unwrap();
    std::os::unix::fs::symlink(l.root.join("objects"), l.dir.path().join("objlink")).unwrap();
    std::fs::create_dir(l.dir.path().join("sub")).unwrap();
    let before = tree(&l.root);
    let spellings = [
        format!("{root}/./gc1.ckpt"),
        format!("{root}//gc2.ckpt"),
        format!("{root}/objects/../gc3.ckpt"),
        format!("{dir}/sub/../lake/gc4.ckpt"),
        format!("{dir}/rootlink/gc5.ckpt"),
        format!("{dir}/rootlink/./gc6.ckpt"),
        format!("{dir}/objlink/gc7.ckpt"),
        format!("file://{root}/gc8.ckpt"),
        format!("file:{root}/gc9.ckpt"),
        format!("/proc/self/root{root}/gc10.ckpt"),
        format!("{dir}/lake/_lake/../gc11.ckpt"),
    ];
    for text in &spellings {
        let Ok(location) = CheckpointLocation::parse(text) else {
            eprintln!("spelling `{text}`: refused by parse");
            continue;
        };
        eprintln!("spelling `{text}`: parsed, applying");
        match gc.apply(&plan, &one_sec(), &location, &ApplyOptions::default()).await {
            Err(GcError::Store(StoreError::Root { .. })) => {}
            other => panic!("checkpoint `{text}` inside the root was not refused: {:?}", other.map(|r| r.checkpoint)),
        }
        // The public From<&Path> skips parse's checks.
        let raw = CheckpointLocation::from(Path::new(text.as_str()));
        assert!(
            matches!(
                gc.apply(&plan, &one_sec(), &raw, &ApplyOptions::default()).await,
                Err(GcError::Store(StoreError::Root { .. }))
            ),
            "From<&Path> `{text}` accepted"
        );
    }
    // A checkpoint file (or its plan document) that is a symbolic link into the root: writes
    // replace the link, never its target.
    std::os::unix::fs::symlink(l.root.join("_lake/new.json"), l.dir.path().join("ck")).unwrap();
    std::os::unix::fs::symlink(l.root.join("_lake/new.plan.json"), l.dir.path().join("ck.plan.json")).unwrap();
    let linked = ckpt(&l, "ck");
    let report = gc.apply(&plan, &one_sec(), &linked, &ApplyOptions::default()).await;
    assert!(!l.root.join("_lake/new.json").exists() && !l.root.join("_lake/new.plan.json").exists());
    let _ = report;
    // A checkpoint file linked to the descriptor: read (refused), never rewritten.
    let descriptor = std::fs::read(l.root.join("_lake/lake.json")).unwrap();
    std::os::unix::fs::symlink(l.root.join("_lake/lake.json"), l.dir.path().join("ck2")).unwrap();
    let _ = gc.apply(&plan, &one_sec(), &ckpt(&l, "ck2"), &ApplyOptions::default()).await;
    assert_eq!(std::fs::read(l.root.join("_lake/lake.json")).unwrap(), descriptor);
    let _ = orphan;
    let after = tree(&l.root);
    // Only the orphan (deleted by the legitimate apply through `ck`) may be gone.
    let added: Vec<_> = after.keys().filter(|k| !before.contains_key(*k)).cloned().collect();
    assert!(added.is_empty(), "apply wrote {added:?} under the lake root");
}

// ---------------------------------------------------------------------------------------------
// 4. Plans forged as structs (every field is public; apply takes `&GcPlan`).

fn forged(mut plan: GcPlan, candidates: Vec<Candidate>) -> GcPlan {
    let mut candidates = candidates;
    candidates.sort();
    plan.candidates = CandidateList::from_sorted(candidates);
    plan.lineage_complete = true;
    plan.problems.clear();
    plan
}

fn candidate(key: &str) -> Candidate {
    Candidate { key: key.into(), size: 5, last_modified: "2000-01-01T00:00:00.000Z".parse().unwrap() }
}

#[tokio::test]
async fn attack_forged_plan_naming_live_and_unmanaged_keys_deletes_nothing() {
    let l = lake(1).await;
    let live = upload(&l, "live.bin").await;
    let engine = MemoryEngine::new();
    engine.append("t", &[live.identity()]);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let plan = gc.plan(&one_sec(), &PlanSettings::default()).await.unwrap().plan;
    // The live object, with an empty basis (as if no table existed when planned).
    let mut no_basis = forged(plan.clone(), vec![candidate(&live.key)]);
    no_basis.basis.clear();
    let r = gc.apply(&no_basis, &one_sec(), &ckpt(&l, "a.ckpt"), &ApplyOptions::default()).await;
    assert!(
        exists(&l, &live.key).await,
        "forged plan (empty basis) deleted a live object: {:?}",
        r.map(|r| r.checkpoint)
    );
    let r = gc
        .apply(
            &forged(plan.clone(), vec![candidate(&live.key)]),
            &one_sec(),
            &ckpt(&l, "b.ckpt"),
            &ApplyOptions::default(),
        )
        .await;
    assert!(exists(&l, &live.key).await, "forged plan deleted a live object: {:?}", r.map(|r| r.checkpoint));
    // Its managed folder, and keys outside the grammar.
    let folder = live.key.rsplit_once('/').unwrap().0.to_string() + "/";
    for key in [folder.as_str(), "_lake/lake.json", "objects", "objects/"] {
        let name = format!("k{}.ckpt", key.len());
        let _ = gc
            .apply(&forged(plan.clone(), vec![candidate(key)]), &one_sec(), &ckpt(&l, &name), &ApplyOptions::default())
            .await;
    }
    assert!(exists(&l, &live.key).await && exists(&l, "_lake/lake.json").await);
}

#[tokio::test]
async fn attack_a_plan_allowed_below_policy_is_not_applied_without_the_override() {
    let l = lake(3600).await;
    let orphan = upload(&l, "orphan.bin").await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let below = Horizon { allow_below_policy: true, ..one_sec() };
    let plan = gc.plan(&below, &PlanSettings::default()).await.unwrap().plan;
    assert_eq!(plan.candidates.len(), 1);
    // Same min_age, no override: the floor must still hold at apply (and at resume).
    let r = gc.apply(&plan, &one_sec(), &ckpt(&l, "p.ckpt"), &ApplyOptions::default()).await;
    assert!(matches!(r, Err(GcError::Refused { kind: ErrorKind::PolicyFloor, .. })), "{:?}", r.map(|r| r.checkpoint));
    // A sub-second horizon that rounds to the plan's min_age_seconds.
    let frac = Horizon { min_age: Duration::from_millis(1999), allow_below_policy: false, ..one_sec() };
    let r = gc.apply(&plan, &frac, &ckpt(&l, "q.ckpt"), &ApplyOptions::default()).await;
    assert!(matches!(r, Err(GcError::Refused { kind: ErrorKind::PolicyFloor, .. })), "{:?}", r.map(|r| r.checkpoint));
    // A zero horizon with the override.
    let zero = Horizon { min_age: Duration::ZERO, allow_below_policy: true, ..one_sec() };
    assert!(matches!(
        gc.plan(&zero, &PlanSettings::default()).await,
        Err(GcError::Refused { kind: ErrorKind::Horizon, .. })
    ));
    assert!(exists(&l, &orphan.key).await);
}

// ---------------------------------------------------------------------------------------------
// 5. Another engine than the lake's tables: nothing binds the engine to the store.

// ---------------------------------------------------------------------------------------------
// 6. Horizon values at the edges.

#[tokio::test]
async fn attack_huge_min_age_is_a_typed_refusal_not_a_panic() {
    let l = lake(1).await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    // Duration::MAX does not fit chrono: a typed refusal.
    let max = gc.plan(&Horizon::new(Duration::MAX), &PlanSettings::default()).await;
    assert!(matches!(max, Err(GcError::Refused { kind: ErrorKind::Horizon, .. })), "{max:?}");
    // 10^13 s (about 317,000 years) fits chrono's TimeDelta but not store_now - min_age.
    let huge = Horizon::new(Duration::from_secs(10_000_000_000_000));
    let task = tokio::spawn(async move {
        let engine = MemoryEngine::new();
        let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
        gc.plan(&huge, &PlanSettings::default()).await.map(|_| ()).map_err(|e| e.to_string())
    });
    match task.await {
        Ok(Err(_)) => {}
        Ok(Ok(())) => panic!("a 317,000-year horizon planned"),
        Err(join) => panic!("a huge min_age panicked the collector instead of a typed refusal: {join}"),
    }
}

#[tokio::test]
async fn attack_huge_skew_bound_and_early_cutoff_do_not_plan_young_objects() {
    let l = lake(1).await;
    let young = upload(&l, "young.bin").await;
    let engine = MemoryEngine::new();
    let gc = GarbageCollector::open(l.store.clone(), &engine).await.unwrap();
    let skew = Horizon { max_clock_skew: Duration::MAX, ..one_sec() };
    assert!(gc.plan(&skew, &PlanSettings::default()).await.unwrap().plan.candidates.is_empty());
    let earliest = Horizon { earlier_cutoff: Some(DateTime::<Utc>::MIN_UTC), ..one_sec() };
    if let Ok(planned) = gc.plan(&earliest, &PlanSettings::default()).await {
        assert!(planned.plan.candidates.is_empty());
        let _ = gc.apply(&planned.plan, &one_sec(), &ckpt(&l, "m.ckpt"), &ApplyOptions::default()).await;
    }
    let latest = Horizon { earlier_cutoff: Some(DateTime::<Utc>::MAX_UTC), ..one_sec() };
    assert!(matches!(
        gc.plan(&latest, &PlanSettings::default()).await,
        Err(GcError::Refused { kind: ErrorKind::CutoffTooLate, .. })
    ));
    assert!(exists(&l, &young.key).await);
}

// ---------------------------------------------------------------------------------------------
// 7. S3 checkpoint spellings of an S3 lake's root (check_outside is pure: no request is sent).

#[tokio::test]
async fn attack_s3_checkpoint_spellings_of_the_root_are_refused() {
    let lake = match LakeStore::open("s3://bucket/lake") {
        Ok(lake) => lake,
        Err(e) => panic!("cannot open an s3 root offline: {e}"),
    };
    let spellings = [
        "s3://bucket/lake/gc",
        "s3a://bucket/lake/gc",
        "S3://bucket/lake/gc",
        "s3://bucket//lake/gc",
        "s3://bucket/lake//gc",
        "s3://bucket/./lake/gc",
        "s3://bucket/lake/./gc",
        "s3://bucket/x/../lake/gc",
        "s3://bucket/lake/x/../gc",
        "s3://bucket/lake%2Fgc",
        "s3://bucket/%6Cake/gc",
        "s3://bucket/lake/objects/gc",
        "s3://bucket:443/lake/gc",
        "s3://user@bucket/lake/gc",
    ];
    let mut accepted = Vec::new();
    for text in spellings {
        let Ok(location) = CheckpointLocation::parse(text) else {
            eprintln!("s3 spelling `{text}`: refused by parse");
            continue;
        };
        if location.hold(&lake).is_err() {
            eprintln!("s3 spelling `{text}`: refused by check_outside");
            continue;
        }
        eprintln!("s3 spelling `{text}`: accepted as {:?}", location.display());
        if let CheckpointLocation::Store { store, key, .. } = &location {
            let full = store.path(key).to_string();
            let plan = store.path(&format!("{key}.plan.json")).to_string();
            let same_bucket = store.root().authority() == lake.root().authority();
            if same_bucket && (full.starts_with("lake/") || plan.starts_with("lake/")) {
                accepted.push(format!("{text} -> {full}"));
            }
        }
    }
    assert!(accepted.is_empty(), "S3 checkpoints inside the root accepted: {accepted:?}");
}
