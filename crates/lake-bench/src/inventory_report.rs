//! `plan_from_inventory_vs_listing`: a GC dry run of an S3 lake planned from an S3 Inventory
//! report ([`ReportInventory`]: the report's manifest, checksums and data files, sorted, then a
//! live listing of the keys minted after the report's boundary) vs the same dry run from a full
//! listing, on LocalStack behind a [`LatencyProxy`] that delays every request by
//! `--proxy-delay-ms`. Each plan runs in a child process whose `AWS_ENDPOINT_URL` is the proxy's,
//! at the same explicit cutoff, and times the plan alone (opening the report included); both
//! print their plan's digest, which must be the same.
//!
//! The lake: `--inventory-objects` one-byte managed objects and no tables (every object is a
//! candidate, so both plans sweep and write every key). The report (CSV, AWS's layout, written
//! by `lake_gc::inventory::report::writer` from a real listing) is created after the last
//! object, and read with a margin of 1 s: every object is older than its boundary, as objects
//! older than the 48 h default margin are in production, so the live listing after the boundary
//! is one request.

use crate::latency_proxy::LatencyProxy;
use crate::rss::child_value;
use crate::{median, median_ratio, seconds, Args};
use lake_engine::memory::MemoryEngine;
use lake_gc::inventory::report::manifest::ReportFormat;
use lake_gc::inventory::report::writer::{write_report, WriteOptions};
use lake_gc::inventory::report::{ReportInventory, ReportOptions};
use lake_gc::inventory::{self, ObjectInventory};
use lake_gc::unchecked::{plan_with_unchecked_cutoff as plan, PlanOptions};
use lake_store::descriptor::LakeDescriptor;
use lake_store::LakeStore;
use std::time::{Duration, Instant};

/// The child side: one plan of the lake at `root` at `cutoff_ms`, from the report at
/// `manifest` when given, else from a full listing; the wall time, the plan's digest and its
/// candidate count.
pub(crate) async fn plan_once(
    root: &str,
    cutoff_ms: i64,
    manifest: Option<&str>,
) -> Result<(Duration, String, usize), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let cutoff = chrono::DateTime::<chrono::Utc>::from_timestamp_millis(cutoff_ms).ok_or("bad cutoff")?;
    let engine = MemoryEngine::new();
    let options = PlanOptions::new(store.root(), Duration::from_secs(1), cutoff);
    let started = Instant::now();
    let listing: Box<dyn ObjectInventory> = match manifest {
        Some(url) => {
            let report_options = ReportOptions { margin: Duration::from_secs(1), ..ReportOptions::default() };
            Box::new(ReportInventory::open(&store, url, &report_options).await.map_err(|e| e.to_string())?)
        }
        None => inventory::for_store(&store),
    };
    let (made, _) = plan(&engine, listing.as_ref(), &options).await.map_err(|e| e.to_string())?;
    let took = started.elapsed();
    Ok((took, made.digest().map_err(|e| e.to_string())?, made.candidates.len()))
}

/// One plan in a child process talking to S3 at `endpoint`; its wall time, digest and count.
fn plan_in_child(
    root: &str,
    cutoff_ms: i64,
    manifest: Option<&str>,
    endpoint: &str,
) -> Result<(Duration, String, usize), String> {
    let mut extra = vec!["--root".to_string(), root.to_string(), "--cutoff-ms".into(), cutoff_ms.to_string()];
    if let Some(url) = manifest {
        extra.extend(["--inventory".to_string(), url.to_string()]);
    }
    let env = [("AWS_ENDPOINT_URL", Some(endpoint))];
    let out = child_value("plan-inventory", &extra, &env, "plan_nanos_digest_candidates")?;
    let mut fields = out.split(' ');
    let parse = || format!("child plan-inventory printed {out}");
    let nanos: u64 = fields.next().and_then(|n| n.parse().ok()).ok_or_else(parse)?;
    let digest = fields.next().ok_or_else(parse)?.to_string();
    let count: usize = fields.next().and_then(|n| n.parse().ok()).ok_or_else(parse)?;
    Ok((Duration::from_nanos(nanos), digest, count))
}

/// Prints `plan_from_inventory_vs_listing`, or why it was skipped.
pub(crate) async fn ratio(args: &Args) -> Result<(), String> {
    let (Ok(bucket), Ok(endpoint)) = (std::env::var("LAKE_TEST_S3_BUCKET"), std::env::var("AWS_ENDPOINT_URL")) else {
        println!(
            "# plan_from_inventory_vs_listing skipped: no LocalStack (run under scripts/localstack.sh run -- ...)"
        );
        return Ok(());
    };
    let n = args.inventory_objects;
    let base = format!("s3://{bucket}/bench-{}", ulid::Ulid::new().to_string().to_lowercase());
    let root = format!("{base}/lake");
    let store = LakeStore::open(&root).map_err(|e| e.to_string())?;
    LakeDescriptor::create(&store, Duration::from_secs(1)).await.map_err(|e| e.to_string())?;
    let filled = crate::listing::fill(&root, n).await?;
    println!(
        "# inventory lake on LocalStack: {n} objects, no tables (all candidates), written in {:.1}s",
        filled.as_secs_f64()
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let started = Instant::now();
    let report = write_report(&store, &format!("{base}/reports"), &WriteOptions::new(ReportFormat::Csv))
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "# report: CSV, {} rows in {} data files, written in {:.1}s (not timed); read with a margin of 1 s",
        report.rows,
        report.manifest.files.len(),
        started.elapsed().as_secs_f64()
    );
    let cutoff_ms = chrono::Utc::now().timestamp_millis();
    let proxy = LatencyProxy::start(&endpoint, Duration::from_millis(args.proxy_delay_ms)).await?;
    let (mut listed, mut reported) = (Vec::new(), Vec::new());
    let mut digests = std::collections::BTreeSet::new();
    let pairs = args.repeat.clamp(1, 5);
    for i in 0..pairs {
        let order: [Option<&str>; 2] =
            if i % 2 == 0 { [None, Some(&report.manifest_url)] } else { [Some(&report.manifest_url), None] };
        for manifest in order {
            let (took, digest, count) = plan_in_child(&root, cutoff_ms, manifest, &proxy.endpoint())?;
            if count != n {
                return Err(format!("a plan found {count} candidates, not {n}"));
            }
            digests.insert(digest);
            if manifest.is_some() {
                reported.push(took)
            } else {
                listed.push(took)
            }
        }
    }
    if digests.len() != 1 {
        return Err(format!("the plans from the report and from the listing differ: digests {digests:?}"));
    }
    println!("# plan samples (s): from the listing [{}], from the report [{}]", seconds(&listed), seconds(&reported));
    println!(
        "# plan of {n} objects: from the listing {:.3}s, from the report {:.3}s (medians); same digest; proxy delay {} ms per request, pages of 1000 keys",
        median(listed.clone()).as_secs_f64(),
        median(reported.clone()).as_secs_f64(),
        args.proxy_delay_ms
    );
    println!("plan_from_inventory_vs_listing: {:.3}", median_ratio(&reported, &listed));
    Ok(())
}
