//! `lake gc --shards N` (a sharded dry run, written to `--out DIR`) and `lake gc --apply
//! --manifest DIR/manifest.json --checkpoint-dir CKDIR [--shard I]` (every shard, or one, each
//! with its own checkpoint `CKDIR/shard-0000I.ckpt`). Every rule is the collector's
//! ([`GarbageCollector::plan_sharded`], [`GarbageCollector::apply_shard`],
//! [`GarbageCollector::resume_shard`]); the report's forms are in [`super::gc_shards_report`].

pub(crate) use super::gc_shards_report::{ShardOutcome, ShardedReport};

use crate::cli::GcArgs;
use crate::commands::gc::GcRequest;
use crate::commands::gc_run::RunFacts;
use crate::error::CliError;
use lake::collect::checkpoint::CheckpointLocation;
use lake::collect::collector::{GarbageCollector, Horizon, PlanSettings, PlannedShards};
use lake::collect::output::OutputPath;
use lake::collect::shards::{shard_checkpoint_name, ShardEntry, ShardManifest, MAX_SHARDS};
use lake::engine::budget::share;
use std::path::{Path, PathBuf};

/// The sharded part of a `lake gc` request.
#[derive(Debug, Clone)]
pub(crate) enum ShardRequest {
    /// A sharded dry run of this many shards, written to the folder when given.
    Plan { shards: usize, out: Option<OutputPath> },
    /// Apply the sharded plan whose manifest is `manifest`, each shard with its checkpoint in
    /// `checkpoint_dir`; only shard `only` when given.
    Apply { manifest: PathBuf, checkpoint_dir: String, only: Option<u64> },
}

/// The sharded request of `args`, if any (clap already refused flags that do not go together).
///
/// # Errors
/// [`CliError::Usage`] for a shard count outside 1 to [`MAX_SHARDS`].
pub(crate) fn shard_request(args: &GcArgs) -> Result<Option<ShardRequest>, CliError> {
    if let Some(shards) = args.shards {
        if !(1..=MAX_SHARDS).contains(&shards) {
            return Err(CliError::Usage(format!(
                "--shards {shards} must be between 1 and {MAX_SHARDS} (every shard reads the whole journal; only the listing is split)"
            )));
        }
        let out = args.out.as_deref().map(|t| OutputPath::parse("--out", t)).transpose()?;
        return Ok(Some(ShardRequest::Plan { shards, out: out.map(|o| o.force(args.force)) }));
    }
    match (&args.manifest, &args.checkpoint_dir) {
        (Some(manifest), Some(dir)) => {
            Ok(Some(ShardRequest::Apply { manifest: manifest.clone(), checkpoint_dir: dir.clone(), only: args.shard }))
        }
        _ => Ok(None),
    }
}

/// Runs a sharded dry run or apply on an opened lake.
///
/// # Errors
/// Planning and apply errors, the collector's refusals, and local file errors.
pub(crate) async fn run_sharded(
    collector: &GarbageCollector<'_>,
    req: &GcRequest,
    sharded: &ShardRequest,
) -> Result<ShardedReport, CliError> {
    let horizon = Horizon {
        min_age: req.min_age,
        allow_below_policy: req.allow_below_policy,
        max_clock_skew: req.max_clock_skew,
        earlier_cutoff: req.cutoff,
    };
    match sharded {
        ShardRequest::Plan { shards, out } => plan(collector, req, &horizon, *shards, out.as_ref()).await,
        ShardRequest::Apply { manifest, checkpoint_dir, only } => {
            apply(collector, req, &horizon, manifest, checkpoint_dir, *only).await
        }
    }
}

async fn plan(
    collector: &GarbageCollector<'_>,
    req: &GcRequest,
    horizon: &Horizon,
    shards: usize,
    out: Option<&OutputPath>,
) -> Result<ShardedReport, CliError> {
    // The folder (and the metrics file) are checked before planning: a typo costs nothing,
    // and nothing is ever written inside the lake or over files of another kind.
    if let Some(dir) = out {
        dir.prepare_folder(collector.store().root())?;
    }
    if let Some(metrics) = &req.metrics {
        metrics.check(collector.store().root(), lake::collect::output::DocumentKind::Metrics)?;
    }
    let settings = PlanSettings {
        inventory_page_size: req.list_page_size,
        memory_budget: share(req.memory_budget).1,
        list_streams: req.list_streams,
    };
    let started = std::time::Instant::now();
    let PlannedShards { plan, stats, clock } =
        collector.plan_sharded_with(horizon, &settings, shards, &req.incremental).await?;
    let plan_seconds = started.elapsed().as_secs_f64();
    if let Some(dir) = out {
        plan.save_to(dir)?;
    }
    let mode = match plan.plans.as_slice() {
        [only] => only.mode.clone(),
        _ => None,
    };
    let outcomes = plan
        .manifest
        .shards
        .iter()
        .zip(&plan.plans)
        .map(|(entry, p)| ShardOutcome {
            entry: entry.clone(),
            problems: p.problems.clone(),
            foreign_count: p.foreign_count,
            apply: None,
            resumed: false,
        })
        .collect();
    Ok(ShardedReport {
        manifest: plan.manifest,
        shards: outcomes,
        run: RunFacts {
            stats: Some(stats),
            clock,
            policy: collector.policy().clone(),
            plan_seconds,
            apply_seconds: 0.0,
        },
        written: out.map(|o| o.path().to_path_buf()),
        applying: false,
        mode,
    })
}

async fn apply(
    collector: &GarbageCollector<'_>,
    req: &GcRequest,
    horizon: &Horizon,
    manifest_path: &Path,
    checkpoint_dir: &str,
    only: Option<u64>,
) -> Result<ShardedReport, CliError> {
    let manifest = ShardManifest::load(manifest_path)?;
    let folder = manifest_path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let selected: Vec<u64> = match only {
        Some(i) if i >= manifest.count => {
            return Err(CliError::Gc(lake::collect::GcError::refused(
                lake::common::ErrorKind::ShardMismatch,
                format!(
                    "--shard {i}: the manifest has {} shards (0 to {}); nothing was deleted",
                    manifest.count,
                    manifest.count - 1
                ),
            )))
        }
        Some(i) => vec![i],
        None => (0..manifest.count).collect(),
    };
    if let Some(metrics) = &req.metrics {
        metrics.check(collector.store().root(), lake::collect::output::DocumentKind::Metrics)?;
    }
    // Before the first delete: every selected shard document against the manifest (its index,
    // digest, range and candidates), and every checkpoint outside the lake. An edited, swapped,
    // missing or foreign shard stops the run before any shard deletes anything.
    manifest.check_folder(folder, &selected)?;
    let checkpoints = selected.iter().map(|&i| shard_checkpoint(checkpoint_dir, i)).collect::<Result<Vec<_>, _>>()?;
    for at in &checkpoints {
        at.hold(collector.store())?;
    }
    let (_, clock) = collector.cutoff(&Horizon { earlier_cutoff: None, ..horizon.clone() }).await?;
    let started = std::time::Instant::now();
    let mut outcomes: Vec<ShardOutcome> = manifest.shards.iter().map(ShardOutcome::unapplied).collect();
    let mut mode = None;
    for (index, at) in selected.into_iter().zip(checkpoints) {
        let run = async {
            // The shard's own document, checked again as it is read; its checkpoint resumes
            // it, or a finished apply of an earlier plan there is replaced (never resumed in
            // its place), or an unfinished one of another plan refuses it.
            let plan = manifest.load_shard(folder, index)?;
            let done = collector.apply_shard(&manifest, &plan, horizon, &at, &req.apply).await?;
            let resumed = done.resumed;
            Ok::<_, CliError>((done, resumed))
        };
        let (done, resumed) = run.await.inspect_err(|_| {
            eprintln!(
                "lake gc: shard {index} of {} stopped; earlier shards keep what their checkpoints record; run the same command again to resume",
                manifest.count
            );
        })?;
        let outcome = &mut outcomes[index as usize];
        if manifest.count == 1 {
            mode = done.plan.mode.clone();
        }
        outcome.problems = done.plan.problems.clone();
        outcome.foreign_count = done.plan.foreign_count;
        outcome.apply = Some(done);
        outcome.resumed = resumed;
    }
    Ok(ShardedReport {
        manifest,
        shards: outcomes,
        run: RunFacts {
            stats: None,
            clock,
            policy: collector.policy().clone(),
            plan_seconds: 0.0,
            apply_seconds: started.elapsed().as_secs_f64(),
        },
        written: None,
        applying: true,
        mode,
    })
}

/// `CKDIR/shard-0000I.ckpt`: a local folder (which must exist) or `s3://bucket/prefix`.
fn shard_checkpoint(dir: &str, index: u64) -> Result<CheckpointLocation, CliError> {
    let name = shard_checkpoint_name(index);
    let text = if dir.contains("://") {
        format!("{}/{name}", dir.trim_end_matches('/'))
    } else {
        if !Path::new(dir).is_dir() {
            return Err(CliError::Usage(format!(
                "--checkpoint-dir {dir} is not a folder; create it first (outside the lake): it receives one checkpoint per shard"
            )));
        }
        Path::new(dir).join(&name).display().to_string()
    };
    Ok(CheckpointLocation::parse(&text)?)
}

impl ShardOutcome {
    fn unapplied(entry: &ShardEntry) -> Self {
        Self { entry: entry.clone(), problems: Vec::new(), foreign_count: 0, apply: None, resumed: false }
    }
}
