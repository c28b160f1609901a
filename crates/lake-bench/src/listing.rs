//! `parallel_listing_speedup`: a listing of the whole managed prefix of an S3 lake through the
//! inventory, with `--list-streams` streams ([`ParallelInventory`], as `lake gc` lists) vs one,
//! on LocalStack behind a [`LatencyProxy`] that delays every request by `--proxy-delay-ms`.
//! LocalStack's server is one Python process; without the proxy its CPU time per request, not the
//! requests in flight, would be measured. Each listing runs in a child process whose
//! `AWS_ENDPOINT_URL` is the proxy's (the store reads it when it opens), and times the listing
//! alone.

use crate::latency_proxy::LatencyProxy;
use crate::rss::child_value;
use crate::{median, median_ratio, seconds, Args};
use lake_gc::collector::PlanSettings;
use lake_gc::inventory::parallel::{buffered_pages, ParallelInventory};
use lake_gc::inventory::{self, ObjectInventory};
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use object_store::{ObjectStoreExt, PutPayload};
use std::time::{Duration, Instant};

/// The child side: lists every key under `objects/` of the lake at `root` with `streams`
/// streams, buffering as `lake gc` does by default; returns the wall time and the entries.
pub(crate) async fn list_once(root: &str, streams: usize, page_size: usize) -> Result<(Duration, usize), String> {
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let pages = buffered_pages(PlanSettings::default().memory_budget, page_size, streams);
    let parallel = ParallelInventory::new(inventory::for_store(&store), streams).with_buffered_pages(pages);
    let started = Instant::now();
    let mut listing = parallel.list_from(None, page_size);
    let mut entries = 0;
    while let Some(page) = futures::StreamExt::next(&mut listing).await {
        entries += page.map_err(|e| e.to_string())?.entries.len();
    }
    Ok((started.elapsed(), entries))
}

/// One listing in a child process talking to S3 at `endpoint`; its wall time.
fn list_in_child(root: &str, streams: usize, endpoint: &str, args: &Args) -> Result<Duration, String> {
    let objects = args.list_objects;
    let extra = [
        "--root".to_string(),
        root.to_string(),
        "--list-streams".into(),
        streams.to_string(),
        "--list-page-size".into(),
        args.list_page_size.to_string(),
    ];
    let env = [("AWS_ENDPOINT_URL", Some(endpoint))];
    let out = child_value("list-s3", &extra, &env, "list_nanos_entries")?;
    let (nanos, entries) = out.split_once(' ').ok_or_else(|| format!("child list-s3 printed {out}"))?;
    if entries != objects.to_string() {
        return Err(format!("the listing with {streams} streams found {entries} entries, not {objects}"));
    }
    nanos.parse().map(Duration::from_nanos).map_err(|e| format!("child list-s3 printed {out}: {e}"))
}

/// CPU seconds (user and system) the process listening on `endpoint`'s loopback port has used:
/// the socket's inode from `/proc/net/tcp{,6}`, its owner from the `/proc/<pid>/fd` links,
/// utime + stime from `/proc/<pid>/stat` (in USER_HZ, 100 a second on Linux). `None` when it
/// cannot be found (another user's process, another host).
fn server_cpu_seconds(endpoint: &str) -> Option<f64> {
    let port: u16 = endpoint.rsplit(':').next()?.trim_end_matches('/').parse().ok()?;
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"].iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        text.lines().skip(1).find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
            (local_port == port && *fields.get(3)? == "0A").then(|| fields.get(9).map(|i| i.to_string()))?
        })
    })?;
    let socket = format!("socket:[{inode}]");
    for process in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else { continue };
        let owns = fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == socket));
        if owns {
            let stat = std::fs::read_to_string(process.path().join("stat")).ok()?;
            // Fields after the command (which may hold spaces) end with `)`.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            return Some(ticks as f64 / 100.0);
        }
    }
    None
}

/// Writes `n` one-byte managed objects at `root`, 64 at a time, straight to LocalStack; returns
/// the time it took.
pub(crate) async fn fill(root: &str, n: usize) -> Result<Duration, String> {
    use futures::StreamExt;
    let store = LakeStore::open(root).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let puts = (0..n).map(|i| {
        let (s, p) = (store.object_store(), store.path(&mint_key(&format!("l{i}")).0));
        async move { s.put(&p, PutPayload::from_static(b"l")).await.map(|_| ()) }
    });
    let mut results = futures::stream::iter(puts).buffer_unordered(64);
    while let Some(r) = results.next().await {
        r.map_err(|e| e.to_string())?;
    }
    Ok(started.elapsed())
}

/// Prints `parallel_listing_speedup`, or why it was skipped.
pub(crate) async fn speedup(args: &Args) -> Result<(), String> {
    let (Ok(bucket), Ok(endpoint)) = (std::env::var("LAKE_TEST_S3_BUCKET"), std::env::var("AWS_ENDPOINT_URL")) else {
        println!("# parallel_listing_speedup skipped: no LocalStack (run under scripts/localstack.sh run -- ...)");
        return Ok(());
    };
    let n = args.list_objects;
    let root = format!("s3://{bucket}/bench-{}/list", ulid::Ulid::new().to_string().to_lowercase());
    let filled = fill(&root, n).await?;
    println!(
        "# listing lake on LocalStack: {n} objects written in {:.1}s ({:.0} PUTs/s, 64 in flight, no proxy)",
        filled.as_secs_f64(),
        n as f64 / filled.as_secs_f64().max(1e-9)
    );
    let delay = Duration::from_millis(args.proxy_delay_ms);
    let proxy = LatencyProxy::start(&endpoint, delay).await?;
    let streams = args.list_streams.max(2);
    println!(
        "# parallel listing: {n} objects, pages of {} keys, {streams} streams vs 1, through a latency proxy adding {} ms per request",
        args.list_page_size,
        proxy.delay().as_millis()
    );
    let (mut one, mut many) = (Vec::new(), Vec::new());
    // LocalStack's CPU seconds and the requests during each side's listings.
    let (mut one_cpu, mut many_cpu) = ((0.0, 0), (0.0, 0));
    let timed = |streams: usize, cpu: &mut (f64, u64)| {
        let (before, requests) = (server_cpu_seconds(&endpoint), proxy.requests());
        let took = list_in_child(&root, streams, &proxy.endpoint(), args);
        if let (Some(a), Some(b)) = (before, server_cpu_seconds(&endpoint)) {
            cpu.0 += b - a;
        }
        cpu.1 += proxy.requests() - requests;
        took
    };
    let pairs = args.repeat.clamp(1, 5);
    for i in 0..pairs {
        if i % 2 == 0 {
            one.push(timed(1, &mut one_cpu)?);
            many.push(timed(streams, &mut many_cpu)?);
        } else {
            many.push(timed(streams, &mut many_cpu)?);
            one.push(timed(1, &mut one_cpu)?);
        }
    }
    // The same listings without the proxy: what LocalStack alone costs.
    let direct = (list_in_child(&root, 1, &endpoint, args)?, list_in_child(&root, streams, &endpoint, args)?);
    println!("# listing samples (s): 1 stream [{}], {streams} streams [{}]", seconds(&one), seconds(&many));
    let speedup = median_ratio(&one, &many);
    println!(
        "# listing: 1 stream {:.3}s, {streams} streams {:.3}s (medians); without the proxy: 1 stream {:.3}s, {streams} streams {:.3}s",
        median(one.clone()).as_secs_f64(),
        median(many.clone()).as_secs_f64(),
        direct.0.as_secs_f64(),
        direct.1.as_secs_f64()
    );
    if server_cpu_seconds(&endpoint).is_some() {
        let wall = |samples: &[Duration]| samples.iter().map(Duration::as_secs_f64).sum::<f64>();
        let per_request = |(cpu, requests): (f64, u64)| 1000.0 * cpu / requests.max(1) as f64;
        println!(
            "# LocalStack CPU during the listings ({pairs} pairs): 1 stream {:.2}s of {:.2}s wall, {} requests, {:.0} ms a request; {streams} streams {:.2}s of {:.2}s wall, {} requests, {:.0} ms a request",
            one_cpu.0,
            wall(&one),
            one_cpu.1,
            per_request(one_cpu),
            many_cpu.0,
            wall(&many),
            many_cpu.1,
            per_request(many_cpu),
        );
    }
    println!("# proxy delay: {} ms per request", delay.as_millis());
    println!("parallel_listing_speedup: {speedup:.2}");
    Ok(())
}
