//! `lake gc`: dry run, apply, resume: flags in, [`GarbageCollector`] calls, exit codes out. The
//! report's text, JSON and Prometheus forms are in [`super::gc_report`].

pub use super::gc_report::{GcReport, JsonReport};

use crate::cli::GcArgs;
use crate::commands::gc_shards::{run_sharded, shard_request};
use crate::commands::open_lake;
use crate::error::{parse_duration, CliError};
use chrono::{DateTime, Utc};
use lake_objects::apply::ApplyOptions;
use lake_objects::checkpoint::CheckpointLocation;
use lake_objects::collector::{GarbageCollector, Horizon, PlanSettings, Planned};
use lake_objects::inventory::report::{ReportInventory, ReportOptions};
use lake_objects::plan::GcPlan;
use lake_objects::spill::share;
use std::path::PathBuf;
use std::time::Duration;

/// A validated GC request.
#[derive(Debug, Clone)]
pub struct GcRequest {
    /// The horizon.
    pub min_age: Duration,
    /// Accept a horizon below the lake's policy floor.
    pub allow_below_policy: bool,
    /// Explicit cutoff (not later than store-now - min_age).
    pub cutoff: Option<DateTime<Utc>>,
    /// Apply with this checkpoint.
    pub checkpoint: Option<CheckpointLocation>,
    /// Apply options.
    pub apply: ApplyOptions,
    /// Inventory page size.
    pub list_page_size: usize,
    /// Listing requests in flight on an S3 root.
    pub list_streams: usize,
    /// Where to write the plan document.
    pub out: Option<PathBuf>,
    /// A saved plan to apply instead of planning.
    pub plan: Option<PathBuf>,
    /// Largest accepted difference between this host's clock and the store's.
    pub max_clock_skew: Duration,
    /// Bytes of sorted-run buffers planning may hold in memory before spilling to local disk;
    /// half for the live keys, half for the journal of the table being replayed (the engine's
    /// own budget, set by [`run`] with `LanceEngine::with_memory_budget`).
    pub memory_budget: usize,
}

/// Validates the flags of `lake gc` into a request.
///
/// # Errors
/// [`CliError::Usage`] naming the flag at fault.
pub fn request_from_args(args: &GcArgs) -> Result<GcRequest, CliError> {
    let text = args.min_age.as_deref().ok_or_else(|| {
        CliError::Usage("--min-age is required: GC only considers objects older than it (for example --min-age 7d); nothing was deleted".into())
    })?;
    let min_age = parse_duration("--min-age", text)?;
    if min_age.as_secs() == 0 {
        return Err(CliError::Usage(format!("--min-age {text} must be at least 1s: a zero horizon would race writers that are still publishing; nothing was deleted")));
    }
    if args.apply && args.checkpoint.is_none() && args.manifest.is_none() {
        return Err(CliError::Usage("--apply requires --checkpoint PATH, where the plan and the apply's progress are recorded so an interrupted apply can resume (or, for a sharded plan, --manifest FILE --checkpoint-dir CKDIR); nothing was deleted".into()));
    }
    if !args.apply && args.checkpoint.is_some() {
        return Err(CliError::Usage(
            "--checkpoint is only used with --apply; add --apply to delete, or drop --checkpoint for a dry run".into(),
        ));
    }
    let cutoff = match &args.cutoff {
        Some(c) => Some(
            DateTime::parse_from_rfc3339(c)
                .map_err(|e| {
                    CliError::Usage(format!("--cutoff `{c}` is not an RFC 3339 time ({e}), e.g. 2026-01-31T12:00:00Z"))
                })?
                .with_timezone(&Utc),
        ),
        None => None,
    };
    if !(1..=1000).contains(&args.page_size) {
        return Err(CliError::Usage(format!(
            "--page-size {} must be between 1 and 1000 (S3's DeleteObjects limit)",
            args.page_size
        )));
    }
    if args.list_page_size == 0 {
        return Err(CliError::Usage("--list-page-size must be at least 1".into()));
    }
    if args.list_streams == 0 {
        return Err(CliError::Usage("--list-streams must be at least 1 (1 lists one page at a time)".into()));
    }
    Ok(GcRequest {
        min_age,
        allow_below_policy: args.allow_below_policy,
        cutoff,
        checkpoint: args.checkpoint.as_deref().map(CheckpointLocation::parse).transpose()?,
        apply: ApplyOptions {
            page_size: args.page_size,
            max_pages: args.max_pages,
            progress: None,
            concurrency: args.delete_concurrency.max(1),
            memory_budget: share(args.memory_budget_mib.saturating_mul(1024 * 1024)).1,
        },
        list_page_size: args.list_page_size,
        list_streams: args.list_streams,
        out: args.out.clone(),
        plan: args.plan.clone(),
        max_clock_skew: parse_duration("--max-clock-skew", &args.max_clock_skew)?,
        memory_budget: args.memory_budget_mib.saturating_mul(1024 * 1024),
    })
}

/// Runs GC on an opened lake: flags in, [`GarbageCollector`] calls, a report out. Every rule
/// (horizon, policy floor, store clock, plan and checkpoint binding) is the collector's.
///
/// # Errors
/// Planning and apply errors, including the collector's policy refusals.
pub async fn run_gc(collector: &GarbageCollector<'_>, req: &GcRequest) -> Result<GcReport, CliError> {
    let horizon = Horizon {
        min_age: req.min_age,
        allow_below_policy: req.allow_below_policy,
        max_clock_skew: req.max_clock_skew,
        earlier_cutoff: req.cutoff,
    };
    let policy = collector.policy().clone();
    let report = |plan, stats, clock, apply, resumed, plan_seconds, apply_seconds| GcReport {
        inventory: None,
        restore_tags: Vec::new(),
        plan,
        stats,
        clock,
        policy: policy.clone(),
        apply,
        resumed,
        plan_seconds,
        apply_seconds,
    };
    // The reading reported with a resumed or saved plan; the collector checks its own.
    let (_, clock) = collector.cutoff(&horizon).await?;
    if let Some(path) = &req.checkpoint {
        let started = std::time::Instant::now();
        if let Some(done) = collector.resume(&horizon, path, &req.apply).await? {
            let seconds = started.elapsed().as_secs_f64();
            return Ok(report(done.plan.clone(), None, clock, Some(done), true, 0.0, seconds));
        }
    }
    if let Some(file) = &req.plan {
        let shown = file.display().to_string();
        let reader = std::fs::File::open(file).map_err(|e| CliError::Io { path: shown.clone(), source: e })?;
        let saved = GcPlan::read_document(std::io::BufReader::new(reader), &shown)?;
        let Some(path) = &req.checkpoint else {
            return Err(CliError::Usage("--plan requires --apply --checkpoint PATH".into()));
        };
        let started = std::time::Instant::now();
        let done = collector.apply(&saved, &horizon, path, &req.apply).await?;
        return Ok(report(saved, None, clock, Some(done), false, 0.0, started.elapsed().as_secs_f64()));
    }
    let settings = PlanSettings {
        inventory_page_size: req.list_page_size,
        memory_budget: share(req.memory_budget).1,
        list_streams: req.list_streams,
    };
    let planning = std::time::Instant::now();
    let Planned { plan: gc_plan, stats, clock } = collector.plan(&horizon, &settings).await?;
    let plan_seconds = planning.elapsed().as_secs_f64();
    if let Some(out) = &req.out {
        // Streamed: a spilled candidate list goes from its temporary file to the document.
        let io = |e| CliError::Io { path: out.display().to_string(), source: e };
        let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(io)?);
        gc_plan.write_document(&mut file).map_err(io)?;
        std::io::Write::flush(&mut file).map_err(io)?;
    }
    let applying = std::time::Instant::now();
    let apply_report = match &req.checkpoint {
        Some(path) => Some(collector.apply(&gc_plan, &horizon, path, &req.apply).await?),
        None => None,
    };
    let apply_seconds = if apply_report.is_some() { applying.elapsed().as_secs_f64() } else { 0.0 };
    Ok(report(gc_plan, Some(stats), clock, apply_report, false, plan_seconds, apply_seconds))
}

/// Runs `lake gc`.
///
/// # Errors
/// As [`run_gc`]; [`CliError::Exit`] for exit codes 3 and 4 after printing the report.
pub async fn run(args: &GcArgs) -> Result<(), CliError> {
    let mut req = request_from_args(args)?;
    // A saved plan (--plan) is applied as it is: no report is read for it.
    let report_options = match (&args.inventory, &args.plan) {
        (Some(_), None) => Some(ReportOptions {
            max_age: parse_duration("--inventory-max-age", &args.inventory_max_age)?,
            margin: parse_duration("--inventory-margin", &args.inventory_margin)?,
            memory_budget: share(req.memory_budget).1,
        }),
        _ => None,
    };
    let (store, _, engine) = open_lake(&args.root).await?;
    let engine = engine.with_memory_budget(share(req.memory_budget).0);
    let collector = GarbageCollector::open(store, &engine).await?;
    // The report is read and checked (or refused) before planning; planning then lists from it.
    let inventory = match (&args.inventory, &report_options) {
        (Some(url), Some(options)) => Some(ReportInventory::open(collector.store(), url, options).await?),
        _ => None,
    };
    let collector = match &inventory {
        Some(report) => collector.with_inventory(Box::new(report.clone())),
        None => collector,
    };
    // Progress on stderr when it is a terminal (indicatif draws nothing otherwise).
    let bar = indicatif::ProgressBar::new_spinner().with_message("planning: reading lineage and listing objects");
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let hook_bar = bar.clone();
    req.apply.progress = Some(lake_objects::apply::ProgressHook(std::sync::Arc::new(move |done, total| {
        if hook_bar.length() != Some(total) {
            hook_bar.set_style(
                indicatif::ProgressStyle::with_template("deleting {bar:40} {pos}/{len} candidates ({eta} left)")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            hook_bar.set_length(total);
        }
        hook_bar.set_position(done);
    })));
    if let Some(sharded) = shard_request(args)? {
        let report = run_sharded(&collector, &req, &sharded).await;
        bar.finish_and_clear();
        let report = report?;
        return finish(
            args,
            || report.to_prometheus(),
            |out| serde_json::to_writer(out, &report.to_json()),
            || report.to_text(),
            report.exit_code(),
        );
    }
    let report = run_gc(&collector, &req).await;
    bar.finish_and_clear();
    let mut report = report?;
    report.inventory = inventory.map(|i| i.summary());
    report.restore_tags = restore_tags(&engine, report.clock.store_now).await?;
    finish(
        args,
        || report.to_prometheus(),
        |out| serde_json::to_writer(out, &JsonReport(&report)),
        || report.to_text(),
        report.exit_code(),
    )
}

/// The restore tags of every registered table and branch, judged stale or not at `now` (the
/// store's clock of the run).
///
/// # Errors
/// Engine and storage errors.
async fn restore_tags(
    engine: &lake_lance::LanceEngine,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<lake_lance::history::RestoreTag>, CliError> {
    let mut found = Vec::new();
    for table in lake_objects::registry::tables(engine.store()).await? {
        if engine.table_exists(&table).await? {
            found.extend(engine.restore_tags(&table, now).await?);
        }
    }
    Ok(found)
}

/// Writes a run's metrics file, prints its JSON or text, and turns its exit code into a result.
fn finish(
    args: &GcArgs,
    prometheus: impl FnOnce() -> String,
    json: impl FnOnce(&mut dyn std::io::Write) -> serde_json::Result<()>,
    text: impl FnOnce() -> String,
    code: u8,
) -> Result<(), CliError> {
    if let Some(path) = &args.metrics_file {
        std::fs::write(path, prometheus()).map_err(|e| CliError::Io { path: path.display().to_string(), source: e })?;
    }
    if args.json {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let written = json(&mut out)
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
            .and_then(|()| std::io::Write::flush(&mut out));
        written.map_err(|e| CliError::Io { path: "standard output".into(), source: e })?;
    } else {
        print!("{}", text());
    }
    match code {
        0 => Ok(()),
        3 => Err(CliError::Exit {
            code: 3,
            message: "lineage is incomplete: the plan has no candidates and apply would refuse (see problems)".into(),
        }),
        code => Err(CliError::Exit {
            code,
            message: "the apply has work left; run the same command again to resume".into(),
        }),
    }
}
