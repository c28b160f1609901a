//! `lake gc`: dry run, apply, resume: flags in, [`GarbageCollector`] calls, exit codes out. The
//! report's text, JSON and Prometheus forms are in [`super::gc_report`].

pub(crate) use super::gc_report::{GcReport, JsonReport};

use crate::cli::GcArgs;
use crate::commands::gc_run::RunFacts;
use crate::commands::gc_shards::{run_sharded, shard_request};
use crate::commands::open_lake;
use crate::error::{check_range, memory_budget_bytes, parse_duration, parse_duration_within, CliError};
use chrono::{DateTime, Utc};
use lake::collect::apply::ApplyOptions;
use lake::collect::checkpoint::CheckpointLocation;
use lake::collect::collector::{GarbageCollector, Horizon, PlanSettings};
use lake::collect::inventory::report::deferred::DeferredReport;
use lake::collect::inventory::report::ReportOptions;
use lake::collect::output::{DocumentKind, LakeRootUri, OutputPath};
use lake::collect::plan::GcPlan;
use lake::collect::run::{PlanSource, RunRequest};
use lake::collect::state::IncrementalPolicy;
use lake::engine::budget::share;
use std::path::PathBuf;
use std::time::Duration;

/// Most delete requests in flight (`--delete-concurrency`) and listing requests in flight
/// (`--list-streams`): each holds a page of up to 1000 keys.
const MAX_REQUESTS_IN_FLIGHT: u64 = 64;
/// The bounds of `--max-clock-skew`: 0 would refuse every run, more than a day accepts a host
/// clock that is plainly wrong.
const CLOCK_SKEW_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(86_400));
/// The upper bound of `--inventory-max-age` and `--inventory-margin`: a year (365.25 days, as
/// humantime counts one).
const INVENTORY_DURATION_MAX: Duration = Duration::from_secs(31_557_600);
/// The upper bound of `--full-every`: a year (365.25 days, as humantime counts one).
const FULL_EVERY_MAX: Duration = INVENTORY_DURATION_MAX;

/// A validated GC request.
#[derive(Debug, Clone)]
pub(crate) struct GcRequest {
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
    /// Where to write the plan document (checked against the lake before planning).
    pub out: Option<OutputPath>,
    /// Where to write the run's metrics (checked against the lake before planning).
    pub metrics: Option<OutputPath>,
    /// A saved plan to apply instead of planning.
    pub plan: Option<PathBuf>,
    /// Largest accepted difference between this host's clock and the store's.
    pub max_clock_skew: Duration,
    /// Bytes of sorted-run buffers planning may hold in memory before spilling to local disk;
    /// half for the live keys, half for the journal of the table being replayed (the engine's
    /// own budget, set by [`run`] with `LanceEngine::with_memory_budget`).
    pub memory_budget: usize,
    /// Whether a new plan may be incremental (`--full`, `--full-every`).
    pub incremental: IncrementalPolicy,
}

/// Validates the flags of `lake gc` into a request.
///
/// # Errors
/// [`CliError::Usage`] naming the flag at fault.
pub(crate) fn request_from_args(args: &GcArgs) -> Result<GcRequest, CliError> {
    let text = args.min_age.as_deref().ok_or_else(|| {
        CliError::Usage("--min-age is required: GC only considers objects older than it (for example --min-age 7d); nothing was deleted".into())
    })?;
    let min_age = parse_duration("--min-age", text)?;
    if min_age.as_secs() == 0 {
        return Err(CliError::Gc(lake::collect::GcError::refused(
            lake::common::ErrorKind::Horizon,
            format!("--min-age {text} must be at least 1s: a zero horizon would race writers that are still publishing; nothing was deleted"),
        )));
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
    check_range("--page-size", args.page_size as u64, 1..=1000, "keys per delete request: S3's DeleteObjects limit")?;
    check_range(
        "--delete-concurrency",
        args.delete_concurrency as u64,
        1..=MAX_REQUESTS_IN_FLIGHT,
        "delete requests in flight, each of up to --page-size keys",
    )?;
    if let Some(pages) = args.max_pages {
        check_range("--max-pages", pages, 1..=u64::MAX, "delete pages this run; 0 would delete nothing")?;
    }
    check_range(
        "--list-page-size",
        args.list_page_size as u64,
        1..=1000,
        "keys per listing request: S3's ListObjectsV2 limit",
    )?;
    check_range(
        "--list-streams",
        args.list_streams as u64,
        1..=MAX_REQUESTS_IN_FLIGHT,
        "listing requests in flight; 1 lists one page at a time",
    )?;
    let memory_budget = memory_budget_bytes(args.memory_budget_mib)?;
    let (skew_min, skew_max) = CLOCK_SKEW_BOUNDS;
    let max_clock_skew = parse_duration_within(
        "--max-clock-skew",
        &args.max_clock_skew,
        skew_min,
        skew_max,
        "the largest accepted difference between this host's clock and the store's",
    )?;
    parse_duration_within(
        "--inventory-max-age",
        &args.inventory_max_age,
        Duration::from_secs(1),
        INVENTORY_DURATION_MAX,
        "the oldest S3 Inventory report accepted",
    )?;
    parse_duration_within(
        "--inventory-margin",
        &args.inventory_margin,
        Duration::ZERO,
        INVENTORY_DURATION_MAX,
        "how long before a report's creation its keys are listed live",
    )?;
    let full_every = parse_duration_within(
        "--full-every",
        &args.full_every,
        Duration::from_secs(1),
        FULL_EVERY_MAX,
        "how long incremental plans run before a full plan is made again",
    )?;
    let incremental = IncrementalPolicy { full: args.full, full_every, ..IncrementalPolicy::default() };
    let force = args.force;
    // With --shards, --out names a folder (see `gc_shards`).
    let out = match (&args.out, args.shards) {
        (Some(text), None) => Some(OutputPath::parse("--out", text)?.force(force)),
        _ => None,
    };
    let metrics = args.metrics_file.as_deref().map(|t| OutputPath::parse("--metrics-file", t)).transpose()?;
    Ok(GcRequest {
        min_age,
        allow_below_policy: args.allow_below_policy,
        cutoff,
        checkpoint: args.checkpoint.as_deref().map(CheckpointLocation::parse).transpose()?,
        apply: ApplyOptions {
            page_size: args.page_size,
            max_pages: args.max_pages,
            progress: None,
            concurrency: args.delete_concurrency,
            memory_budget: share(memory_budget).1,
        },
        list_page_size: args.list_page_size,
        list_streams: args.list_streams,
        out,
        metrics: metrics.map(|m| m.force(force)),
        plan: args.plan.clone(),
        max_clock_skew,
        memory_budget,
        incremental,
    })
}

/// Runs GC on an opened lake: flags in, [`GarbageCollector`] calls, a report out. Every rule
/// (horizon, policy floor, store clock, plan and checkpoint binding) is the collector's.
///
/// # Errors
/// Planning and apply errors, including the collector's policy refusals.
pub(crate) async fn run_gc(collector: &GarbageCollector<'_>, req: &GcRequest) -> Result<GcReport, CliError> {
    let horizon = Horizon {
        min_age: req.min_age,
        allow_below_policy: req.allow_below_policy,
        max_clock_skew: req.max_clock_skew,
        earlier_cutoff: req.cutoff,
    };
    let policy = collector.policy().clone();
    // Every file this run writes is checked before anything is planned or deleted: none may
    // lie inside the lake, or replace a file of another kind.
    let root = collector.store().root();
    if let Some(out) = &req.out {
        out.check(root, DocumentKind::Plan)?;
    }
    if let Some(metrics) = &req.metrics {
        metrics.check(root, DocumentKind::Metrics)?;
    }
    let saved = match &req.plan {
        Some(file) => {
            let shown = file.display().to_string();
            let reader = std::fs::File::open(file).map_err(|e| CliError::Io { path: shown.clone(), source: e })?;
            if req.checkpoint.is_none() {
                return Err(CliError::Usage("--plan requires --apply --checkpoint PATH".into()));
            }
            Some(GcPlan::read_document(std::io::BufReader::new(reader), &shown)?)
        }
        None => None,
    };
    // The decision (resume, replace or plan anew) is the collector's, as for every caller.
    let request = RunRequest {
        horizon,
        plan: saved.as_ref().map_or(PlanSource::New, PlanSource::Given),
        checkpoint: req.checkpoint.as_ref(),
        out: req.out.as_ref(),
        apply: req.apply.clone(),
        settings: PlanSettings {
            inventory_page_size: req.list_page_size,
            memory_budget: share(req.memory_budget).1,
            list_streams: req.list_streams,
        },
        incremental: req.incremental.clone(),
    };
    let run = collector.run(&request).await?;
    Ok(GcReport {
        digest: run.plan.digest()?,
        inventory: None,
        restore_tags: Vec::new(),
        plan: run.plan,
        run: RunFacts {
            stats: run.stats,
            clock: run.clock,
            policy,
            plan_seconds: run.plan_time.as_secs_f64(),
            apply_seconds: run.apply_time.as_secs_f64(),
        },
        apply: run.apply,
        resumed: run.resumed,
    })
}

/// Runs `lake gc`.
///
/// # Errors
/// As [`run_gc`]; [`CliError::Exit`] for exit codes 3 and 4 after printing the report.
pub(crate) async fn run(args: &GcArgs) -> Result<(), CliError> {
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
    // The report is read and checked (or refused) when a full plan first lists from it: an
    // incremental plan lists the keys minted since its state itself and never reads it.
    let inventory = match (&args.inventory, &report_options) {
        (Some(url), Some(options)) => Some(DeferredReport::new(collector.store(), url, options)?),
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
    req.apply.progress = Some(lake::collect::apply::ProgressHook(std::sync::Arc::new(move |done, total| {
        if hook_bar.length() != Some(total) {
            hook_bar.set_style(
                indicatif::ProgressStyle::with_template("deleting {bar:40} {pos}/{len} candidates ({eta} left)")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            hook_bar.set_length(total);
        }
        hook_bar.set_position(done);
    })));
    let metrics = req.metrics.as_ref().map(|m| (m, collector.store().root()));
    if let Some(sharded) = shard_request(args)? {
        let report = run_sharded(&collector, &req, &sharded).await;
        bar.finish_and_clear();
        let report = report?;
        return finish(
            args,
            metrics,
            || report.to_prometheus(),
            |out| serde_json::to_writer(out, &report.to_json()),
            || report.to_text(),
            report.exit_code(),
        );
    }
    let report = run_gc(&collector, &req).await;
    bar.finish_and_clear();
    let mut report = report?;
    report.inventory = inventory.and_then(|i| i.summary());
    report.restore_tags = restore_tags(&engine, report.run.clock.store_now).await?;
    finish(
        args,
        metrics,
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
    engine: &lake::lance::LanceEngine,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<lake::lance::history::RestoreTag>, CliError> {
    let mut found = Vec::new();
    for table in lake::store::registry::tables(engine.store()).await? {
        if engine.table_exists(&table).await? {
            found.extend(engine.restore_tags(&table, now).await?);
        }
    }
    Ok(found)
}

/// Writes a run's metrics file (outside the lake `root`, over nothing or a metrics file,
/// atomically), prints its JSON or text, and turns its exit code into a result.
fn finish(
    args: &GcArgs,
    metrics: Option<(&OutputPath, &LakeRootUri)>,
    prometheus: impl FnOnce() -> String,
    json: impl FnOnce(&mut dyn std::io::Write) -> serde_json::Result<()>,
    text: impl FnOnce() -> String,
    code: u8,
) -> Result<(), CliError> {
    if let Some((file, root)) = metrics {
        let body = prometheus();
        file.write(root, DocumentKind::Metrics, |out| std::io::Write::write_all(out, body.as_bytes()))?;
    }
    if args.json {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let written = json(&mut out)
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
            .and_then(|()| std::io::Write::flush(&mut out));
        // As every output of lake: a reader that went away does not change the outcome, any
        // other failure is reported at exit (see `crate::stdio`).
        if let Err(e) = written {
            crate::stdio::record_stdout_failure(e);
        }
    } else {
        print!("{}", text());
    }
    match code {
        0 => Ok(()),
        3 => Err(CliError::Exit {
            kind: lake::common::ErrorKind::LineageIncomplete,
            message: "lineage is incomplete: the plan has no candidates and apply would refuse (see problems)".into(),
        }),
        _ => Err(CliError::Exit {
            kind: lake::common::ErrorKind::Incomplete,
            message: "the apply has work left; run the same command again to resume".into(),
        }),
    }
}
