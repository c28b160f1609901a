//! Planning figures: journal planning vs a full scan of every retained version, vs a bare
//! listing, and peak memory at 1x and 10x.

use crate::lakes::planning_lake;
use crate::rss::child_peak;
use crate::{median, median_ratio, seconds, Args};
use lake_engine::Engine;
use lake_gc::inventory;
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_store::keys::parse_managed_key;
use lake_store::LakeStore;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Bytes of the planner's and the engine's sorted-run buffers (each half of `--memory-budget-kib`).
fn half_budget(budget_kib: usize) -> usize {
    budget_kib.saturating_mul(1024) / 2
}

fn options(store: &LakeStore, budget_kib: usize) -> PlanOptions {
    PlanOptions::new(store.root(), Duration::from_secs(1), chrono::Utc::now() + chrono::Duration::seconds(5))
        .memory_budget(half_budget(budget_kib))
}

/// Plans by journal once with a memory budget of `budget_kib` KiB; returns (wall time,
/// candidates).
pub(crate) async fn plan_once(root: &str, budget_kib: usize) -> Result<(Duration, usize), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let engine = lake_lance::LanceEngine::new(store.clone()).with_memory_budget(half_budget(budget_kib));
    let inv = inventory::for_store(&store);
    let started = Instant::now();
    let (p, _) = plan(&engine, inv.as_ref(), &options(&store, budget_kib)).await.map_err(|e| e.to_string())?;
    if !p.lineage_complete {
        return Err(format!("lineage incomplete: {:?}", p.problems));
    }
    Ok((started.elapsed(), p.candidates.len()))
}

/// The baseline: the live set from scanning every retained version's reference columns (what
/// `lake refs verify` scans), then the same listing and merge. Returns (wall time, candidates).
pub(crate) async fn scan_plan_once(root: &str) -> Result<(Duration, usize), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let engine = lake_lance::LanceEngine::new(store.clone());
    let started = Instant::now();
    let mut live: BTreeSet<String> = BTreeSet::new();
    for location in engine.tables().await.map_err(|e| e.to_string())?.tables {
        // The retained versions from Lance alone (`engine.versions` would also decode the journal).
        let ds = engine.open(&location.name).await.map_err(|e| e.to_string())?;
        for v in ds.version_refs().await.map_err(|e| e.to_string())? {
            let counts = engine.scan_version(&location.name, v.version).await.map_err(|e| e.to_string())?;
            live.extend(counts.iter().map(|(id, _)| id.uri.clone()));
        }
    }
    // The same sweep as the planner, over the scanned live set (an empty journal engine).
    let inv = inventory::for_store(&store);
    let mut pages = inv.list_from(None, 1000);
    let mut candidates = 0;
    while let Some(page) = futures::StreamExt::next(&mut pages).await {
        let page = page.map_err(|e| e.to_string())?;
        for e in &page.entries {
            if parse_managed_key(&e.key).is_some() && !live.contains(&e.key) {
                candidates += 1;
            }
        }
    }
    Ok((started.elapsed(), candidates))
}

/// A bare listing of the managed prefix. Returns (wall time, objects).
pub(crate) async fn list_once(root: &str) -> Result<(Duration, usize), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let inv = inventory::for_store(&store);
    let started = Instant::now();
    let (mut pages, mut n) = (inv.list_from(None, 1000), 0);
    while let Some(page) = futures::StreamExt::next(&mut pages).await {
        n += page.map_err(|e| e.to_string())?.entries.len();
    }
    Ok((started.elapsed(), n))
}

/// Builds the planning lake at `root` with the sizes of `args` and says so (`what` names it).
async fn build_planning_lake(root: &str, args: &Args, what: &str) -> Result<(), String> {
    let started = Instant::now();
    planning_lake(root, args.objects, args.versions).await?;
    println!(
        "# planning lake {what}: {} objects, {} retained versions, built in {:.1}s",
        args.objects,
        args.versions,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// One pair, back to back: planning by journal, then by full scan, of the lake at `root`;
/// refuses a pair whose two plans disagree on the candidates.
async fn journal_and_scan(root: &str, args: &Args) -> Result<(Duration, Duration), String> {
    let (journal, by_journal) = plan_once(root, args.memory_budget_kib).await?;
    let (scan, by_scan) = scan_plan_once(root).await?;
    if by_journal != by_scan {
        return Err(format!("at {root} the journal plan has {by_journal} candidates but the scan plan {by_scan}"));
    }
    Ok((journal, scan))
}

/// Prints `plan_speedup_vs_full_scan`, `plan_vs_listing_ratio` and `plan_peak_rss_growth_10x`.
pub(crate) async fn figures(args: &Args) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let root = dir.path().join("lake1x").display().to_string();
    build_planning_lake(&root, args, "1x").await?;
    let (mut journal, mut scan, mut listing) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        let (j, s) = journal_and_scan(&root, args).await?;
        journal.push(j);
        scan.push(s);
        listing.push(list_once(&root).await?.0);
    }
    println!(
        "# planning samples (s): by journal [{}], by full scan [{}], bare listing [{}]",
        seconds(&journal),
        seconds(&scan),
        seconds(&listing)
    );
    let (speedup, vs_listing) = (median_ratio(&scan, &journal), median_ratio(&journal, &listing));
    let (j, s, l) = (median(journal), median(scan), median(listing));
    println!(
        "# planning: by journal {:.3}s, by full scan {:.3}s, bare listing {:.3}s (medians)",
        j.as_secs_f64(),
        s.as_secs_f64(),
        l.as_secs_f64()
    );
    println!("plan_speedup_vs_full_scan: {speedup:.2}");
    println!("plan_vs_listing_ratio: {vs_listing:.3}");

    let root10 = dir.path().join("lake10x").display().to_string();
    let started = Instant::now();
    planning_lake(&root10, args.objects * 10, args.versions).await?;
    println!("# planning lake 10x: {} objects, built in {:.1}s", args.objects * 10, started.elapsed().as_secs_f64());
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat.max(1) {
        let budget = ["--memory-budget-kib".to_string(), args.memory_budget_kib.to_string()];
        small.push(child_peak("plan", &[&["--root".to_string(), root.clone()][..], &budget].concat())?);
        large.push(child_peak("plan", &[&["--root".to_string(), root10.clone()][..], &budget].concat())?);
    }
    let (a, b) = (median(small), median(large));
    println!("# planning peak RSS: 1x {a} KiB, 10x {b} KiB (memory budget {} KiB)", args.memory_budget_kib);
    println!("plan_peak_rss_growth_10x: {:.3}", b as f64 / a.max(1) as f64);
    Ok(())
}

/// Prints `plan_speedup_vs_full_scan_s3`: the same comparison as `plan_speedup_vs_full_scan` on a
/// planning lake of the same sizes in LocalStack S3, where a listing is one request per 1000 keys
/// and every version scan reads its manifest and data files over HTTP. At most 3 pairs (a full
/// scan there takes several seconds). Skipped without LocalStack.
pub(crate) async fn s3_speedup(args: &Args) -> Result<(), String> {
    let Ok(bucket) = std::env::var("LAKE_TEST_S3_BUCKET") else {
        println!("# plan_speedup_vs_full_scan_s3 skipped: no LocalStack (run under scripts/localstack.sh run -- ...)");
        return Ok(());
    };
    let root = format!("s3://{bucket}/bench-{}/plan", ulid::Ulid::new().to_string().to_lowercase());
    build_planning_lake(&root, args, "on LocalStack S3").await?;
    let (mut journal, mut scan) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat.clamp(1, 3) {
        let (j, s) = journal_and_scan(&root, args).await?;
        journal.push(j);
        scan.push(s);
    }
    println!("# planning samples on S3 (s): by journal [{}], by full scan [{}]", seconds(&journal), seconds(&scan));
    println!("plan_speedup_vs_full_scan_s3: {:.2}", median_ratio(&scan, &journal));
    Ok(())
}
