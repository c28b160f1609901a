//! `lake gc`: dry run, apply, resume.

use crate::cli::GcArgs;
use crate::commands::open_lake;
use crate::error::{parse_duration, CliError};
use chrono::{DateTime, Utc};
use lake_objects::apply::{ApplyOptions, ApplyReport};
use lake_objects::checkpoint::CheckpointLocation;
use lake_objects::clock::ClockReading;
use lake_objects::collector::{GarbageCollector, Horizon, PlanSettings, Planned};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::plan::GcPlan;
use lake_objects::planner::{format_time, PlanStats};
use lake_objects::spill::share;
use serde_json::{json, Value};
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

/// What a GC run did.
#[derive(Debug, Clone)]
pub struct GcReport {
    /// The plan made or resumed.
    pub plan: GcPlan,
    /// Planning counters (absent when resuming a recorded plan).
    pub stats: Option<PlanStats>,
    /// The clock reading the cutoff came from.
    pub clock: ClockReading,
    /// The lake's policy floor.
    pub policy: LakeDescriptor,
    /// Apply outcome, when applying.
    pub apply: Option<ApplyReport>,
    /// True when the plan came from an existing checkpoint.
    pub resumed: bool,
    /// Wall time of planning, seconds (0 when resuming or applying a saved plan).
    pub plan_seconds: f64,
    /// Wall time of the apply, seconds (0 for a dry run).
    pub apply_seconds: f64,
}

/// The `--json` document of a run: [`GcReport::to_json`]'s fields and `candidates`, the plan's
/// candidate array streamed from its list (a spilled list is read once, never loaded whole).
/// Keys are in ascending order, as in every other `--json` object.
pub struct JsonReport<'a>(pub &'a GcReport);

impl serde::Serialize for JsonReport<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let fields = match self.0.to_json() {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let mut map = serializer.serialize_map(Some(fields.len() + 1))?;
        let mut candidates = Some(&self.0.plan.candidates);
        for (key, value) in &fields {
            if key.as_str() > "candidates" {
                if let Some(list) = candidates.take() {
                    map.serialize_entry("candidates", list)?;
                }
            }
            map.serialize_entry(key, value)?;
        }
        if let Some(list) = candidates {
            map.serialize_entry("candidates", list)?;
        }
        map.end()
    }
}

impl GcReport {
    /// The `--json` object without its `candidates` array (see [`JsonReport`], which adds it
    /// streamed).
    pub fn to_json(&self) -> Value {
        let p = &self.plan;
        let mut v = json!({
            "digest": p.digest(),
            "root": p.root,
            "cutoff": p.cutoff,
            "min_age_seconds": p.min_age_seconds,
            "policy_min_age_seconds": self.policy.gc.min_age_seconds,
            "store_now": format_time(self.clock.store_now),
            "clock_skew_ms": self.clock.skew_ms(),
            "lineage_complete": p.lineage_complete,
            "problems": p.problems,
            "foreign_count": p.foreign_count,
            "foreign": p.foreign,
            "basis": p.basis,
            "candidate_count": p.candidates.len(),
            "candidate_bytes": p.candidate_bytes(),
            "resumed": self.resumed,
            "plan_seconds": self.plan_seconds,
            "apply_seconds": self.apply_seconds,
        });
        if let Some(s) = &self.stats {
            v["metrics"] = json!({
                "tables": s.tables,
                "live_references": s.live_references,
                "objects_listed": s.objects_listed,
                "inventory_pages": s.inventory_pages,
                "unmanaged_keys": s.unmanaged_keys,
                "foreign_entries": s.foreign_entries,
                "empty_folders": s.empty_folders,
                "journal_garbage": s.journal_garbage,
                "live_objects": s.live_objects,
                "young_objects": s.young_objects,
                "spilled_runs": s.spilled_runs,
            });
        }
        if let Some(a) = &self.apply {
            let c = &a.checkpoint;
            v["deleted"] = json!(c.deleted);
            v["already_gone"] = json!(c.already_gone);
            v["absent"] = json!(c.absent);
            v["skipped"] = json!(c.skipped.len());
            v["skipped_keys"] = json!(c.skipped);
            v["failed"] = json!(c.failed.len());
            v["failed_keys"] = json!(c.failed);
            v["revived"] = json!(c.revived.len());
            v["revived_keys"] = json!(c.revived);
            v["complete"] = json!(c.complete);
            v["delete_pages"] = json!(a.pages);
            v["already_complete"] = json!(a.was_complete);
        }
        v
    }

    /// The metrics summary in the Prometheus text exposition format (for a node exporter's
    /// textfile collector): one gauge per figure, labelled with the lake root.
    pub fn to_prometheus(&self) -> String {
        let root = self.plan.root.replace('\\', "\\\\").replace('"', "\\\"");
        let mut figures: Vec<(&str, &str, f64)> = vec![
            ("lake_gc_candidates", "Objects the plan would delete.", self.plan.candidates.len() as f64),
            ("lake_gc_candidate_bytes", "Bytes of the candidates.", self.plan.candidate_bytes() as f64),
            (
                "lake_gc_lineage_complete",
                "1 when every table's journal is complete.",
                f64::from(u8::from(self.plan.lineage_complete)),
            ),
            (
                "lake_gc_foreign_entries",
                "Entries under objects/ that are no objects (links, devices, folder markers).",
                self.plan.foreign_count as f64,
            ),
            (
                "lake_gc_clock_skew_seconds",
                "Local clock minus the store's clock.",
                self.clock.skew_ms() as f64 / 1000.0,
            ),
            ("lake_gc_plan_seconds", "Wall time of planning.", self.plan_seconds),
            ("lake_gc_apply_seconds", "Wall time of the apply.", self.apply_seconds),
        ];
        if let Some(s) = &self.stats {
            figures.push((
                "lake_gc_objects_listed",
                "Objects listed under the managed prefix.",
                s.objects_listed as f64,
            ));
            figures.push((
                "lake_gc_live_references",
                "Live references read from the journal.",
                s.live_references as f64,
            ));
            figures.push(("lake_gc_inventory_pages", "Listing requests.", s.inventory_pages as f64));
        }
        if let Some(a) = &self.apply {
            let c = &a.checkpoint;
            figures.push(("lake_gc_deleted", "Objects deleted.", c.deleted as f64));
            figures.push(("lake_gc_already_gone", "Candidates already gone.", c.already_gone as f64));
            figures.push((
                "lake_gc_absent",
                "Candidates the store confirms gone without saying whether this apply removed them (S3).",
                c.absent as f64,
            ));
            figures.push((
                "lake_gc_skipped",
                "Candidates left alone (no longer a regular file).",
                c.skipped.len() as f64,
            ));
            figures.push(("lake_gc_failed", "Deletes that failed and stay pending.", c.failed.len() as f64));
            figures.push((
                "lake_gc_revived",
                "Candidates dropped because a newer version references them.",
                c.revived.len() as f64,
            ));
            figures.push(("lake_gc_delete_requests", "Delete pages sent in this run.", a.pages as f64));
            figures.push(("lake_gc_complete", "1 when the apply is complete.", f64::from(u8::from(c.complete))));
        }
        let mut out = String::new();
        for (name, help, value) in figures {
            out += &format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{root=\"{root}\"}} {value}\n");
        }
        out
    }

    /// Human-readable lines.
    pub fn to_text(&self) -> String {
        let p = &self.plan;
        let mut out = String::new();
        let mode = if self.apply.is_some() { "apply" } else { "dry run (nothing deleted)" };
        out += &format!("lake gc {mode}\n");
        out += &format!("  root:        {}\n", p.root);
        out += &format!(
            "  policy:      min_age {} (lake floor {})\n",
            humantime::format_duration(Duration::from_secs(p.min_age_seconds)),
            humantime::format_duration(self.policy.min_age())
        );
        out += &format!(
            "  store clock: {} (local clock {:+} ms)\n",
            format_time(self.clock.store_now),
            self.clock.skew_ms()
        );
        out += &format!("  cutoff:      {} (only older objects are candidates)\n", p.cutoff);
        out += &format!("  plan digest: {}\n", p.digest());
        for b in &p.basis {
            out += &format!("  table `{}` at version {}\n", b.table, b.version);
        }
        if !p.lineage_complete {
            out += "  LINEAGE INCOMPLETE: no candidates are proposed and apply refuses. Problems:\n";
            for problem in &p.problems {
                out += &format!("    - {problem}\n");
            }
        }
        if p.foreign_count > 0 {
            out += &format!(
                "  foreign:     {} entries under objects/ are no objects; never followed, planned or deleted:\n",
                p.foreign_count
            );
            for f in &p.foreign {
                out += &format!("    {f}\n");
            }
        }
        out += &format!("  candidates:  {} objects, {} bytes\n", p.candidates.len(), p.candidate_bytes());
        match p.candidates.first(50) {
            Ok(first) => {
                for c in first {
                    out += &format!("    {}  {} bytes  {}\n", c.uri, c.size, c.last_modified);
                }
            }
            Err(e) => out += &format!("    (cannot read the candidate list: {e})\n"),
        }
        if p.candidates.len() > 50 {
            out += &format!("    ... {} more (use --json or --out for the full list)\n", p.candidates.len() - 50);
        }
        if let Some(a) = &self.apply {
            let c = &a.checkpoint;
            if a.was_complete {
                out += "  apply: already complete; nothing to do\n";
            }
            out += &format!(
                "  deleted {}, already gone {}, gone (store does not say which run removed them) {}, revived {}, skipped {}, failed {} ({} delete requests this run)\n",
                c.deleted,
                c.already_gone,
                c.absent,
                c.revived.len(),
                c.skipped.len(),
                c.failed.len(),
                a.pages
            );
            for s in c.skipped.iter().take(20) {
                out += &format!("    skipped {s}\n");
            }
            out += if c.complete { "  complete\n" } else { "  NOT complete: run the same command again to resume\n" };
        }
        out
    }

    /// Exit code: 0 done; 3 dry run on incomplete lineage; 4 apply with work left.
    pub fn exit_code(&self) -> u8 {
        match &self.apply {
            Some(a) if !a.checkpoint.complete => 4,
            Some(_) => 0,
            None if !self.plan.lineage_complete => 3,
            None => 0,
        }
    }
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
    if args.apply && args.checkpoint.is_none() {
        return Err(CliError::Usage("--apply requires --checkpoint PATH, where the plan and the apply's progress are recorded so an interrupted apply can resume; nothing was deleted".into()));
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
    let settings = PlanSettings { inventory_page_size: req.list_page_size, memory_budget: share(req.memory_budget).1 };
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
    let (store, _, engine) = open_lake(&args.root).await?;
    let engine = engine.with_memory_budget(share(req.memory_budget).0);
    let collector = GarbageCollector::open(store, &engine).await?;
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
    let report = run_gc(&collector, &req).await;
    bar.finish_and_clear();
    let report = report?;
    if let Some(path) = &args.metrics_file {
        std::fs::write(path, report.to_prometheus())
            .map_err(|e| CliError::Io { path: path.display().to_string(), source: e })?;
    }
    if args.json {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let written = serde_json::to_writer(&mut out, &JsonReport(&report))
            .map_err(std::io::Error::other)
            .and_then(|()| std::io::Write::write_all(&mut out, b"\n"))
            .and_then(|()| std::io::Write::flush(&mut out));
        written.map_err(|e| CliError::Io { path: "standard output".into(), source: e })?;
    } else {
        print!("{}", report.to_text());
    }
    match report.exit_code() {
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
