//! Lakes whose journal entries are large snapshots, and what reading them costs.
//!
//! Group `snapshots`: a lake of two tables of `--snapshot-references` references each at 1x and
//! ten times that at 10x: table `r` written by a second client (plain Lance, no journal entry)
//! and journaled by `lake refs repair` (a sorted snapshot log, written from sorted runs), table
//! `o` written by the engine's overwrite (a snapshot row log). Printed side by side:
//! - `repair_peak_rss_growth_10x`: peak RSS of the repair of the 10x version vs the 1x one, same
//!   memory budget (`--snapshot-budget-mib`);
//! - `snapshot_plan_peak_rss_growth_10x`: peak RSS of a dry run of the 10x lake vs the 1x lake,
//!   same budget, with the 10x peak beside the budget;
//! - `plan_time_per_million_refs`: the 10x dry run's seconds per million journaled references.
//!
//! Group `shards`: `shard_journal_bytes_ratio`, the bytes of journal one of 8 shards reads
//! (the most any shard reads) vs an unsharded plan of the same lake (the 1x snapshot lake).
//!
//! Every measured step runs in a child process (`VmHWM`), through the library calls the commands
//! make (`LanceEngine::repair_refs`, the planner).

use crate::rss::{child_peak, child_value};
use crate::Args;
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use chrono::{DateTime, Utc};
use lake_common::{data_location_field, DataLocationBuilder};
use lake_gc::key_range::KeyRange;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::LakeStore;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rows per generated batch.
const BATCH: usize = 8192;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("episode", DataType::Utf8, false), data_location_field("file", false)]))
}

/// The mint time of the first generated key: keys are spread one millisecond apart from it, so
/// a time split of the key space (a sharded plan's) splits them evenly.
fn first_time(references: usize) -> u64 {
    let now = Utc::now().timestamp_millis() as u64;
    now - 3_600_000 - references as u64
}

/// `rows` rows whose keys are minted one millisecond apart from `start` (distinct names per
/// `table`), in ascending key order.
fn spread_rows(
    table: &str,
    start: u64,
    rows: usize,
) -> impl Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> {
    let table = table.to_string();
    (0..rows).step_by(BATCH).map(move |from| {
        let to = (from + BATCH).min(rows);
        let episodes: ArrayRef = Arc::new(StringArray::from_iter_values((from..to).map(|_| "e")));
        let mut files = DataLocationBuilder::new();
        for i in from..to {
            let ulid = ulid::Ulid::from_parts(start + i as u64, i as u128);
            files.append(&format!("objects/{ulid}/{table}{i}"), [(i % 251) as u8; 32], i as u64);
        }
        RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())])
    })
}

/// Builds the snapshot lake of `references` references per table at `root` (repair not run:
/// version 2 of `r` is the second client's, its entry missing).
async fn build(root: &str, references: usize, start: u64) -> Result<(), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    // A 30-day floor: the publication guard takes the engine's own rows, whose keys are minted
    // hours in the past (spread one per millisecond); plans here use an explicit cutoff.
    LakeDescriptor::create(&store, Duration::from_secs(30 * 86_400)).await.map_err(|e| e.to_string())?;
    let engine = LanceEngine::new(store.clone());
    // `r`: one row through the engine (the table is registered), then the second client.
    let first = spread_rows("first", start, 1).collect::<Vec<_>>();
    engine.append("r", Box::new(RecordBatchIterator::new(first, schema()))).await.map_err(|e| e.to_string())?;
    let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
    let reader = RecordBatchIterator::new(spread_rows("r", start, references), schema());
    lance::Dataset::write(reader, &engine.dataset_uri("r"), Some(params)).await.map_err(|e| e.to_string())?;
    // `o`: the engine's overwrite, a snapshot row log streamed as Lance writes.
    let reader = RecordBatchIterator::new(spread_rows("o", start, references), schema());
    engine.overwrite("o", Box::new(reader)).await.map_err(|e| e.to_string())?;
    Ok(())
}

/// For a measurement by hand (docs/cost-model.md): a lake at `root` whose table `t` has one row
/// written through the engine (version 1), then `appends` versions of `rows` rows each written
/// by a second client (plain Lance), whose journal entries are missing until `lake refs repair
/// ROOT --table t --version V` writes them.
pub(crate) async fn make_foreign_lake(root: &str, rows: usize, appends: usize) -> Result<(), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    // A 30-day floor: the publication guard takes the engine's own rows, whose keys are minted
    // hours in the past (spread one per millisecond); plans here use an explicit cutoff.
    LakeDescriptor::create(&store, Duration::from_secs(30 * 86_400)).await.map_err(|e| e.to_string())?;
    let engine = LanceEngine::new(store.clone());
    let start = first_time(rows * appends + 1);
    let first = spread_rows("first", start, 1).collect::<Vec<_>>();
    engine.append("t", Box::new(RecordBatchIterator::new(first, schema()))).await.map_err(|e| e.to_string())?;
    for a in 0..appends {
        let params = lance::dataset::WriteParams { mode: lance::dataset::WriteMode::Append, ..Default::default() };
        let from = start + 1 + (a * rows) as u64;
        let reader = RecordBatchIterator::new(spread_rows(&format!("a{a}-"), from, rows), schema());
        lance::Dataset::write(reader, &engine.dataset_uri("t"), Some(params)).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The child side of a repair: `lake refs repair ROOT --table r --version 2` with a memory
/// budget of `budget_mib`.
pub(crate) async fn repair_once(root: &str, budget_mib: usize) -> Result<(), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let engine = LanceEngine::new(store).with_memory_budget(budget_mib << 20);
    let entry = engine.repair_refs("r", 2).await.map_err(|e| e.to_string())?;
    println!("repaired_references: {}", entry.references);
    Ok(())
}

/// The child side of a dry run with a memory budget of `budget_mib` (half for the journal,
/// half for live keys, as `lake gc` shares it), restricted to `range` when given; prints its
/// seconds and the journal bytes it read.
pub(crate) async fn plan_once(root: &str, budget_mib: usize, range: Option<KeyRange>) -> Result<(), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let (journal, live) = lake_engine::budget::share(budget_mib << 20);
    let engine = LanceEngine::new(store.clone()).with_memory_budget(journal);
    let inventory = lake_gc::inventory::for_store(&store);
    let mut options = PlanOptions::new(store.root(), Duration::from_secs(1), Utc::now() + chrono::Duration::seconds(5))
        .memory_budget(live);
    if let Some(range) = range {
        options = options.range(range);
    }
    let started = Instant::now();
    let (p, _) = plan(&engine, inventory.as_ref(), &options).await.map_err(|e| e.to_string())?;
    if !p.lineage_complete {
        return Err(format!("lineage incomplete: {:?}", p.problems));
    }
    println!("plan_seconds: {:.6}", started.elapsed().as_secs_f64());
    println!("journal_bytes: {}", engine.journal_bytes_read());
    Ok(())
}

fn child_args(root: &str, budget_mib: usize) -> Vec<String> {
    vec!["--root".into(), root.into(), "--snapshot-budget-mib".into(), budget_mib.to_string()]
}

/// Prints the `snapshots` group.
pub(crate) async fn figures(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let budget = args.snapshot_budget_mib;
    let (r1, r10) = (args.snapshot_references, args.snapshot_references * 10);
    let mut repair = Vec::new();
    let mut dry = Vec::new();
    let mut seconds = 0.0;
    for (refs, name) in [(r1, "1x"), (r10, "10x")] {
        let root = dir.path().join(name).display().to_string();
        let started = Instant::now();
        build(&root, refs, first_time(refs)).await?;
        println!(
            "# snapshot lake {name}: 2 tables of {refs} references built in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        repair.push(child_peak("repair", &child_args(&root, budget))?);
        dry.push(child_peak("snapshot-plan", &child_args(&root, budget))?);
        if refs == r10 {
            let value = child_value("snapshot-plan", &child_args(&root, budget), &[], "plan_seconds")?;
            seconds = value.parse::<f64>().map_err(|e| e.to_string())?;
        }
        // Disk: the 10x lake holds about 2 GB per 10 million references.
        let _ = std::fs::remove_dir_all(&root);
    }
    println!(
        "# snapshot lakes: {r1} and {r10} references per table (2 tables: repair's sorted log, overwrite's row log); budget {budget} MiB"
    );
    println!("# repair peak RSS: {} KiB at 1x, {} KiB at 10x", repair[0], repair[1]);
    println!("repair_peak_rss_growth_10x: {:.3}", repair[1] as f64 / repair[0].max(1) as f64);
    println!("# dry run peak RSS: {} KiB at 1x, {} KiB at 10x (budget {} KiB)", dry[0], dry[1], budget << 10);
    println!("snapshot_plan_peak_rss_growth_10x: {:.3}", dry[1] as f64 / dry[0].max(1) as f64);
    println!("# 10x dry run: {seconds:.2} s for {} references", 2 * r10);
    println!("plan_time_per_million_refs: {:.3}", seconds / (2.0 * r10 as f64 / 1e6));
    Ok(())
}

/// Prints the `shards` group.
pub(crate) async fn shard_figures(args: &Args) -> Result<(), String> {
    const SHARDS: usize = 8;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let refs = args.snapshot_references;
    let start = first_time(refs);
    build(&root, refs, start).await?;
    repair_once(&root, args.snapshot_budget_mib).await?;
    let budget = args.snapshot_budget_mib;
    let bytes = |range: Option<&KeyRange>| -> Result<u64, String> {
        let mut extra = child_args(&root, budget);
        if let Some(range) = range {
            extra.push("--shard-range".into());
            extra.push(serde_json::to_string(range).map_err(|e| e.to_string())?);
        }
        child_value("snapshot-plan", &extra, &[], "journal_bytes")?.parse::<u64>().map_err(|e| e.to_string())
    };
    let whole = bytes(None)?;
    let from = DateTime::<Utc>::from_timestamp_millis(start as i64).ok_or("bad time")?;
    let to = DateTime::<Utc>::from_timestamp_millis((start + refs as u64) as i64).ok_or("bad time")?;
    let mut most = 0u64;
    let mut each = Vec::new();
    for range in KeyRange::split_by_time(from, to, SHARDS) {
        let read = bytes(Some(&range))?;
        each.push(read);
        most = most.max(read);
    }
    println!("# shards: a lake of 2 tables of {refs} references; unsharded plan read {whole} journal bytes, the {SHARDS} shards {each:?}");
    println!("shard_journal_bytes_ratio: {:.3}", most as f64 / whole.max(1) as f64);
    Ok(())
}
