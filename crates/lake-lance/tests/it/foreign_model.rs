//! A model-based test of GC against a second Lance client: random histories mix the engine's
//! writes (appends, deletes), foreign writes (appends, rewrites whose reference column lost
//! its marker, metadata updates that drop the marker, branches written on, and rollbacks of the
//! dataset folder to an earlier copy), repairs, version cleanup, and GC (dry run and apply).
//! After every step: no object that any retained version of any branch references (read by a
//! plain scan of the `file` column, independent of lake's rules) is planned, and after an apply
//! every such object still exists.

use crate::gc_scenario::dry_run;
use crate::support::{batch, copy_tree, new_lake, reader, schema, TestLake};
use crate::truth::referenced;
use arrow_array::RecordBatchIterator;
use arrow_schema::{Field, Schema};
use chrono::Utc;
use lake_gc::apply::ApplyOptions;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_store::writer::ManagedObject;
use lance::dataset::{WriteMode, WriteParams};
use lance::Dataset;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Whether the table's `file` column still carries the DataLocation marker (a foreign writer
/// writes what the table's schema says, as pylance would).
async fn table_marked(lake: &TestLake) -> bool {
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    ds.schema().field("file").is_some_and(|f| !f.metadata.is_empty())
}

/// `rows` as a batch, the `file` column's marker kept or dropped.
fn rows_batch(rows: &[(&str, Option<&ManagedObject>)], marked: bool) -> arrow_array::RecordBatch {
    let b = batch(rows);
    if marked {
        return b;
    }
    let fields: Vec<Field> =
        schema().fields().iter().map(|f| f.as_ref().clone().with_metadata(HashMap::new())).collect();
    arrow_array::RecordBatch::try_new(Arc::new(Schema::new(fields)), b.columns().to_vec()).unwrap()
}

/// A foreign write of `rows` with `mode`, the `file` column's marker kept or dropped.
async fn foreign_write(lake: &TestLake, rows: &[(&str, Option<&ManagedObject>)], mode: WriteMode, marked: bool) {
    let b = rows_batch(rows, marked);
    let s = b.schema();
    let params = WriteParams { mode, ..Default::default() };
    Dataset::write(RecordBatchIterator::new(vec![Ok(b)], s), lake.engine.dataset_uri("t").as_str(), Some(params))
        .await
        .unwrap();
}

/// `lake refs repair` of every version that has no journal entry (a refusal is fine: GC then
/// keeps refusing too).
async fn repair_all(lake: &TestLake) {
    for v in lake.engine.versions("t").await.unwrap() {
        if !v.journaled {
            let _ = lake.engine.repair_refs("t", v.version).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn foreign_writes_never_make_gc_delete_a_referenced_object() {
    let mut seed: u64 = 0x5EED_F00D;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut applied = 0;
    for history in 0..8 {
        let lake = new_lake().await;
        let root = lake.store.local_dir().unwrap().to_path_buf();
        let backup = tempfile::tempdir().unwrap();
        let mut have_backup = false;
        let mut pool: Vec<ManagedObject> = Vec::new();
        let mut ops: Vec<&str> = Vec::new();
        lake.engine.append("t", reader(vec![batch(&[("e0", None)])])).await.unwrap();
        for step in 0..14 {
            // Writers reference fresh uploads or objects some retained version still references
            // (what the publication guard allows; an object GC may already have deleted is never
            // published again).
            let live = referenced(&lake, "t").await;
            pool.retain(|o| live.contains(&o.key));
            for i in 0..2 {
                pool.push(
                    lake.upload(&format!("h{history}s{step}o{i}"), format!("{history} {step} {i}").as_bytes()).await,
                );
            }
            let pick = |n: u64| &pool[pool.len() - 1 - (n as usize % pool.len().min(6))];
            let (x, y) = (pick(next(6)), pick(next(6)));
            let episode = format!("e{}", next(3));
            let op = next(12);
            let label = match op {
                0 | 1 => {
                    // (Refused by Lance once another client dropped the column's marker: the
                    // schemas then differ in the extension type.)
                    let rows = reader(vec![batch(&[(episode.as_str(), Some(x)), ("e1", Some(y))])]);
                    match lake.engine.append("t", rows).await {
                        Ok(_) => "append",
                        Err(_) => "append refused",
                    }
                }
                2 => {
                    let _ = lake.engine.delete("t", &format!("episode = '{episode}'")).await;
                    "delete"
                }
                3 => {
                    let marked = table_marked(&lake).await;
                    foreign_write(&lake, &[(episode.as_str(), Some(x))], WriteMode::Append, marked).await;
                    "foreign append"
                }
                4 => {
                    // A rewrite through another client: the same layout, no marker.
                    foreign_write(&lake, &[("e0", Some(x)), ("e1", Some(y))], WriteMode::Overwrite, false).await;
                    "foreign rewrite without marker"
                }
                5 => {
                    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
                    let id = ds.schema().field("file").unwrap().id as u32;
                    ds.replace_field_metadata([(id, HashMap::new())]).await.unwrap();
                    "foreign marker drop"
                }
                6 => {
                    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
                    let name = format!("b{step}");
                    let latest = ds.version().version;
                    let mut branch = ds.create_branch(&name, latest, None).await.unwrap();
                    let rows = rows_batch(&[("branch", Some(x))], table_marked(&lake).await);
                    let s = rows.schema();
                    branch.append(RecordBatchIterator::new(vec![Ok(rows)], s), None).await.unwrap();
                    "branch written on"
                }
                7 => {
                    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
                    for name in ds.list_branches().await.unwrap().into_keys() {
                        ds.delete_branch(&name).await.unwrap();
                    }
                    "branches deleted"
                }
                8 | 9 if have_backup => {
                    // The dataset folder rolled back to an earlier copy.
                    std::fs::remove_dir_all(root.join("tables/t.lance")).unwrap();
                    copy_tree(backup.path(), &root.join("tables/t.lance"));
                    "rollback"
                }
                8 | 9 => {
                    copy_tree(&root.join("tables/t.lance"), backup.path());
                    have_backup = true;
                    "backup"
                }
                10 => {
                    repair_all(&lake).await;
                    "repair"
                }
                _ => {
                    let _ = lake.engine.cleanup("t", Duration::ZERO).await;
                    "cleanup"
                }
            };
            ops.push(label);
            // GC after every step.
            tokio::time::sleep(Duration::from_millis(5)).await;
            let truth = referenced(&lake, "t").await;
            let plan = dry_run(&lake, Utc::now(), 4).await;
            let planned: BTreeSet<String> = plan.candidates.keys().unwrap().into_iter().collect();
            let wrong: Vec<&String> = planned.intersection(&truth).collect();
            assert!(wrong.is_empty(), "history {history} after {ops:?}: planned referenced objects {wrong:?}");
            if plan.lineage_complete && !planned.is_empty() {
                let dir = tempfile::tempdir().unwrap();
                let deleter = lake_gc::deleter::for_store(&lake.store);
                let options = ApplyOptions::default();
                if apply(&lake.engine, &deleter, &dir.path().join("c").as_path().into(), Some(&plan), &options)
                    .await
                    .is_ok()
                {
                    applied += 1;
                }
                for key in &truth {
                    assert!(
                        lake.store.head(key).await.unwrap().is_some(),
                        "history {history} after {ops:?}: {key} is referenced and was deleted"
                    );
                }
            }
        }
        println!("history {history}: {ops:?}");
    }
    println!("{applied} applies over the histories");
    assert!(applied > 3, "the histories must reach applies, not only refusals ({applied})");
}
