//! Apply trusts the lineage it sees, not a version number: every key it deletes, on a first
//! attempt or a retry, is checked against the lineage as it is then, and a table that went
//! backwards, lost or regained versions, or whose journal changed stops apply with a named
//! problem. Each test starts from an adversarial input of this kind.

use crate::gc_scenario::dry_run;
use crate::support::{batch, copy_tree, new_lake, reader, schema, TestLake};
use async_trait::async_trait;
use chrono::Utc;
use lake_gc::apply::{ApplyOptions, ApplyReport};
use lake_gc::deleter::{DeleteOutcome, ObjectDeleter};
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_gc::GcError;
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

/// A second Lance client appends a row referencing `object` (no journal entry); `lake refs
/// repair` then journals that version from a scan, as an operator would.
async fn foreign_append_and_repair(lake: &TestLake, object: &ManagedObject) -> u64 {
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let rows = arrow_array::RecordBatchIterator::new(vec![Ok(batch(&[("foreign", Some(object))]))], schema());
    let ds = Dataset::write(rows, lake.engine.dataset_uri("t").as_str(), Some(params)).await.unwrap();
    let version = ds.version().version;
    lake.engine.repair_refs("t", version).await.unwrap();
    version
}

/// A lake with one live object and `n` old orphans, planned.
async fn planned(n: usize) -> (TestLake, ManagedObject, Vec<ManagedObject>, GcPlan) {
    let lake = new_lake().await;
    let live = lake.upload("live.bin", b"live").await;
    let mut orphans = Vec::new();
    for i in 0..n {
        orphans.push(lake.upload(&format!("o{i}.bin"), format!("orphan {i}").as_bytes()).await);
    }
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&live))])])).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.len(), n);
    (lake, live, orphans, plan)
}

async fn apply_with(
    lake: &TestLake,
    deleter: &dyn ObjectDeleter,
    ckpt: &Path,
    plan: Option<&GcPlan>,
) -> Result<ApplyReport, GcError> {
    let options = ApplyOptions { page_size: 1, concurrency: 1, ..ApplyOptions::default() };
    apply(&lake.engine, deleter, &ckpt.into(), plan, &options).await
}

fn problems(err: GcError) -> Vec<String> {
    match err {
        GcError::LineageIncomplete { problems } => problems.iter().map(|p| p.to_string()).collect(),
        other => panic!("expected a lineage refusal, got {other}"),
    }
}

/// The adversarial input: a plan saved with `--out`, then the dataset folder restored from a
/// backup taken before the last commit (its latest version below the plan's basis; the registry
/// still names the newer one). Apply stops, naming both; nothing is deleted; a fresh dry run is
/// incomplete too.
#[tokio::test(flavor = "multi_thread")]
async fn a_dataset_restored_from_an_older_backup_stops_apply() {
    let lake = new_lake().await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
    let root = lake.store.local_dir().unwrap().to_path_buf();
    let backup = tempfile::tempdir().unwrap();
    copy_tree(&root.join("tables/t.lance"), backup.path());
    // The last commit: `b` is referenced only by version 2, `a` is deleted from it.
    lake.engine.append("t", reader(vec![batch(&[("f", Some(&b))])])).await.unwrap();
    lake.engine.delete("t", "episode = 'e'").await.unwrap().unwrap();
    lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(15)).await;
    let plan = dry_run(&lake, Utc::now(), 10).await;
    assert_eq!(plan.candidates.keys().unwrap(), vec![a.key.clone()]);
    let saved = GcPlan::from_document(&plan.to_document().unwrap(), "plan.json").unwrap();
    // Restored: version 1 only, which references `a`.
    std::fs::remove_dir_all(root.join("tables/t.lance")).unwrap();
    copy_tree(backup.path(), &root.join("tables/t.lance"));
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let found = problems(apply_with(&lake, &deleter, &dir.path().join("c"), Some(&saved)).await.unwrap_err());
    assert!(found.iter().any(|p| p.contains("went backwards")), "{found:?}");
    assert!(found.iter().any(|p| p.contains("the registry pins version 3")), "{found:?}");
    assert!(lake.store.head(&a.key).await.unwrap().is_some(), "the restored latest version references it");
    let fresh = dry_run(&lake, Utc::now(), 10).await;
    assert!(!fresh.lineage_complete && fresh.candidates.is_empty(), "{:?}", fresh.problems);
}

/// Work run by a deleter before one of its batches.
type Hook<'a> = Option<(usize, Pin<Box<dyn Future<Output = ()> + Send + 'a>>)>;

/// A way to break a lake's lineage after its plan, and what the refusal says.
type Breakage = (&'static str, fn(&Path));

/// A deleter that fails the given key on its first attempt (an undeletable file for one run),
/// and runs `hook` before its `nth` batch.
struct Flaky<'a> {
    inner: Box<dyn ObjectDeleter>,
    fail_once: Mutex<Option<String>>,
    batches: Mutex<usize>,
    hook: Mutex<Hook<'a>>,
}

#[async_trait]
impl ObjectDeleter for Flaky<'_> {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        let n = {
            let mut b = self.batches.lock().unwrap();
            *b += 1;
            *b
        };
        let due = { self.hook.lock().unwrap().as_ref().is_some_and(|(at, _)| *at == n) };
        if due {
            let hook = self.hook.lock().unwrap().take();
            if let Some((_, hook)) = hook {
                hook.await;
            }
        }
        let failing = self.fail_once.lock().unwrap().clone();
        if let Some(k) = failing.filter(|k| keys.contains(k)) {
            *self.fail_once.lock().unwrap() = None;
            let rest: Vec<String> = keys.iter().filter(|x| **x != k).cloned().collect();
            let mut outcomes = self.inner.delete_batch(&rest).await?.into_iter();
            return Ok(keys
                .iter()
                .map(|x| if *x == k { DeleteOutcome::Failed("simulated".into()) } else { outcomes.next().unwrap() })
                .collect());
        }
        self.inner.delete_batch(keys).await
    }
}

fn flaky<'a>(lake: &TestLake, fail_once: Option<&str>) -> Flaky<'a> {
    Flaky {
        inner: lake_gc::deleter::for_store(&lake.store),
        fail_once: Mutex::new(fail_once.map(str::to_string)),
        batches: Mutex::new(0),
        hook: Mutex::new(None),
    }
}

/// The adversarial input: a candidate whose delete failed, then a newer version references it
/// (a second client, then `lake refs repair`), then apply runs again: the retry revalidates it
/// and revives it instead of deleting it.
#[tokio::test(flavor = "multi_thread")]
async fn a_retried_delete_is_revalidated_like_a_first_one() {
    let (lake, _, orphans, plan) = planned(3).await;
    let victim = &orphans[1];
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("c");
    let deleter = flaky(&lake, Some(&victim.key));
    let first = apply_with(&lake, &deleter, &ckpt, Some(&plan)).await.unwrap();
    assert_eq!(first.checkpoint.failed, vec![victim.key.clone()]);
    assert!(!first.checkpoint.complete);
    foreign_append_and_repair(&lake, victim).await;
    let again = apply_with(&lake, &deleter, &ckpt, None).await.unwrap();
    assert_eq!(again.checkpoint.revived, vec![victim.key.clone()], "{:?}", again.checkpoint);
    assert!(again.checkpoint.complete && again.checkpoint.failed.is_empty());
    assert!(lake.store.head(&victim.key).await.unwrap().is_some(), "a referenced object must survive the retry");
}

/// A version journaled while apply runs (here by `lake refs repair` of a second client's
/// version, which no publication guard stops) is seen before the next group of deletes: the
/// candidate it references is revived. So is one referenced by a table created mid-apply.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_journaled_during_apply_is_seen_before_the_next_group() {
    let (lake, _, mut orphans, plan) = planned(4).await;
    // In the plan's order (by key): groups of one key; the hook runs during the second group.
    orphans.sort_by(|a, b| a.key.cmp(&b.key));
    let (late, other_table) = (&orphans[3], &orphans[2]);
    let dir = tempfile::tempdir().unwrap();
    let deleter = flaky(&lake, None);
    let hook = async {
        foreign_append_and_repair(&lake, late).await;
        lake.engine.append("u", reader(vec![batch(&[("e", Some(other_table))])])).await.unwrap();
    };
    *deleter.hook.lock().unwrap() = Some((2, Box::pin(hook)));
    let report = apply_with(&lake, &deleter, &dir.path().join("c"), Some(&plan)).await.unwrap();
    let mut revived = report.checkpoint.revived.clone();
    revived.sort();
    let mut want = vec![late.key.clone(), other_table.key.clone()];
    want.sort();
    assert_eq!(revived, want, "{:?}", report.checkpoint);
    assert_eq!(report.checkpoint.deleted, 2);
    for kept in [late, other_table] {
        assert!(lake.store.head(&kept.key).await.unwrap().is_some());
    }
}

/// More of the kind: a journal file rewritten after the plan (even with the same bytes: another
/// file), a version that reappears below the plan's latest (a manifest restored after cleanup),
/// and a table dropped from the registry all stop apply with a named problem; nothing deleted.
#[tokio::test(flavor = "multi_thread")]
async fn a_lineage_that_did_not_only_move_forward_stops_apply() {
    let cases: [Breakage; 3] = [
        ("changed since the plan", |root| {
            let key = root.join(lake_store::layout::sidecar_key("t", 2));
            let bytes = std::fs::read(&key).unwrap();
            std::fs::remove_file(&key).unwrap();
            std::fs::write(&key, bytes).unwrap();
        }),
        ("exists now but did not when the plan was made", |root| {
            // The manifests cleanup removed, restored from a backup.
            let versions = root.join("tables/t.lance/_versions");
            for e in std::fs::read_dir(root.join("saved-manifests")).unwrap() {
                let e = e.unwrap();
                if !versions.join(e.file_name()).exists() {
                    std::fs::copy(e.path(), versions.join(e.file_name())).unwrap();
                }
            }
        }),
        ("no longer registered", |root| {
            std::fs::remove_dir_all(root.join("_lake/registry/t")).unwrap();
        }),
    ];
    for (needle, break_it) in cases {
        let lake = new_lake().await;
        let a = lake.upload("a.bin", b"a").await;
        let orphan = lake.upload("o.bin", b"o").await;
        lake.engine.append("t", reader(vec![batch(&[("e", Some(&a))])])).await.unwrap();
        lake.engine.append("t", reader(vec![batch(&[("f", Some(&a))])])).await.unwrap();
        let root = lake.store.local_dir().unwrap().to_path_buf();
        // A backup of the manifests, taken before cleanup removes version 1's.
        copy_tree(&root.join("tables/t.lance/_versions"), &root.join("saved-manifests"));
        lake.engine.cleanup("t", Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(15)).await;
        let plan = dry_run(&lake, Utc::now(), 10).await;
        assert_eq!(plan.candidates.keys().unwrap(), vec![orphan.key.clone()], "{needle}");
        break_it(&root);
        let dir = tempfile::tempdir().unwrap();
        let deleter = lake_gc::deleter::for_store(&lake.store);
        let found = problems(apply_with(&lake, &deleter, &dir.path().join("c"), Some(&plan)).await.unwrap_err());
        assert!(found.iter().any(|p| p.contains(needle)), "{needle}: {found:?}");
        assert!(lake.store.head(&orphan.key).await.unwrap().is_some(), "{needle}: nothing deleted");
    }
}
