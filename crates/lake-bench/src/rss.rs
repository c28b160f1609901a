//! Peak resident memory, measured in child processes (`VmHWM` from /proc/self/status, KiB).

use crate::Args;
use std::process::Command;

/// This process's peak resident set size in KiB.
pub(crate) fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `lake-bench --child STEP` with `extra` arguments and returns the child's peak RSS (KiB).
pub(crate) fn child_peak(step: &str, extra: &[String]) -> Result<u64, String> {
    let value = child_value(step, extra, &[], "peak_rss_kib")?;
    value.parse().map_err(|_| format!("child {step} printed no peak_rss_kib: {value}"))
}

/// Runs `lake-bench --child STEP` with `extra` arguments, each `(NAME, value)` of `env` set in
/// its environment (`None`: removed from it), and returns the value of the child's `KEY: value`
/// line.
pub(crate) fn child_value(
    step: &str,
    extra: &[String],
    env: &[(&str, Option<&str>)],
    key: &str,
) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = Command::new(exe);
    command.arg("--child").arg(step).args(extra);
    for (name, value) in env {
        match value {
            Some(value) => command.env(name, value),
            None => command.env_remove(name),
        };
    }
    let out = command.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("child {step} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{key}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
        .ok_or_else(|| format!("child {step} printed no {key}: {text}"))
}

/// The child side: one measured step, then its peak RSS.
pub(crate) async fn run_child(step: &str, args: &Args) -> Result<(), String> {
    match step {
        "append-engine-built" => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let root = dir.path().join("lake").display().to_string();
            let took = crate::append::append_built(&root, args.rows).await?;
            println!("append_seconds: {:.6}", took.as_secs_f64());
        }
        "append-engine" | "append-plain" => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let root = dir.path().join("lake").display().to_string();
            let took = crate::append::append_once(&root, step == "append-engine", args.rows).await?;
            // For comparisons made outside this binary (the Python package's benchmark).
            println!("append_seconds: {:.6}", took.as_secs_f64());
        }
        "plan" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::plan::plan_once(root, args.memory_budget_kib).await?;
        }
        "repair" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::snapshots::repair_once(root, args.snapshot_budget_mib).await?;
        }
        "snapshot-plan" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let range = match args.shard_range.as_deref() {
                Some(json) => Some(serde_json::from_str(json).map_err(|e| format!("--shard-range: {e}"))?),
                None => None,
            };
            crate::snapshots::plan_once(root, args.snapshot_budget_mib, range).await?;
        }
        "make-foreign-lake" => {
            // For the measurement by hand of repair and gc on a lake of second-client appends.
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::snapshots::make_foreign_lake(root, args.rows, args.versions).await?;
        }
        "make-planning-lake" => {
            // For profiling one figure by hand: build the planning lake at --root.
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::lakes::planning_lake(root, args.objects, args.versions).await?;
        }
        "ingest" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let dir = args.dir.as_deref().ok_or("--dir is required")?;
            crate::memory::ingest_once(root, dir).await?;
        }
        "ingest-plain" => crate::memory::plain_append_once(args.rows).await?,
        "verify" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::memory::verify_once(root, args.memory_budget_kib.div_ceil(1024).max(1)).await?;
        }
        "delete" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let took = crate::s3::apply_once(root, args.delete_objects).await?;
            println!("apply_nanos: {}", took.as_nanos());
        }
        "plan-inventory" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let cutoff = args.cutoff_ms.ok_or("--cutoff-ms is required")?;
            let (took, digest, count) =
                crate::inventory_report::plan_once(root, cutoff, args.inventory.as_deref()).await?;
            println!("plan_nanos_digest_candidates: {} {digest} {count}", took.as_nanos());
        }
        "make-incremental-lake" => {
            // For profiling by hand: the lake of the `incremental` group at --root after its
            // change (`--incremental-objects`; the GC checkpoint beside it).
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::incremental::make_lake(root, args.incremental_objects).await?;
        }
        "plan-state" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let cutoff = args.cutoff_ms.ok_or("--cutoff-ms is required")?;
            crate::incremental::plan_once(root, cutoff, args.full_plan).await?;
        }
        "list-s3" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            let (took, entries) = crate::listing::list_once(root, args.list_streams, args.list_page_size).await?;
            println!("list_nanos_entries: {} {entries}", took.as_nanos());
        }
        "list" => {
            let root = args.root.as_deref().ok_or("--root is required")?;
            crate::plan::list_once(root).await?;
        }
        other => return Err(format!("unknown child step {other}")),
    }
    println!("peak_rss_kib: {}", peak_rss_kib());
    Ok(())
}

/// `append_peak_rss_ratio`: journaled append / plain Lance append, peak RSS.
pub(crate) fn append_peak_rss(args: &Args) -> Result<(), String> {
    let extra = vec!["--rows".to_string(), args.rows.to_string()];
    let mut engine = Vec::new();
    let mut plain = Vec::new();
    for i in 0..args.repeat.max(1) {
        if i % 2 == 0 {
            engine.push(child_peak("append-engine", &extra)?);
            plain.push(child_peak("append-plain", &extra)?);
        } else {
            plain.push(child_peak("append-plain", &extra)?);
            engine.push(child_peak("append-engine", &extra)?);
        }
    }
    let (e, p) = (crate::median(engine), crate::median(plain));
    println!("# append peak RSS: journaled {e} KiB, plain Lance {p} KiB");
    println!("append_peak_rss_ratio: {:.3}", e as f64 / p.max(1) as f64);
    Ok(())
}
