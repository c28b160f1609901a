//! `incremental_plan_vs_full`: after a change of 1% since the last complete GC run, an
//! incremental plan (from the GC state that run recorded) against a full plan of the same lake at
//! the same cutoff, on a local root (`--incremental-objects`, default 1,000,000) and on LocalStack
//! behind the [`LatencyProxy`] (`--incremental-s3-objects`, default 200,000), where the LIST
//! requests of each plan are counted too (`incremental_list_requests_vs_full_s3`).
//!
//! The lake (`lake_lance`, real Lance tables and journals; policy floor an hour, so that the
//! publication guard accepts references to objects minutes old; GC runs with a horizon of 1 s,
//! below the floor, as `lake gc --allow-below-policy`):
//! - `N` one-byte managed objects, 16 to a ULID folder, 99% of them referenced by rows of
//!   table `t` written in 20 appends (each row's `episode` is `e<i % 100>`), 1% orphans;
//! - a first GC run [`MARGIN`] after the last of them (full plan, applied with a checkpoint: it
//!   deletes the orphans and records the GC state);
//! - then a change of 1%: `N / 100` new objects (half referenced by one more append, half never
//!   committed), a delete of the rows with `episode = 'e7'` (1% of the rows), and one cleanup of
//!   every version but the latest (which releases the deleted rows' objects).
//!
//! Each plan is a dry run in a child process (`--child plan-state`), at one explicit cutoff after
//! the change, through [`GarbageCollector::plan_with`] as `lake gc` plans: the default policy
//! (incremental from the state) against [`IncrementalPolicy::full`]. The child times the plan
//! alone and prints the SHA-256 of its candidate list, which must be the same for both sides
//! (nothing outlived the margin), and its mode, which must be the one asked for. To see how two
//! plans differ, the run names the keys only one found and keeps both lists (a child writes its
//! candidate list as JSON to `LAKE_BENCH_DUMP`); `--child make-incremental-lake --root DIR`
//! builds the lake alone and prints a cutoff.

use crate::lakes::Rows;
use crate::latency_proxy::LatencyProxy;
use crate::rss::child_value;
use crate::{median, median_ratio, seconds, Args};
use arrow_array::RecordBatchIterator;
use chrono::{DateTime, Utc};
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::plan::PlanMode;
use lake_gc::run::{PlanSource, RunRequest};
use lake_gc::state::IncrementalPolicy;
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use object_store::{ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// The plans' horizon (below the lake's policy floor, [`FLOOR`]).
const MIN_AGE: Duration = Duration::from_secs(1);
/// The lake's policy floor.
const FLOOR: Duration = Duration::from_secs(3600);
/// The incremental plans' margin: the base lake is minutes old, so the default of an hour would
/// list all of it; in production, where a daily run's listed range is a day and an hour of a
/// lake's years, the margin is as small a part of the keys as this one is here.
const MARGIN: Duration = Duration::from_secs(5);
/// Objects per ULID folder of the base lake.
const PER_FOLDER: usize = 16;
/// Appends that reference the base lake's objects.
const APPENDS: usize = 20;

/// One plan's figures, as a child prints them.
struct Measured {
    took: Duration,
    digest: String,
    candidates: usize,
    mode: String,
}

/// The child side: a dry run of the lake at `root` at `cutoff_ms`, full or incremental; the
/// wall time of the plan, the digest of its candidate list, its count and its mode.
pub(crate) async fn plan_once(root: &str, cutoff_ms: i64, full: bool) -> Result<(), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let settings = PlanSettings::default();
    let (journal, _) = lake_engine::budget::share(settings.memory_budget * 2);
    let engine = LanceEngine::new(store.clone()).with_memory_budget(journal);
    let cutoff = DateTime::<Utc>::from_timestamp_millis(cutoff_ms).ok_or("bad cutoff")?;
    let horizon = Horizon { earlier_cutoff: Some(cutoff), ..horizon() };
    let policy = IncrementalPolicy { full, margin: MARGIN, ..IncrementalPolicy::default() };
    let started = Instant::now();
    let gc = GarbageCollector::open(store, &engine).await.map_err(|e| e.to_string())?;
    let planned = gc.plan_with(&horizon, &settings, &policy).await.map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let plan = planned.plan;
    if !plan.lineage_complete {
        return Err(format!("lineage incomplete: {:?}", plan.problems));
    }
    let record = plan.mode.as_ref().ok_or("the plan records no mode")?;
    let mode = match record.mode {
        PlanMode::Incremental => "incremental",
        PlanMode::Full => "full",
    };
    if full == (record.mode == PlanMode::Incremental) {
        return Err(format!(
            "asked for a {} plan, made a {mode} one: {:?}",
            if full { "full" } else { "incremental" },
            record.reason
        ));
    }
    if let Ok(path) = std::env::var("LAKE_BENCH_DUMP") {
        std::fs::write(path, serde_json::to_vec_pretty(&plan.candidates).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    // The candidates' keys and sizes: a key an incremental plan looked up on S3 records the
    // HEAD's whole-second time where a full plan records the listing's milliseconds.
    let mut hasher = Sha256::new();
    for candidate in plan.candidates.to_vec().map_err(|e| e.to_string())? {
        hasher.update(format!("{} {}\n", candidate.key, candidate.size));
    }
    let digest = hex(&hasher.finalize());
    println!("plan_nanos_digest_candidates_mode: {} {digest} {} {mode}", took.as_nanos(), plan.candidates.len());
    Ok(())
}

/// A horizon of [`MIN_AGE`], below the lake's floor.
fn horizon() -> Horizon {
    Horizon { allow_below_policy: true, ..Horizon::new(MIN_AGE) }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One plan in a child process (its S3 requests through `endpoint` when given).
fn plan_in_child(
    root: &str,
    cutoff_ms: i64,
    full: bool,
    endpoint: Option<&str>,
    dump: &std::path::Path,
) -> Result<Measured, String> {
    let mut extra = vec!["--root".to_string(), root.to_string(), "--cutoff-ms".into(), cutoff_ms.to_string()];
    if full {
        extra.push("--full-plan".into());
    }
    let mut env: Vec<(&str, Option<&str>)> = endpoint.map(|e| ("AWS_ENDPOINT_URL", Some(e))).into_iter().collect();
    env.push(("LAKE_BENCH_DUMP", dump.to_str()));
    let out = child_value("plan-state", &extra, &env, "plan_nanos_digest_candidates_mode")?;
    let parse = || format!("child plan-state printed {out}");
    let fields: Vec<&str> = out.split(' ').collect();
    let [nanos, digest, candidates, mode] = fields[..] else { return Err(parse()) };
    Ok(Measured {
        took: Duration::from_nanos(nanos.parse().map_err(|_| parse())?),
        digest: digest.to_string(),
        candidates: candidates.parse().map_err(|_| parse())?,
        mode: mode.to_string(),
    })
}

/// Writes one-byte objects at `keys`, 64 at a time.
async fn put_all(store: &LakeStore, keys: &[String]) -> Result<(), String> {
    use futures::StreamExt;
    let puts = keys.iter().map(|k| {
        let (s, p) = (store.object_store(), store.path(k));
        async move { s.put(&p, PutPayload::from_static(b"x")).await.map(|_| ()) }
    });
    let mut results = futures::stream::iter(puts).buffer_unordered(64);
    while let Some(r) = results.next().await {
        r.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Appends rows referencing `keys` to table `t`, row `i`'s episode `episode(i)`.
async fn append(engine: &LanceEngine, keys: &[String], episode: impl Fn(usize) -> String) -> Result<(), String> {
    let batch = Rows::batch_with_episodes(keys, episode);
    let reader = RecordBatchIterator::new(vec![Ok(batch)], crate::lakes::schema());
    engine.append("t", Box::new(reader)).await.map(|_| ()).map_err(|e| e.to_string())
}

/// Builds the base lake at `root`, runs the first GC (full, applied; it records the state) and
/// makes the change of 1%. Returns what the change should make collectable.
async fn build(root: &str, n: usize, checkpoint: &CheckpointLocation) -> Result<usize, String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    LakeDescriptor::create(&store, FLOOR).await.map_err(|e| e.to_string())?;
    let engine = LanceEngine::new(store.clone());
    let minted = Utc::now().timestamp_millis() as u64;
    let keys: Vec<String> = (0..n)
        .map(|i| {
            let folder = ulid::Ulid::from_parts(minted, rand_bits(i / PER_FOLDER));
            format!("objects/{folder}/o{i}")
        })
        .collect();
    let started = Instant::now();
    put_all(&store, &keys).await?;
    let referenced: Vec<(usize, &String)> = keys.iter().enumerate().filter(|(i, _)| i % 100 != 99).collect();
    for chunk in referenced.chunks(referenced.len().div_ceil(APPENDS).max(1)) {
        let chunk_keys: Vec<String> = chunk.iter().map(|(_, k)| (*k).clone()).collect();
        let indexes: Vec<usize> = chunk.iter().map(|(i, _)| *i).collect();
        append(&engine, &chunk_keys, |row| format!("e{}", indexes[row] % 100)).await?;
    }
    println!(
        "# base lake: {n} objects, {} referenced in {APPENDS} appends, built in {:.1}s",
        referenced.len(),
        started.elapsed().as_secs_f64()
    );
    // The first run: every base object minted before its cutoff minus the margin.
    tokio::time::sleep(MARGIN + Duration::from_millis(2500)).await;
    let started = Instant::now();
    let request = RunRequest {
        plan: PlanSource::New,
        checkpoint: Some(checkpoint),
        incremental: IncrementalPolicy::full(),
        ..RunRequest::dry_run(horizon())
    };
    let gc = GarbageCollector::open(store.clone(), &engine).await.map_err(|e| e.to_string())?;
    let first = gc.run(&request).await.map_err(|e| e.to_string())?;
    let apply = first.apply.ok_or("the first run applied nothing")?;
    let state = apply.state.ok_or("the first run's apply recorded no GC state")?;
    println!(
        "# first GC run (full, applied): {} orphans deleted in {:.1}s; state {state}",
        first.plan.candidates.len(),
        started.elapsed().as_secs_f64()
    );
    // The change of 1%.
    let started = Instant::now();
    let fresh: Vec<String> = (0..n / 100).map(|i| mint_key(&format!("n{i}")).0).collect();
    put_all(&store, &fresh).await?;
    let committed: Vec<String> = fresh.iter().step_by(2).cloned().collect();
    append(&engine, &committed, |_| "new".into()).await?;
    let deleted = referenced.iter().filter(|(i, _)| i % 100 == 7).count();
    engine.delete("t", "episode = 'e7'").await.map_err(|e| e.to_string())?;
    let cleaned = engine.cleanup("t", Duration::ZERO).await.map_err(|e| e.to_string())?;
    println!(
        "# change: {} new objects ({} committed), {deleted} rows deleted, cleanup of {} versions, in {:.1}s",
        fresh.len(),
        committed.len(),
        cleaned.old_versions,
        started.elapsed().as_secs_f64()
    );
    // Every object of the change older than the cutoff by the store's time.
    tokio::time::sleep(Duration::from_millis(4000)).await;
    Ok(fresh.len() - committed.len() + deleted)
}

/// The lake of the figure at `root` (a local folder or an S3 prefix) after its change, for a
/// measurement by hand; the first run's checkpoint at `<root>.ckpt` (local roots) or in a
/// temporary folder.
pub(crate) async fn make_lake(root: &str, n: usize) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = if root.contains("://") { dir.path().join("gc.ckpt") } else { format!("{root}.ckpt").into() };
    build(root, n, &CheckpointLocation::Local(path)).await?;
    println!("cutoff_ms: {}", Utc::now().timestamp_millis() - 3000);
    Ok(())
}

/// The random part of a base folder's ULID (all share one millisecond): distinct per folder
/// (an odd multiplier is a bijection modulo 2^80), spread over the 80 bits.
fn rand_bits(folder: usize) -> u128 {
    (folder as u128).wrapping_mul(0x9E37_79B9_7F4A_7C15_F39C_C060_5CED_C835) & ((1u128 << 80) - 1)
}

/// Plans the lake at `root` both ways, `pairs` times alternating; returns the samples
/// (incremental, full) and, with a proxy, the LIST requests of each side's last plan.
fn measure(
    root: &str,
    expected: usize,
    pairs: usize,
    proxy: Option<&LatencyProxy>,
) -> Result<(Vec<Duration>, Vec<Duration>, Option<(u64, u64)>), String> {
    // Before the store's now minus the horizon on S3 too, whose clock has whole seconds.
    let cutoff_ms = Utc::now().timestamp_millis() - 3000;
    let endpoint = proxy.map(LatencyProxy::endpoint);
    let (mut incremental, mut full) = (Vec::new(), Vec::new());
    let mut lists = (0, 0);
    let mut digests = std::collections::BTreeSet::new();
    let dumps = tempfile::tempdir().map_err(|e| e.to_string())?;
    let dump = |full: bool| dumps.path().join(if full { "full.json" } else { "incremental.json" });
    for i in 0..pairs.max(1) {
        let order = if i % 2 == 0 { [false, true] } else { [true, false] };
        for is_full in order {
            let before = proxy.map(LatencyProxy::list_requests).unwrap_or(0);
            let prefixes = proxy.map(LatencyProxy::list_prefixes).unwrap_or_default();
            let m = plan_in_child(root, cutoff_ms, is_full, endpoint.as_deref(), &dump(is_full))?;
            let listed = proxy.map(LatencyProxy::list_requests).unwrap_or(0) - before;
            if i == 0 {
                // Where the first pair's LIST requests went, by prefix (the rest is the same).
                let now = proxy.map(LatencyProxy::list_prefixes).unwrap_or_default();
                let mut by: Vec<(u64, String)> =
                    now.into_iter().map(|(p, n)| (n - prefixes.get(&p).copied().unwrap_or(0), p)).collect();
                by.retain(|(n, _)| *n > 0);
                by.sort_by(|a, b| b.cmp(a));
                let shown: Vec<String> = by.iter().take(8).map(|(n, p)| format!("{n} {p}")).collect();
                if !shown.is_empty() {
                    println!("# LIST requests of the {} plan by prefix: {}", m.mode, shown.join(", "));
                }
            }
            if m.candidates < expected {
                return Err(format!(
                    "a {} plan found {} candidates, fewer than the {expected} the change made",
                    m.mode, m.candidates
                ));
            }
            digests.insert(m.digest);
            if is_full {
                full.push(m.took);
                lists.1 = listed;
            } else {
                incremental.push(m.took);
                lists.0 = listed;
            }
        }
    }
    if digests.len() != 1 {
        let keys = |full: bool| -> Result<std::collections::BTreeSet<String>, String> {
            let text = std::fs::read(dump(full)).map_err(|e| e.to_string())?;
            let list: Vec<lake_gc::plan::Candidate> = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
            Ok(list.into_iter().map(|c| format!("{} ({} bytes)", c.key, c.size)).collect())
        };
        let (incremental, full) = (keys(false)?, keys(true)?);
        let only = |a: &std::collections::BTreeSet<String>, b: &std::collections::BTreeSet<String>| {
            a.difference(b).take(5).cloned().collect::<Vec<_>>()
        };
        return Err(format!(
            "the incremental and the full plans' candidates differ: only incremental {:?}, only full {:?} (the last plans' lists are in {})",
            only(&incremental, &full),
            only(&full, &incremental),
            dumps.keep().display()
        ));
    }
    Ok((incremental, full, proxy.map(|_| lists)))
}

/// Prints `incremental_plan_vs_full` (local) and, on LocalStack, `incremental_plan_vs_full_s3`
/// and `incremental_list_requests_vs_full_s3`.
pub(crate) async fn figures(args: &Args) -> Result<(), String> {
    let pairs = args.repeat.clamp(1, 5);
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake").display().to_string();
    let checkpoint = CheckpointLocation::Local(dir.path().join("gc.ckpt"));
    let n = args.incremental_objects;
    let expected = build(&root, n, &checkpoint).await?;
    let (incremental, full, _) = measure(&root, expected, pairs, None)?;
    println!("# local plan samples (s): incremental [{}], full [{}]", seconds(&incremental), seconds(&full));
    println!(
        "# local plan of {n} objects after a change of 1%: incremental {:.3}s, full {:.3}s (medians); same candidates",
        median(incremental.clone()).as_secs_f64(),
        median(full.clone()).as_secs_f64()
    );
    println!("incremental_plan_vs_full: {:.3}", median_ratio(&incremental, &full));
    // Removing a million files takes minutes where the file system discards each block
    // synchronously: in the background, while the S3 lake is built.
    let removal = std::thread::spawn(move || drop(dir));
    let s3 = s3_figures(args, pairs).await;
    removal.join().map_err(|_| "removing the local lake failed")?;
    s3
}

/// The S3 half of [`figures`].
async fn s3_figures(args: &Args, pairs: usize) -> Result<(), String> {
    let (Ok(bucket), Ok(endpoint)) = (std::env::var("LAKE_TEST_S3_BUCKET"), std::env::var("AWS_ENDPOINT_URL")) else {
        println!("# incremental_plan_vs_full_s3 skipped: no LocalStack (run under scripts/localstack.sh run -- ...)");
        return Ok(());
    };
    if args.skip_s3 {
        println!("# incremental_plan_vs_full_s3 skipped (--skip-s3)");
        return Ok(());
    }
    let n = args.incremental_s3_objects;
    let root = format!("s3://{bucket}/bench-{}/lake", ulid::Ulid::new().to_string().to_lowercase());
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let checkpoint = CheckpointLocation::Local(dir.path().join("gc.ckpt"));
    let expected = build(&root, n, &checkpoint).await?;
    let proxy = LatencyProxy::start(&endpoint, Duration::from_millis(args.proxy_delay_ms)).await?;
    let (incremental, full, lists) = measure(&root, expected, pairs, Some(&proxy))?;
    let (lists_incremental, lists_full) = lists.unwrap_or_default();
    println!("# S3 plan samples (s): incremental [{}], full [{}]", seconds(&incremental), seconds(&full));
    println!(
        "# S3 plan of {n} objects after a change of 1%: incremental {:.3}s and {lists_incremental} LIST requests, full {:.3}s and {lists_full} (medians; requests of the last pair); same candidates; proxy delay {} ms per request",
        median(incremental.clone()).as_secs_f64(),
        median(full.clone()).as_secs_f64(),
        args.proxy_delay_ms
    );
    println!("incremental_plan_vs_full_s3: {:.3}", median_ratio(&incremental, &full));
    println!("incremental_list_requests_vs_full_s3: {:.3}", lists_incremental as f64 / lists_full.max(1) as f64);
    Ok(())
}
