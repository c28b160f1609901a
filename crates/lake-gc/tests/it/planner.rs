//! The planner over the in-memory engine and a real local inventory.

use chrono::Utc;
use lake_common::{DecodeError, ObjectIdentity};
use lake_engine::memory::MemoryEngine;
use lake_gc::inventory::local::LocalInventory;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_store::writer::{ManagedObject, ManagedObjectWriter};
use lake_store::LakeStore;
use std::collections::BTreeSet;
use std::time::Duration;

struct Fixture {
    _dir: tempfile::TempDir,
    store: LakeStore,
    writer: ManagedObjectWriter,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = LakeStore::open(dir.path().to_str().unwrap()).unwrap();
    Fixture { writer: ManagedObjectWriter::new(store.clone()), store, _dir: dir }
}

async fn gc(f: &Fixture, engine: &MemoryEngine, cutoff: chrono::DateTime<Utc>, pages: usize) -> GcPlan {
    let options = PlanOptions::new(f.store.root(), Duration::from_secs(60), cutoff).page_size(pages).memory_budget(3);
    plan(engine, &LocalInventory::new(f.store.clone()), &options).await.unwrap().0
}

fn keys(p: &GcPlan) -> BTreeSet<String> {
    p.candidates.keys().unwrap().into_iter().collect()
}

async fn objects(f: &Fixture, n: usize) -> Vec<ManagedObject> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(f.writer.upload(&format!("o{i}"), format!("content {i}").as_bytes()).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_plan_marks_only_old_unreferenced_managed_objects() {
    let f = fixture();
    let o = objects(&f, 7).await;
    let id = |i: usize| o[i].identity();
    let engine = MemoryEngine::new();
    engine.append("t", &[id(0), id(1), id(1)]);
    engine.append("t", &[id(2), ObjectIdentity::new("s3://elsewhere/x", [9; 32], 1)]);
    engine.delete("t", &[id(0)]);
    engine.delete("t", &[id(1)]); // one of two references: object 1 stays live
    engine.cleanup("t", |_| false);
    engine.append("u", &[id(3)]);
    f.store.put("objects/01J00000000000000000000000/../escape", b"x".to_vec()).await.ok();
    f.store.put("objects-x/01J00000000000000000000000/a", b"x".to_vec()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let young = f.writer.upload("young", b"young".as_slice()).await.unwrap();

    for pages in [1, 3, 1000] {
        let p = gc(&f, &engine, cutoff, pages).await;
        assert!(p.lineage_complete);
        assert_eq!(
            keys(&p),
            BTreeSet::from([o[0].key.clone(), o[4].key.clone(), o[5].key.clone(), o[6].key.clone()]),
            "pages {pages}"
        );
        assert!(!keys(&p).contains(&young.key));
        assert_eq!(p.basis.iter().map(|b| (b.table.as_str(), b.version)).collect::<Vec<_>>(), vec![("t", 4), ("u", 1)]);
    }
    assert_eq!(
        gc(&f, &engine, cutoff, 1).await.canonical_bytes().unwrap(),
        gc(&f, &engine, cutoff, 7).await.canonical_bytes().unwrap()
    );
    // A retained old version (as a tag keeps it) keeps object 0 live.
    let engine2 = MemoryEngine::new();
    engine2.append("t", &[id(0)]);
    engine2.delete("t", &[id(0)]);
    assert!(!keys(&gc(&f, &engine2, cutoff, 2).await).contains(&o[0].key));
    engine2.cleanup("t", |_| false);
    assert!(keys(&gc(&f, &engine2, cutoff, 2).await).contains(&o[0].key));
}

#[tokio::test(flavor = "multi_thread")]
async fn incomplete_lineage_gives_no_candidates_and_names_the_problem() {
    let f = fixture();
    let o = objects(&f, 2).await;
    let cutoff = Utc::now() + chrono::Duration::seconds(1);
    let engine = MemoryEngine::new();
    engine.append("t", &[o[0].identity()]);
    engine.append_without_sidecar("t", &[o[1].identity()]);
    let p = gc(&f, &engine, cutoff, 10).await;
    assert!(!p.lineage_complete && p.candidates.is_empty());
    assert_eq!(p.problems.len(), 1);
    assert_eq!(p.problems[0].kind, "missing_sidecar", "{:?}", p.problems);

    let engine = MemoryEngine::new();
    engine.append("t", &[o[0].identity()]);
    engine.compact("t");
    engine.corrupt_sidecar("t", 1, DecodeError::CorruptJson("truncated".into()));
    let p = gc(&f, &engine, cutoff, 10).await;
    assert!(!p.lineage_complete && p.candidates.is_empty());
    assert_eq!(p.problems[0].kind, "undecodable_sidecar", "{:?}", p.problems);
}

/// Random histories: the plan is exactly the old objects no retained version references.
#[tokio::test(flavor = "multi_thread")]
async fn plans_match_the_true_live_set_on_random_histories() {
    let f = fixture();
    let o = objects(&f, 10).await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cutoff = Utc::now();
    let mut seed: u64 = 0x5eed;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for round in 0..40 {
        let engine = MemoryEngine::new();
        let mut rows: Vec<ObjectIdentity> = Vec::new();
        for _ in 0..(1 + next(12)) {
            match next(4) {
                0 | 1 => {
                    let add: Vec<ObjectIdentity> = (0..1 + next(3)).map(|_| o[next(10) as usize].identity()).collect();
                    rows.extend(add.iter().cloned());
                    engine.append("t", &add);
                }
                2 if !rows.is_empty() => {
                    let victim = rows.swap_remove(next(rows.len() as u64) as usize);
                    engine.delete("t", &[victim]);
                }
                _ => {
                    let keep = next(3);
                    engine.cleanup("t", |v| v % 3 == keep);
                }
            }
        }
        if next(2) == 0 {
            engine.compact("t");
        }
        let p = gc(&f, &engine, cutoff, 1 + next(4) as usize).await;
        let live: BTreeSet<String> = engine.true_live_set().into_iter().map(|i| i.uri).collect();
        let expected: BTreeSet<String> = o.iter().map(|x| x.key.clone()).filter(|k| !live.contains(k)).collect();
        assert_eq!(keys(&p), expected, "round {round}");
    }
}

/// More live references than the memory budget: the spilled plan equals the in-memory plan.
#[tokio::test(flavor = "multi_thread")]
async fn a_spilled_live_set_gives_the_same_plan_as_memory() {
    let f = fixture();
    let o = objects(&f, 120).await;
    let engine = MemoryEngine::new();
    for (i, chunk) in o.chunks(10).enumerate() {
        let refs: Vec<ObjectIdentity> = chunk.iter().step_by(1 + i % 3).map(|x| x.identity()).collect();
        engine.append(&format!("t{}", i % 4), &refs);
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let cutoff = Utc::now();
    let run = |budget: usize, pages: usize| {
        let options =
            PlanOptions::new(f.store.root(), Duration::from_secs(60), cutoff).page_size(pages).memory_budget(budget);
        let engine = &engine;
        let store = f.store.clone();
        async move { plan(engine, &LocalInventory::new(store), &options).await.unwrap() }
    };
    let (in_memory, mem_stats) = run(1_000_000, 1000).await;
    let (spilled, spill_stats) = run(7, 9).await;
    assert_eq!(mem_stats.spilled_runs, 0);
    assert!(spill_stats.spilled_runs >= 5, "{spill_stats:?}");
    assert!(spill_stats.live_references > 7 && spill_stats.objects_listed > 7);
    assert!(spilled.candidates.is_spilled() && !in_memory.candidates.is_spilled());
    assert_eq!(spilled.canonical_bytes().unwrap(), in_memory.canonical_bytes().unwrap());
    let live: BTreeSet<String> = engine.true_live_set().into_iter().map(|i| i.uri).collect();
    assert_eq!(keys(&spilled), o.iter().map(|x| x.key.clone()).filter(|k| !live.contains(k)).collect());
}

/// Objects a write intent names (a commit that may still land) are live: never planned, and an
/// apply of a plan made before the intent (or edited to name them) revives them instead of
/// deleting them, because apply reads the intents with the live keys at its start. The plan's
/// counters report the intents.
#[tokio::test(flavor = "multi_thread")]
async fn objects_named_by_a_write_intent_are_never_planned_or_deleted() {
    use lake_gc::apply::ApplyOptions;
    use lake_gc::unchecked::apply_unchecked as apply;
    let f = fixture();
    let o = objects(&f, 3).await;
    let engine = MemoryEngine::new();
    engine.append("t", &[o[0].identity()]);
    tokio::time::sleep(Duration::from_millis(10)).await;
    let cutoff = Utc::now();
    let before = gc(&f, &engine, cutoff, 10).await;
    assert_eq!(keys(&before), BTreeSet::from([o[1].key.clone(), o[2].key.clone()]));

    let key = engine.add_intent("t", vec![o[1].identity(), ObjectIdentity::new("s3://elsewhere/x", [1; 32], 1)]);
    let options = PlanOptions::new(f.store.root(), Duration::from_secs(60), cutoff).page_size(1).memory_budget(3);
    let (with_intent, stats) = plan(&engine, &LocalInventory::new(f.store.clone()), &options).await.unwrap();
    assert!(with_intent.lineage_complete);
    assert_eq!(keys(&with_intent), BTreeSet::from([o[2].key.clone()]));
    assert_eq!(stats.write_intents.iter().map(|i| i.key.clone()).collect::<Vec<_>>(), vec![key.clone()]);
    assert_eq!(stats.intent_references, 2);

    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&f.store);
    let report =
        apply(&engine, &deleter, &dir.path().join("c").as_path().into(), Some(&before), &ApplyOptions::default())
            .await
            .unwrap();
    assert_eq!(report.checkpoint.revived, vec![o[1].key.clone()], "the intent's object is revived, not deleted");
    assert!(f.store.head(&o[1].key).await.unwrap().is_some());
    assert!(f.store.head(&o[2].key).await.unwrap().is_none());

    // Resolved (its commit proven never to land): the object is an orphan again.
    engine.remove_intent(&key);
    assert_eq!(keys(&gc(&f, &engine, cutoff, 10).await), BTreeSet::from([o[1].key.clone()]));
}
