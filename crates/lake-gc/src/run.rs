//! One GC run, for every caller: whether it resumes an apply a checkpoint records, replaces a
//! finished one, or plans anew, decided here once ([`GarbageCollector::run`]) rather than by
//! each caller (the CLI's `lake gc`, the Python package's `Gc.plan` and `Gc.apply`).
//!
//! The decision, by where the plan comes from ([`PlanSource`]):
//! - [`PlanSource::Given`] (a saved plan): applied at the checkpoint, which resumes it when the
//!   checkpoint records it, replaces a finished apply of another plan, and refuses an
//!   unfinished one ([`GarbageCollector::apply`]).
//! - [`PlanSource::Resume`]: the apply the checkpoint records is resumed, at the horizon of its
//!   own plan; a finished one is reported as it is. Nothing at the checkpoint is refused.
//! - [`PlanSource::New`]: with a checkpoint, an unfinished apply there is resumed first (a new
//!   plan never starts over an unfinished one); otherwise a plan is made, saved where asked,
//!   and applied at the checkpoint (replacing a finished apply there). Without a checkpoint,
//!   it is a dry run.

use crate::apply::{ApplyOptions, ApplyReport};
use crate::checkpoint::{ApplyCheckpoint, CheckpointLocation};
use crate::collector::{GarbageCollector, Horizon, PlanSettings, Planned};
use crate::error::GcError;
use crate::output::OutputPath;
use crate::plan::GcPlan;
use crate::planner::PlanStats;
use crate::state::IncrementalPolicy;
use lake_store::clock::ClockReading;
use std::time::{Duration, Instant};

/// Where a run's plan comes from.
#[derive(Debug, Clone, Copy)]
pub enum PlanSource<'a> {
    /// A plan made earlier (a saved plan document): apply it.
    Given(&'a GcPlan),
    /// The plan of the apply the checkpoint records: resume it.
    Resume,
    /// A plan made by this run (unless an unfinished apply at the checkpoint is resumed).
    New,
}

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    /// The horizon. For [`PlanSource::Resume`], `min_age` is the recorded plan's (this one's is
    /// not used); every other field applies.
    pub horizon: Horizon,
    /// Where the plan comes from.
    pub plan: PlanSource<'a>,
    /// Where the apply's progress is recorded; `None`: a dry run (only with [`PlanSource::New`]).
    pub checkpoint: Option<&'a CheckpointLocation>,
    /// Where a new plan is saved before it is applied (outside the lake root, over nothing or a
    /// plan), if anywhere.
    pub out: Option<&'a OutputPath>,
    /// How the apply deletes.
    pub apply: ApplyOptions,
    /// How a new plan reads the lake; its `memory_budget` is GC's share of the run's one budget
    /// (`lake_engine::budget::share`; the engine holds the other share).
    pub settings: PlanSettings,
    /// Whether a new plan may be incremental (from the GC state the last complete apply
    /// recorded) and its bounds; default: incremental when a valid state allows, a full plan at
    /// least every 7 days ([`GarbageCollector::plan_with`]). The plan's `mode` says what was done.
    pub incremental: IncrementalPolicy,
}

impl<'a> RunRequest<'a> {
    /// A dry run at `horizon` with the default settings.
    pub fn dry_run(horizon: Horizon) -> Self {
        Self {
            horizon,
            plan: PlanSource::New,
            checkpoint: None,
            out: None,
            apply: ApplyOptions::default(),
            settings: PlanSettings::default(),
            incremental: IncrementalPolicy::default(),
        }
    }
}

/// What a run did.
#[derive(Debug)]
pub struct RunOutcome {
    /// The plan: made by this run, given, or the one the resumed apply records.
    pub plan: GcPlan,
    /// Planning counters, when this run made the plan.
    pub stats: Option<PlanStats>,
    /// The clock reading the run's checks used (for a new plan, the one its cutoff came from).
    pub clock: ClockReading,
    /// The apply, when there was a checkpoint.
    pub apply: Option<ApplyReport>,
    /// True when the run resumed an apply the checkpoint already recorded.
    pub resumed: bool,
    /// Time spent planning (0 when no plan was made).
    pub plan_time: Duration,
    /// Time spent applying (0 for a dry run).
    pub apply_time: Duration,
}

impl GarbageCollector<'_> {
    /// Runs GC as `request` asks (the module documentation gives the decision).
    ///
    /// # Errors
    /// [`GcError::Checkpoint`] for a given plan or a resume without a checkpoint, or a resume
    /// with nothing recorded at it; as [`GarbageCollector::cutoff`], [`GarbageCollector::plan`]
    /// and [`GarbageCollector::apply`] otherwise. Nothing is deleted by a run that fails before
    /// its apply.
    pub async fn run(&self, request: &RunRequest<'_>) -> Result<RunOutcome, GcError> {
        let mut horizon = request.horizon.clone();
        let need_checkpoint = |what: &str| GcError::Checkpoint {
            path: "(none)".into(),
            message: format!("{what} needs a checkpoint to record its apply's progress; nothing was deleted"),
        };
        if let PlanSource::Resume = request.plan {
            let checkpoint = request.checkpoint.ok_or_else(|| need_checkpoint("resuming an apply"))?;
            let Some(loaded) = ApplyCheckpoint::load(checkpoint).await? else {
                return Err(nothing_to_resume(checkpoint));
            };
            horizon.min_age = Duration::from_secs(loaded.plan.min_age_seconds);
        }
        // The reading reported with a given or resumed plan; every apply checks its own.
        let (_, clock) = self.cutoff(&horizon).await?;
        let outcome = |plan, stats, apply, resumed, plan_time, apply_time| RunOutcome {
            plan,
            stats,
            clock,
            apply,
            resumed,
            plan_time,
            apply_time,
        };
        match request.plan {
            PlanSource::Given(plan) => {
                let checkpoint = request.checkpoint.ok_or_else(|| need_checkpoint("a given plan"))?;
                let started = Instant::now();
                let done = self.apply(plan, &horizon, checkpoint, &request.apply).await?;
                let resumed = done.resumed;
                Ok(outcome(plan.clone(), None, Some(done), resumed, Duration::ZERO, started.elapsed()))
            }
            PlanSource::Resume => {
                let checkpoint = request.checkpoint.ok_or_else(|| need_checkpoint("resuming an apply"))?;
                let started = Instant::now();
                let done = self.resume(&horizon, checkpoint, &request.apply).await?;
                let done = done.ok_or_else(|| nothing_to_resume(checkpoint))?;
                Ok(outcome(done.plan.clone(), None, Some(done), true, Duration::ZERO, started.elapsed()))
            }
            PlanSource::New => {
                if let Some(checkpoint) = request.checkpoint {
                    let started = Instant::now();
                    if let Some(done) = self.resume_unfinished(&horizon, checkpoint, &request.apply).await? {
                        return Ok(outcome(
                            done.plan.clone(),
                            None,
                            Some(done),
                            true,
                            Duration::ZERO,
                            started.elapsed(),
                        ));
                    }
                }
                let planning = Instant::now();
                let Planned { plan, stats, clock } =
                    self.plan_with(&horizon, &request.settings, &request.incremental).await?;
                let plan_time = planning.elapsed();
                if let Some(out) = request.out {
                    plan.save(out)?;
                }
                let applying = Instant::now();
                let apply = match request.checkpoint {
                    Some(checkpoint) => Some(self.apply(&plan, &horizon, checkpoint, &request.apply).await?),
                    None => None,
                };
                let apply_time = if apply.is_some() { applying.elapsed() } else { Duration::ZERO };
                Ok(RunOutcome { plan, stats: Some(stats), clock, apply, resumed: false, plan_time, apply_time })
            }
        }
    }
}

/// The refusal of a resume with nothing recorded at `checkpoint`.
fn nothing_to_resume(checkpoint: &CheckpointLocation) -> GcError {
    GcError::Checkpoint {
        path: checkpoint.display(),
        message: "there is no apply recorded here to resume, and no plan was given; give the plan to apply".into(),
    }
}
