//! A model-based test of the journal over every table operation the engine offers: random
//! histories of appends, deletes, updates, upserts, a reference column added, renamed and
//! dropped, indexes built and dropped (by the engine and by another Lance client), config
//! changes by another client, compaction, version cleanup, branches created, written on and
//! deleted, GC applies, appends whose manifest write is held past the writer's deadline
//! (`intents::delayed_commit_step`: GC runs while it is held, and it lands, is fenced off, or
//! lands after its writer gave up and is recovered), a child writer suspended (`SIGSTOP`) at a
//! step of the write protocol while a resolver whose clock is hours ahead resolves it and GC
//! applies, then resumed (`SIGCONT`), and a write paused mid-commit while such a resolver (a
//! host clock stepped forward) revokes and fences it. After every step:
//! - the journal replays to what full scans of every retained version show (`verify_refs`);
//! - a dry run plans exactly the true orphans: every managed object in the store that no
//!   retained version of the table or of a branch references, read by a plain scan of every
//!   struct column with a `uri`
//!   child (independent of lake's rules);
//! - after an apply, every referenced object still exists.

use crate::gc_scenario::dry_run;
use crate::hold::ManifestHold;
use crate::intents::{delayed_commit_step, held_engine};
use crate::support::{batch, engine_later, keyed_locations, new_lake, reader, TestLake, LATER};
use crate::truth::{planned_objects, referenced};
use chrono::Utc;
use lake_gc::apply::ApplyOptions;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_lance::index::IndexKind;
use lake_lance::update::Assignment;
use lake_store::writer::ManagedObject;
use lance::index::DatasetIndexExt;
use lance::Dataset;
use std::collections::BTreeSet;
use std::time::Duration;

/// Every managed object in the store (`objects/<ULID>/<name>`).
async fn stored_objects(lake: &TestLake) -> BTreeSet<String> {
    let listed = lake.store.list_all("objects/").await.unwrap();
    listed.into_iter().map(|(k, _)| k).filter(|k| !k.ends_with('/')).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_journal_follows_every_operation_and_plans_are_the_true_orphans() {
    let mut seed: u64 = 0x0DE5_1A7E;
    let mut next = move |n: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let (mut applied, mut journaled) = (0, 0);
    let mut delayed = Vec::new();
    for history in 0..5 {
        let mut lake = new_lake().await;
        // Every commit may be held (a delayed step); the deadline is `intents::DEADLINE`.
        let hold = ManifestHold::new();
        lake.engine = held_engine(&lake, &hold);
        let mut ops: Vec<String> = Vec::new();
        let mut pool: Vec<ManagedObject> = Vec::new();
        lake.engine.append("t", reader(vec![batch(&[("e0", None)])])).await.unwrap();
        for step in 0..16 {
            // New references are fresh uploads or objects a retained version still references.
            let live = referenced(&lake, "t").await;
            pool.retain(|o| live.contains(&o.key));
            for i in 0..2 {
                pool.push(
                    lake.upload(&format!("h{history}s{step}o{i}"), format!("{history}/{step}/{i}").as_bytes()).await,
                );
            }
            let pick = |n: u64| pool[pool.len() - 1 - (n as usize % pool.len().min(5))].clone();
            let (x, y) = (pick(next(5)), pick(next(5)));
            let e = format!("e{}", next(4));
            let thumb_column = Dataset::open(&lake.engine.dataset_uri("t"))
                .await
                .unwrap()
                .schema()
                .fields
                .iter()
                .find(|f| f.name == "thumb" || f.name == "preview")
                .map(|f| f.name.clone());
            let e_ref = e.as_str();
            const NAMES: [&str; 19] = [
                "append",
                "append",
                "delete",
                "update",
                "upsert",
                "column",
                "index",
                "drop index",
                "foreign index",
                "compact",
                "cleanup",
                "gc",
                "gc",
                "branch create",
                "branch write",
                "branch delete",
                "delayed append",
                "suspended writer",
                "clock step",
            ];
            let op = next(19) as usize;
            let branches = lake.engine.branches("t").await.unwrap();
            let result: Result<(), String> = match op {
                0 | 1 => lake
                    .engine
                    .append("t", reader(vec![batch(&[(e_ref, Some(&x)), ("e1", Some(&y))])]))
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                2 => lake.engine.delete("t", &format!("episode = '{e}'")).await.map(|_| ()).map_err(|e| e.to_string()),
                3 => {
                    let set: Assignment = if next(2) == 0 { "file = NULL" } else { "file = file" }.parse().unwrap();
                    lake.engine
                        .update("t", &[set], Some(&format!("episode = '{e}'")))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                4 => {
                    let on = vec!["episode".to_string()];
                    lake.engine
                        .upsert("t", &on, reader(vec![batch(&[(e_ref, Some(&x))])]))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                5 => match &thumb_column {
                    None => lake
                        .engine
                        .add_columns("t", "episode", keyed_locations("thumb", &[(e_ref, Some(&y))]))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    Some(name) if name == "thumb" => {
                        lake.engine.rename_column("t", "thumb", "preview").await.map(|_| ()).map_err(|e| e.to_string())
                    }
                    Some(name) => {
                        lake.engine.drop_columns("t", &[name.as_str()]).await.map(|_| ()).map_err(|e| e.to_string())
                    }
                },
                6 => lake
                    .engine
                    .create_index("t", "episode", IndexKind::Btree, Some("ep"), true)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
                7 => lake.engine.drop_index("t", "ep").await.map(|_| ()).map_err(|e| e.to_string()),
                8 => {
                    // Another Lance client builds an index and changes the config.
                    let mut ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
                    let params = lance_index::scalar::ScalarIndexParams::default();
                    match ds
                        .create_index(
                            &["episode"],
                            lance_index::IndexType::BTree,
                            Some("foreign".into()),
                            &params,
                            true,
                        )
                        .await
                    {
                        Ok(_) => ds
                            .update_config([("lake.model", format!("{step}").as_str())])
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                9 => lake.engine.compact("t").await.map(|_| ()).map_err(|e| e.to_string()),
                10 => lake.engine.cleanup("t", Duration::ZERO).await.map(|_| ()).map_err(|e| e.to_string()),
                13 => {
                    let latest = lake.engine.versions("t").await.unwrap().last().map(|v| v.version).unwrap_or(1);
                    let from = lake_lance::branch::BranchSource::Version(latest);
                    lake.engine
                        .create_branch("t", &format!("b{step}"), &from)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                }
                14 => match branches.first() {
                    Some(b) => lake
                        .engine
                        .append(&format!("t@{b}"), reader(vec![batch(&[("on-branch", Some(&x))])]))
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                    None => Err("no branch".into()),
                },
                15 => match branches.first() {
                    Some(b) => lake.engine.delete_branch("t", b).await.map_err(|e| e.to_string()),
                    None => Err("no branch".into()),
                },
                16 => {
                    let fresh =
                        lake.upload(&format!("h{history}s{step}late"), b"a commit held past its deadline").await;
                    let rows = reader(vec![batch(&[(e_ref, Some(&fresh)), ("e1", Some(&y))])]);
                    let what = delayed_commit_step(&lake, &hold, "t", rows, &fresh, next(3)).await;
                    delayed.push(what);
                    pool.push(fresh);
                    Ok(())
                }
                // (Both write the table's first schema: not once a column was added.)
                17 | 18 if thumb_column.is_some() => Err("the table has another schema".into()),
                17 => {
                    // A child writer stops itself at a step of the protocol; a resolver whose
                    // clock is hours ahead resolves its write and GC applies; it resumes.
                    let point = ["commit.after_intent", "commit.before_manifest", "commit.lost_manifest_response"]
                        [next(3) as usize];
                    let child = crate::protocol::child_writer(&lake, "append", &[("LAKE_PAUSEPOINT", point)]);
                    let pid = child.id();
                    crate::protocol::wait_stopped(pid).await;
                    let report = engine_later(&lake, LATER).recover_writes(None).await.unwrap();
                    assert_eq!(report.pending(), 0, "{point}: {report:?}");
                    crate::intents::gc_now(&lake).await;
                    crate::protocol::signal(pid, "-CONT");
                    let (object, last) = crate::protocol::finish(child);
                    delayed.push(format!("suspended at {point}: {last}"));
                    pool.retain(|o| o.key != object);
                    Ok(())
                }
                18 => {
                    // A write paused mid-commit (its manifest write held); a resolver whose clock
                    // is hours ahead (a host clock stepped forward) revokes and fences it; the
                    // held write then finds its slot taken and the writer's retry its intent gone.
                    let fresh = lake.upload(&format!("h{history}s{step}paused"), b"a paused write").await;
                    hold.set(crate::hold::Mode::Hold);
                    let rows = reader(vec![batch(&[(e_ref, Some(&fresh))])]);
                    let (outcome, ()) = tokio::join!(lake.engine.append("t", rows), async {
                        hold.wait_held(1).await;
                        hold.set(crate::hold::Mode::Off);
                        let report = engine_later(&lake, LATER).recover_writes(None).await.unwrap();
                        assert_eq!(report.pending(), 0, "{report:?}");
                        crate::intents::gc_now(&lake).await;
                        hold.release_all().await;
                    });
                    delayed.push(format!(
                        "paused, clock stepped: {}",
                        outcome.as_ref().map_or_else(|e| e.kind().to_string(), |o| format!("version {}", o.version))
                    ));
                    Ok(())
                }
                _ => Ok(()), // GC only (below).
            };
            ops.push(format!("{}{}", NAMES[op], if result.is_ok() { "" } else { " (refused)" }));
            let truth = referenced(&lake, "t").await;
            let report = lake.engine.verify_refs(&[]).await.unwrap();
            assert!(report.is_ok(), "history {history} after {ops:?}: the journal differs from the scans: {report:?}");
            journaled += 1;

            tokio::time::sleep(Duration::from_millis(5)).await;
            let plan = dry_run(&lake, Utc::now(), 3).await;
            assert!(plan.lineage_complete, "history {history} after {ops:?}: {:?}", plan.problems);
            let planned = planned_objects(&plan);
            let orphans: BTreeSet<String> = stored_objects(&lake).await.difference(&truth).cloned().collect();
            assert_eq!(planned, orphans, "history {history} after {ops:?}: the plan is not the true orphan set");
            if !planned.is_empty() && next(2) == 0 {
                let dir = tempfile::tempdir().unwrap();
                let deleter = lake_gc::deleter::for_store(&lake.store);
                let ckpt = dir.path().join("c");
                apply(&lake.engine, &deleter, &ckpt.as_path().into(), Some(&plan), &ApplyOptions::default())
                    .await
                    .unwrap();
                applied += 1;
                for key in &truth {
                    assert!(
                        lake.store.head(key).await.unwrap().is_some(),
                        "history {history} step {step}: {key} deleted"
                    );
                }
            }
        }
        println!("history {history}: {ops:?}");
    }
    println!("{journaled} steps checked, {applied} applies, delayed commits: {delayed:?}");
    assert!(applied > 5, "the histories must reach applies ({applied})");
    assert!(delayed.len() >= 3, "the histories must reach delayed commits ({delayed:?})");
    assert!(delayed.iter().any(|d| d.starts_with("suspended")), "the histories must suspend a writer ({delayed:?})");
    assert!(delayed.iter().any(|d| d.starts_with("paused")), "the histories must step a clock ({delayed:?})");
}
