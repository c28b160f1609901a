//! Adversarial pass against Lance branches (`t@b` lineages). Every test asserts the SAFE outcome:
//! a failing test is a successful attack.

use crate::gc_scenario::dry_run;
use crate::support::{apply_fresh, batch, new_lake, reader, TestLake};
use arrow_array::{RecordBatch, RecordBatchIterator};
use chrono::{DateTime, Utc};
use lake_gc::apply::ApplyOptions;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::{plan_with_unchecked_cutoff, PlanOptions};
use lake_lance::branch::BranchSource;
use lake_lance::LanceEngineError;
use lake_store::writer::ManagedObject;
use lance::Dataset;
use std::collections::BTreeSet;
use std::time::Duration;

fn iter(batch: RecordBatch) -> RecordBatchIterator<std::vec::IntoIter<Result<RecordBatch, arrow_schema::ArrowError>>> {
    let schema = batch.schema();
    RecordBatchIterator::new(vec![Ok(batch)].into_iter(), schema)
}

async fn cutoff_now() -> DateTime<Utc> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    cutoff
}

/// A dry run that may fail (an engine error is a refusal too).
async fn try_plan(lake: &TestLake, cutoff: DateTime<Utc>) -> Result<GcPlan, String> {
    let options = PlanOptions::new(lake.store.root(), Duration::from_secs(1), cutoff).page_size(10).memory_budget(3);
    plan_with_unchecked_cutoff(&lake.engine, lake_gc::inventory::for_store(&lake.store).as_ref(), &options)
        .await
        .map(|(p, _)| p)
        .map_err(|e| e.to_string())
}

fn candidates(plan: &GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().collect()
}

/// Plans (if planning works), applies the plan, and asserts that none of `live` was planned or
/// deleted. Returns whether the plan was complete.
async fn assert_live_survive(lake: &TestLake, cutoff: DateTime<Utc>, live: &[&ManagedObject]) -> Option<bool> {
    let plan = match try_plan(lake, cutoff).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("planning refused: {e}");
            for o in live {
                assert!(lake.store.head(&o.key).await.unwrap().is_some());
            }
            return None;
        }
    };
    let planned = candidates(&plan);
    eprintln!("complete={} problems={:?} candidates={planned:?}", plan.lineage_complete, plan.problems);
    for o in live {
        assert!(!planned.contains(&o.key), "{} is referenced by a retained version but was planned", o.key);
    }
    let applied = apply_fresh(lake, &plan, &ApplyOptions::default()).await;
    eprintln!("apply: {:?}", applied.as_ref().map(|r| r.checkpoint.deleted));
    for o in live {
        assert!(lake.store.head(&o.key).await.unwrap().is_some(), "{} was deleted", o.key);
    }
    Some(plan.lineage_complete)
}

fn branch_dir(lake: &TestLake, lineage: &str) -> std::path::PathBuf {
    lake.store.local_dir().unwrap().join(lake_store::layout::dataset_key(lineage))
}

/// Table `t`: v1 references `a`. Branch `b` (engine) from v1.
async fn lake_with_branch() -> (TestLake, ManagedObject) {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"main row").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    lake.engine.create_branch("t", "b", &BranchSource::Version(1)).await.unwrap();
    (lake, a)
}

// 1. Another client appends to a registered branch, opened by its tree URI.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_append_by_tree_uri() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"foreign row on the branch").await;
    let cutoff = cutoff_now().await;
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t@b")).await.unwrap();
    ds.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 2. Another client checks the branch out from main and appends.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_append_via_checkout_branch() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"foreign row on the branch").await;
    let cutoff = cutoff_now().await;
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let mut b = ds.checkout_branch("b").await.unwrap();
    b.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 3. Another client makes a branch of the registered branch and writes on it.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_branch_of_registered_branch() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"row on a branch of the branch").await;
    let cutoff = cutoff_now().await;
    // Via the tree URI (Lance knows it is branch `b` from its manifest).
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t@b")).await.unwrap();
    let v = ds.version().version;
    let mut c = ds.create_branch("c", ("b", v), None).await.unwrap();
    c.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    eprintln!("c at {}", c.uri());
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 4. A zombie nested branch `b/z` (its create_branch stopped between the dataset and the
// document) lives inside the registered branch's folder `tree/b/z`.
#[tokio::test(flavor = "multi_thread")]
async fn nested_zombie_under_registered_branch() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"row only on the zombie b/z").await;
    let cutoff = cutoff_now().await;
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let mut z = ds.create_branch("b/z", 1, None).await.unwrap();
    z.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    eprintln!("zombie at {}", z.uri());
    // The crash between Lance's two phases: the document is missing.
    let refs = lake.store.local_dir().unwrap().join("tables/t.lance/_refs/branches");
    for e in std::fs::read_dir(&refs).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        if name != "b.json" {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    assert!(branch_dir(&lake, "t@b").join("z/_versions").exists(), "the premise: the zombie dataset");
    // Still readable as a dataset, with x.
    let zz = Dataset::open(&format!("{}/z", lake.engine.dataset_uri("t@b"))).await.unwrap();
    assert_eq!(zz.count_rows(None).await.unwrap(), 2);
    // And through the table's own Lance API, by branch name.
    let by_name = ds.checkout_branch("b/z").await.map(|d| d.version().version);
    eprintln!("checkout_branch(\"b/z\") on the zombie: {by_name:?}");
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 5. A tag on main naming a branch version, then a branch made from that tag.
#[tokio::test(flavor = "multi_thread")]
async fn tag_on_main_naming_a_branch_version() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"on the branch, v2").await;
    let m = lake.upload("m.bin", b"on main, v2").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e3", Some(&m))])])).await.unwrap();
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.tags().create("onb", ("b", 2)).await.unwrap();
    let made = lake.engine.create_branch("t", "c", &BranchSource::Tag("onb".into())).await;
    eprintln!("create from a branch tag: {made:?}");
    if let Ok(made) = made {
        let first = made.version;
        let journal = lake.engine.journal_counts_at("t@c", first).await.unwrap();
        let scanned = lake.engine.scan_version("t@c", first).await.unwrap();
        assert_eq!(journal, scanned, "the branch's journal describes its content");
    }
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    // Lance's cleanup of the branch keeps the tagged version; main's cleanup too.
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    lake.engine.cleanup("t@b", Duration::ZERO).await.unwrap();
    let cutoff = cutoff_now().await;
    assert_live_survive(&lake, cutoff, &[&a, &y, &m]).await;
}

// 6. A branch made from a later version appears between plan and apply, between two groups,
// and references a candidate.
#[tokio::test(flavor = "multi_thread")]
async fn branch_appears_between_groups() {
    let lake = new_lake().await;
    let x1 = lake.upload("x1.bin", b"orphan 1").await;
    let x2 = lake.upload("x2.bin", b"orphan 2").await;
    let a = lake.upload("a.bin", b"main").await;
    let c = lake.upload("c.bin", b"main v2").await;
    lake.engine.append("t", reader(vec![batch(&[("e1", Some(&a))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e2", Some(&c))])])).await.unwrap();
    let cutoff = cutoff_now().await;
    let plan = dry_run(&lake, cutoff, 1).await;
    assert!(plan.lineage_complete);
    assert_eq!(candidates(&plan), BTreeSet::from([x1.key.clone(), x2.key.clone()]));
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("c");
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let opts = |max| ApplyOptions { page_size: 1, max_pages: max, concurrency: 1, ..ApplyOptions::default() };
    lake_gc::unchecked::apply_unchecked(&lake.engine, &deleter, &ckpt.as_path().into(), Some(&plan), &opts(Some(1)))
        .await
        .unwrap();
    let first = lake.engine.create_branch("t", "late", &BranchSource::Version(2)).await.unwrap();
    eprintln!("branch from v2 starts at {}", first.version);
    let (gone, kept) = if lake.store.head(&x1.key).await.unwrap().is_none() { (&x1, &x2) } else { (&x2, &x1) };
    assert!(lake.store.head(&gone.key).await.unwrap().is_none());
    lake.engine.append("t@late", reader(vec![batch(&[("e9", Some(kept))])])).await.unwrap();
    let resumed =
        lake_gc::unchecked::apply_unchecked(&lake.engine, &deleter, &ckpt.as_path().into(), None, &opts(None)).await;
    // The new lineage is read from its first entry (a snapshot at version 2): the apply goes on
    // and revives the candidate the branch now references.
    let report = resumed.unwrap();
    assert!(report.checkpoint.revived.contains(&kept.key), "{:?}", report.checkpoint.revived);
    assert!(lake.store.head(&kept.key).await.unwrap().is_some(), "the branch references {}", kept.key);
}

// 7. Delete a branch between plan and apply and make a new one (a branch name is used once: the
// old name is refused); the new branch reaches the plan's version and references a candidate.
#[tokio::test(flavor = "multi_thread")]
async fn recreated_branch_between_plan_and_apply() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"old branch v2").await;
    let x = lake.upload("x.bin", b"orphan at plan time").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    let cutoff = cutoff_now().await;
    let plan = dry_run(&lake, cutoff, 10).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(candidates(&plan), BTreeSet::from([x.key.clone()]));
    lake.engine.delete_branch("t", "b").await.unwrap();
    // A deleted branch's name is spent; the new branch gets another name.
    assert!(lake.engine.create_branch("t", "b", &BranchSource::Version(1)).await.is_err());
    lake.engine.create_branch("t", "c", &BranchSource::Version(1)).await.unwrap();
    let out = lake.engine.append("t@c", reader(vec![batch(&[("e2", Some(&x))])])).await.unwrap();
    assert_eq!(out.version, 2);
    let applied = apply_fresh(&lake, &plan, &ApplyOptions::default()).await;
    eprintln!("apply: {:?}", applied.as_ref().map(|r| (&r.checkpoint.revived, r.checkpoint.deleted)));
    assert!(lake.store.head(&x.key).await.unwrap().is_some(), "the new branch references x");
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
}

// 8. Another client deletes the registered branch (the journal goes with Lance's folder), then
// re-creates it from main and writes on it: the registry pin remains.
#[tokio::test(flavor = "multi_thread")]
async fn foreign_delete_and_recreate() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"old branch v2").await;
    let x = lake.upload("x.bin", b"new branch row").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.delete_branch("b").await.unwrap();
    let cutoff = cutoff_now().await;
    let after_delete = try_plan(&lake, cutoff).await;
    eprintln!("after a foreign delete: {:?}", after_delete.as_ref().map(|p| (p.lineage_complete, &p.problems)));
    let mut nb = ds.create_branch("b", 1, None).await.unwrap();
    nb.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    nb.append(iter(batch(&[("e10", None)])), None).await.unwrap();
    let cutoff = cutoff_now().await;
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 9. Another client deletes the registered branch; the engine then creates it again: refused
// (the lineage is still registered), a write to it refused, and once the engine finished the
// deletion the name is spent; a branch of another name takes its place.
#[tokio::test(flavor = "multi_thread")]
async fn engine_recreate_after_foreign_delete() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"old branch v2").await;
    let m = lake.upload("m.bin", b"main v2").await;
    let x = lake.upload("x.bin", b"new branch row").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    lake.engine.append("t", reader(vec![batch(&[("e3", Some(&m))])])).await.unwrap();
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.delete_branch("b").await.unwrap();
    let made = lake.engine.create_branch("t", "b", &BranchSource::Version(2)).await;
    assert!(matches!(&made, Err(LanceEngineError::InvalidInput(m)) if m.contains("still registered")), "{made:?}");
    lake.engine.delete_branch("t", "b").await.unwrap();
    let again = lake.engine.create_branch("t", "b", &BranchSource::Version(2)).await;
    assert!(matches!(&again, Err(LanceEngineError::InvalidInput(m)) if m.contains("used once")), "{again:?}");
    lake.engine.create_branch("t", "b2", &BranchSource::Version(2)).await.unwrap();
    lake.engine.append("t@b2", reader(vec![batch(&[("e9", Some(&x))])])).await.unwrap();
    // Main forgets m; the branch keeps it.
    lake.engine.delete("t", "episode = 'e3'").await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let cutoff = cutoff_now().await;
    assert_live_survive(&lake, cutoff, &[&a, &m, &x]).await;
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
}

// 10. Restore on a branch, then cleanups.
#[tokio::test(flavor = "multi_thread")]
async fn restore_on_branch() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"branch v2").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    lake.engine.delete("t@b", "episode = 'e2'").await.unwrap().unwrap();
    let restored = lake.engine.restore("t@b", 2).await;
    eprintln!("restore on a branch: {restored:?}");
    lake.engine.cleanup("t@b", Duration::ZERO).await.unwrap();
    lake.engine.delete("t", "episode = 'e1'").await.unwrap().unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    let cutoff = cutoff_now().await;
    let live: Vec<&ManagedObject> = if restored.is_ok() { vec![&a, &y] } else { vec![&a] };
    assert_live_survive(&lake, cutoff, &live).await;
    let check = lake_lance::verify::check_retained_objects(&lake.engine).await.unwrap();
    assert!(check.is_ok(), "{check:?}");
}

// 11. Compaction on a branch, cleanups of branch and main, then GC and a read-back.
#[tokio::test(flavor = "multi_thread")]
async fn compaction_on_branch_and_cleanups() {
    let (lake, a) = lake_with_branch().await;
    let mut objs = Vec::new();
    for i in 0..4 {
        let o = lake.upload(&format!("o{i}.bin"), format!("branch {i}").as_bytes()).await;
        lake.engine.append("t@b", reader(vec![batch(&[(&format!("b{i}"), Some(&o))])])).await.unwrap();
        objs.push(o);
    }
    lake.engine.delete("t@b", "episode = 'b0'").await.unwrap().unwrap();
    let compacted = lake.engine.compact("t@b").await.unwrap();
    eprintln!("compact on branch: {compacted:?}");
    lake.engine.cleanup("t@b", Duration::ZERO).await.unwrap();
    lake.engine.delete("t", "episode = 'e1'").await.unwrap().unwrap();
    lake.engine.compact("t").await.unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    let report = lake.engine.verify_refs(&[]).await.unwrap();
    assert!(report.is_ok(), "{report:?}");
    let cutoff = cutoff_now().await;
    assert_live_survive(&lake, cutoff, &[&a, &objs[1], &objs[2], &objs[3]]).await;
    let check = lake_lance::verify::check_retained_objects(&lake.engine).await.unwrap();
    assert!(check.is_ok(), "{check:?}");
}

// 12. A foreign shallow clone of the table placed at `tree/c` (no branch document).
#[tokio::test(flavor = "multi_thread")]
async fn foreign_shallow_clone_into_tree() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"row on the clone").await;
    let cutoff = cutoff_now().await;
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let target = format!("{}/tree/c", lake.engine.dataset_uri("t"));
    let mut clone = ds.shallow_clone(&target, 1, None).await.unwrap();
    clone.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
    // Registered by hand as t@c with a hand-made (truthful-looking) snapshot of version 1.
    lake_store::registry::register_branch(&lake.store, "t@c", 2).await.unwrap();
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 13. A registry pin `t@ghost` with no branch folder; and a pin whose folder another client
// removed after the engine registered it.
#[tokio::test(flavor = "multi_thread")]
async fn pin_without_branch_folder() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"branch row").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    lake_store::registry::register_branch(&lake.store, "t@ghost", 1).await.unwrap();
    let cutoff = cutoff_now().await;
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &y]).await, Some(true));
    std::fs::remove_dir_all(lake.store.local_dir().unwrap().join("_lake/registry/t@ghost")).unwrap();
    // The branch's folder removed by hand (its document kept).
    let moved = lake.store.local_dir().unwrap().join("moved-b");
    std::fs::rename(branch_dir(&lake, "t@b"), &moved).unwrap();
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &y]).await, Some(true));
}

// 14. A foreign child branch `b/x` of the registered `b`, then the engine deletes `b`: Lance
// keeps `tree/b` for the child, the engine removes its files.
#[tokio::test(flavor = "multi_thread")]
async fn engine_delete_with_foreign_child() {
    let (lake, a) = lake_with_branch().await;
    let x = lake.upload("x.bin", b"row on the child").await;
    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let mut child = ds.create_branch("b/x", 1, None).await.unwrap();
    child.append(iter(batch(&[("e9", Some(&x))])), None).await.unwrap();
    let deleted = lake.engine.delete_branch("t", "b").await;
    eprintln!("engine delete with a child: {deleted:?}");
    // The engine removes only its own files: the child's dataset, which Lance keeps, survives.
    assert!(branch_dir(&lake, "t@b").join("x/_versions").exists(), "the nested branch's dataset was destroyed");
    assert!(ds.checkout_branch("b/x").await.is_ok(), "the nested branch is no longer readable");
    let cutoff = cutoff_now().await;
    assert_ne!(assert_live_survive(&lake, cutoff, &[&a, &x]).await, Some(true));
}

// 15. Lance's own cleanup of main cascading into branches (`clean_referenced_branches`) run by
// another client, after a foreign index on the branch (an implied entry whose proof Lance's
// cascade removes).
#[tokio::test(flavor = "multi_thread")]
async fn main_cleanup_by_another_client() {
    let (lake, a) = lake_with_branch().await;
    let y = lake.upload("y.bin", b"branch v2").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e2", Some(&y))])])).await.unwrap();
    lake.engine.delete("t@b", "episode = 'e2'").await.unwrap().unwrap();
    let x = lake.upload("x.bin", b"branch v4").await;
    lake.engine.append("t@b", reader(vec![batch(&[("e4", Some(&x))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'e1'").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let policy = lance::dataset::cleanup::CleanupPolicyBuilder::default()
        .before_timestamp(Utc::now())
        .clean_referenced_branches(true)
        .build();
    let r = ds.cleanup_with_policy(policy).await;
    eprintln!("foreign cascading cleanup: {:?}", r.as_ref().map(|s| s.old_versions));
    let bds = Dataset::open(&lake.engine.dataset_uri("t@b")).await.unwrap();
    eprintln!(
        "branch versions after: {:?}",
        bds.version_refs().await.unwrap().iter().map(|v| v.version).collect::<Vec<_>>()
    );
    let cutoff = cutoff_now().await;
    assert_live_survive(&lake, cutoff, &[&a, &x]).await;
}
