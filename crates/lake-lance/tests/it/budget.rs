//! Planning past the memory budget on real Lance datasets: a lake whose journal and inventory
//! are far larger than the budgets gives the same plan as planning in memory, and that plan is
//! the one a full scan of every retained version implies.

use crate::support::{batch, new_lake, reader};
use chrono::Utc;
use lake_engine::Engine;
use lake_gc::plan::GcPlan;
use lake_gc::planner::PlanStats;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_lance::LanceEngine;
use lake_store::keys::parse_managed_key;
use std::collections::BTreeSet;
use std::time::Duration;

async fn plan_with(
    engine: &LanceEngine,
    store: &lake_store::LakeStore,
    cutoff: chrono::DateTime<Utc>,
    budget: usize,
    page: usize,
) -> (GcPlan, PlanStats) {
    let options = PlanOptions::new(store.root(), Duration::from_secs(1), cutoff).page_size(page).memory_budget(budget);
    plan(engine, lake_gc::inventory::for_store(store).as_ref(), &options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn planning_past_the_memory_budget_gives_the_in_memory_plan() {
    let lake = new_lake().await;
    let mut objects = Vec::new();
    for i in 0..240 {
        objects.push(lake.upload(&format!("o{i}.bin"), format!("object {i}").as_bytes()).await);
    }
    // Two tables: appends sharing objects, deletes, a compaction, a restore (a snapshot), a tag,
    // and a cleanup that moves the replay base (so the reference checkpoint is written too).
    for (i, chunk) in objects.chunks(20).enumerate() {
        let table = if i % 3 == 0 { "sensors" } else { "episodes" };
        let rows: Vec<(&str, Option<&_>)> = chunk
            .iter()
            .enumerate()
            .map(|(j, o)| (if j % 2 == 0 { "even" } else { "odd" }, Some(o)))
            .chain(chunk.iter().take(3).map(|o| ("dup", Some(o))))
            .collect();
        lake.engine.append(table, reader(vec![batch(&rows)])).await.unwrap();
        if i == 4 {
            lake.engine.delete("episodes", "episode = 'odd'").await.unwrap();
            lake.engine.create_tag("episodes", 3, "keep").await.unwrap();
        }
        if i == 7 {
            lake.engine.compact("episodes").await.unwrap();
            lake.engine.restore("sensors", 2).await.unwrap();
        }
    }
    lake.engine.delete("episodes", "episode = 'dup'").await.unwrap();
    lake.engine.cleanup("sensors", Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let cutoff = Utc::now();

    let in_memory = LanceEngine::new(lake.store.clone());
    let (want, memory_stats) = plan_with(&in_memory, &lake.store, cutoff, 1 << 30, 1000).await;
    // A few hundred bytes: every table's journal and the live keys spill in many runs.
    let spilling = LanceEngine::new(lake.store.clone()).with_memory_budget(600);
    let (got, spill_stats) = plan_with(&spilling, &lake.store, cutoff, 300, 7).await;
    assert!(want.lineage_complete, "{:?}", want.problems);
    assert_eq!(memory_stats.spilled_runs, 0);
    assert_eq!(in_memory.journal_runs_spilled(), 0);
    assert!(spill_stats.spilled_runs > 3, "{spill_stats:?}");
    assert!(spilling.journal_runs_spilled() > 10, "{}", spilling.journal_runs_spilled());
    assert!(spill_stats.objects_listed >= 240 && spill_stats.live_references > 50, "{spill_stats:?}");
    assert!(got.candidates.is_spilled() && !want.candidates.is_spilled());
    assert_eq!(got.canonical_bytes().unwrap(), want.canonical_bytes().unwrap());
    assert_eq!(got.digest().unwrap(), want.digest().unwrap());

    // The truth: every object that no retained version's rows reference (a full scan).
    let mut live = BTreeSet::new();
    for table in in_memory.tables().await.unwrap().tables {
        for v in in_memory.versions(&table.name).await.unwrap() {
            live.extend(
                in_memory.scan_version(&table.name, v.version).await.unwrap().iter().map(|(i, _)| i.uri.clone()),
            );
        }
    }
    let orphans: BTreeSet<String> = objects.iter().map(|o| o.key.clone()).filter(|k| !live.contains(k)).collect();
    let candidates: BTreeSet<String> = want.candidates.keys().unwrap().into_iter().collect();
    assert!(!orphans.is_empty());
    assert!(candidates.iter().all(|k| parse_managed_key(k).is_some()));
    assert_eq!(candidates, orphans);
}
