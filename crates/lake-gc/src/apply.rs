//! Apply: revalidate a plan against the journal, then delete page by page with a checkpoint.
//!
//! Order of one run:
//! 1. Load the checkpoint at PATH and its plan document (refusing either edited, a checkpoint
//!    of another format, or one bound to another plan than the one given), or create it from
//!    the plan, refusing a plan with incomplete lineage. The plan is persisted once, beside the
//!    checkpoint (`PATH.plan.json`), before the checkpoint and before any delete.
//! 2. A complete checkpoint is reported as is: a second apply is a no-op.
//! 3. Revalidate ([`crate::revalidation`]): check that every table only moved forward from the
//!    plan's basis (else stop with a named problem) and read what its new versions added;
//!    again before every later group of deletes. Read the live keys of every table as the
//!    journal shows them now (`crate::live_keys`), merged against the candidates in key order.
//!    A candidate that is live now, or that a new version references, is `revived`, never
//!    deleted, on a first attempt as on a retry.
//! 4. Retry keys whose delete failed in an earlier run, then delete the remaining candidates
//!    in bounded pages, up to `concurrency` pages in flight; after each group, save the
//!    checkpoint (a small document: the plan is not rewritten). NotFound counts as done. Stop
//!    after `max_pages` pages when asked (an operator's budget, or a test's crash).
//!
//! Counting (`docs/gc.md`, "What apply reports"): `deleted` is a key a request of this apply
//! removed: a local removal; on S3 a key DeleteObjects removed, exactly where the store honours
//! conditional deletes ([`lake_store::s3_requests::S3Requests::delete_objects`]), else a key it
//! confirms deleted on its first request (the plan listed it, so it existed when planned; such a
//! store cannot say whether another client removed it in between). `already_gone` is a key known
//! absent before its request (a file not found, a conditional delete that found no key).
//! `absent` is a key a store that ignores conditional deletes confirms gone on a request that
//! may repeat an earlier one of this apply: a retry of a failed key, or the first group of a run
//! that resumed a checkpoint (the interrupted run may have sent it and not saved the outcome). `failed` keys are those the
//! store did not delete (S3: an `<Error>` for the key, or a request that failed as a whole); they
//! stay pending and are retried first by the next run.
//!
//! Candidates are read in one sequential pass from where the checkpoint stopped
//! ([`crate::candidates::CandidateCursor`]), so a spilled candidate list is never loaded whole.

use crate::checkpoint::{ApplyCheckpoint, HeldCheckpoint, LoadedCheckpoint};
use crate::deleter::{DeleteOutcome, ObjectDeleter};
use crate::error::GcError;
use crate::live_keys::{live_now, LiveKeys};
use crate::plan::GcPlan;
use crate::revalidation::Revalidation;
use lake_engine::{Engine, LineageProblem};
use lake_store::failpoint;
use std::collections::BTreeSet;

/// Default keys per delete page: S3's DeleteObjects limit.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// Default delete pages in flight.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// Called after every saved page with (candidates attempted, candidates in the plan).
#[derive(Clone)]
pub struct ProgressHook(pub std::sync::Arc<dyn Fn(u64, u64) + Send + Sync>);

impl std::fmt::Debug for ProgressHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressHook")
    }
}

/// How to apply.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// Keys per delete page (1 to 1000).
    pub page_size: usize,
    /// Stop after this many pages in this run (the checkpoint records where).
    pub max_pages: Option<u64>,
    /// Progress reporting (a progress bar in the CLI).
    pub progress: Option<ProgressHook>,
    /// Delete pages in flight at once (>= 1); the checkpoint is saved after each group.
    pub concurrency: usize,
    /// Bytes of live keys held in memory while apply checks candidates against them; past it
    /// they spill to sorted runs in the temporary folder.
    pub memory_budget: usize,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            max_pages: None,
            progress: None,
            concurrency: DEFAULT_CONCURRENCY,
            memory_budget: lake_engine::budget::share(lake_engine::budget::DEFAULT_MEMORY_BUDGET).1,
        }
    }
}

/// A finished apply of another plan, or an apply of another lake, that a new plan's apply
/// replaced at the same checkpoint path (see [`crate::collector::GarbageCollector::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplacedApply {
    /// The digest of the plan the checkpoint recorded.
    pub plan_digest: String,
    /// That plan's cutoff.
    pub cutoff: crate::plan_time::PlanTime,
    /// True when that plan was of another lake (one deleted and created again at this root,
    /// or a checkpoint copied from another lake), finished or not.
    pub other_lake: bool,
}

/// What one apply run did, plus the checkpoint's totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyReport {
    /// The checkpoint after this run.
    pub checkpoint: ApplyCheckpoint,
    /// The plan applied (read back from the plan document beside the checkpoint on a resume).
    pub plan: GcPlan,
    /// Delete pages sent in this run.
    pub pages: u64,
    /// True when this run found the checkpoint already complete.
    pub was_complete: bool,
    /// True when the checkpoint already recorded this plan's apply (this run resumed it).
    pub resumed: bool,
    /// The finished apply of another plan this run's plan replaced at the checkpoint path.
    pub replaced: Option<ReplacedApply>,
    /// The key of the GC state recorded under the root for this complete apply
    /// ([`crate::state::GcState`]), when one was (a complete apply of a whole plan made by a
    /// collector); the next run plans incrementally from it.
    pub state: Option<String>,
}

/// Applies `plan`, or resumes the apply recorded at `checkpoint_path`, whose checkpoint the
/// caller loaded ([`ApplyCheckpoint::load`]; `None` when there is none), so that a caller that
/// inspects it first ([`crate::collector::GarbageCollector`] checks its plan's lake, horizon and
/// cutoff) reads the checkpoint and its plan once. See the module documentation.
///
/// A checkpoint that records another plan than `plan`: when that apply is complete, `plan`
/// replaces it (the finished checkpoint is removed first, then the plan document and a new
/// checkpoint are written: a crash in between leaves no checkpoint, and the next run starts
/// again); when it is not, the run is refused naming both plans, and nothing is deleted.
///
/// # Errors
/// [`GcError::Checkpoint`] for a checkpoint bound to another, unfinished plan, or edited,
/// or a plan naming a key apply never deletes (checked for every candidate before the first
/// delete); [`GcError::LineageIncomplete`] when the plan or the current journal is
/// incomplete; [`GcError::JournalPending`] when a version committed since the plan has no
/// journal entry yet; engine and storage errors. Progress made before an error is in the
/// checkpoint.
pub(crate) async fn apply_loaded(
    engine: &dyn Engine,
    deleter: &dyn ObjectDeleter,
    checkpoint_path: &HeldCheckpoint,
    loaded: Option<LoadedCheckpoint>,
    plan: Option<&GcPlan>,
    options: &ApplyOptions,
) -> Result<ApplyReport, GcError> {
    let shown = checkpoint_path.display();
    let mut replaced = None;
    let loaded = match (loaded, plan) {
        (Some(loaded), Some(p)) => {
            let digest = p.digest()?;
            if loaded.checkpoint.plan_digest == digest {
                Some(loaded)
            } else if loaded.checkpoint.complete || loaded.other_lake {
                // A finished apply, or one of another lake (deleted and created again at this
                // root): nothing of it can be resumed here, so the new plan takes its place.
                tracing::info!(old = %loaded.checkpoint.plan_digest, new = %digest, other_lake = loaded.other_lake, "the checkpoint records a finished apply of another plan, or an apply of another lake; the new plan replaces it");
                replaced = Some(ReplacedApply {
                    plan_digest: loaded.checkpoint.plan_digest,
                    cutoff: loaded.plan.cutoff,
                    other_lake: loaded.other_lake,
                });
                None
            } else {
                let c = &loaded.checkpoint;
                return Err(GcError::Checkpoint {
                    path: shown,
                    message: format!(
                        "it records the apply of plan {} (cutoff {}), which is not finished ({} of {} candidates attempted, {} failed), but this run's plan is {digest} (cutoff {}); nothing was deleted. Finish the recorded apply first (resume it: an apply at checkpoint {} without a plan), then apply the new plan; or apply the new plan with another checkpoint path",
                        c.plan_digest,
                        loaded.plan.cutoff,
                        c.next_index,
                        c.candidates,
                        c.failed.len(),
                        p.cutoff,
                        checkpoint_path.display(),
                    ),
                });
            }
        }
        (loaded, _) => loaded,
    };
    // A run that picks up an existing checkpoint may follow a run interrupted after it sent a
    // group of deletes and before it saved their outcomes.
    let resumed = loaded.is_some();
    let (mut cp, plan) = match (loaded, plan) {
        (Some(loaded), _) => (loaded.checkpoint, loaded.plan),
        (None, Some(p)) => {
            if !p.lineage_complete {
                return Err(GcError::PlanIncomplete { problems: p.problems.clone() });
            }
            // Every candidate before anything is written or deleted.
            p.check_candidates(0).map_err(|m| GcError::Checkpoint {
                path: shown.clone(),
                message: format!("{m}. Nothing was deleted; make a new plan"),
            })?;
            if replaced.is_some() {
                // The finished checkpoint first: then a crash leaves no checkpoint (the old plan
                // document beside it is replaced below, as a plan document), never a checkpoint
                // bound to a plan document it does not match.
                checkpoint_path.remove().await?;
            }
            // The plan first (once, streamed), then the checkpoint bound to it: a crash between
            // the two leaves no checkpoint, and the next run writes both again.
            ApplyCheckpoint::persist_plan(p, checkpoint_path).await?;
            let cp = ApplyCheckpoint::new(p)?;
            cp.save(checkpoint_path).await?;
            failpoint::hit("apply.after_plan_persisted")?;
            (cp, p.clone())
        }
        (None, None) => {
            return Err(GcError::Checkpoint {
                path: shown,
                message: "no checkpoint exists here and no plan was given".into(),
            })
        }
    };
    if cp.complete {
        return Ok(ApplyReport { checkpoint: cp, plan, pages: 0, was_complete: true, resumed, replaced, state: None });
    }
    // What is left of a resumed plan, checked whole before its first delete.
    plan.check_candidates(cp.next_index).map_err(|m| GcError::Checkpoint {
        path: shown.clone(),
        message: format!("{m}. Nothing more was deleted; make a new plan"),
    })?;
    // The lineage now against the plan's basis; again before every later group of deletes.
    let mut lineage = Revalidation::start(engine, &plan).await.map_err(|e| writer_in_flight(e, &plan))?;
    let mut checked = true;
    // Every key is also checked against the live keys as the journal shows them now, not only
    // against what versions since the plan added: a plan document can be edited and its digest
    // recomputed by anyone.
    let mut live = live_now(engine, options.memory_budget).await.map_err(|e| writer_in_flight(e, &plan))?;
    let mut revived: BTreeSet<String> = cp.revived.iter().cloned().collect();
    cp.failed.sort();

    let page_size = options.page_size.clamp(1, DEFAULT_PAGE_SIZE);
    let mut pages = 0u64;
    let budget_left = |pages: u64| options.max_pages.is_none_or(|m| pages < m);
    // Retry earlier failures first, each checked like a first attempt.
    while !cp.failed.is_empty() && budget_left(pages) {
        if !std::mem::take(&mut checked) {
            lineage.refresh().await.map_err(|e| writer_in_flight(e, &plan))?;
        }
        let taken: Vec<String> = cp.failed.iter().take(page_size).cloned().collect();
        let mut still_failed: Vec<String> = cp.failed[taken.len()..].to_vec();
        let batch = keep_unrevived(taken, &lineage, &mut live, &mut revived, &mut cp)?;
        let outcomes = if batch.is_empty() { Vec::new() } else { deleter.delete_batch(&batch).await? };
        for (key, outcome) in batch.iter().zip(outcomes) {
            record(&mut cp, key, outcome, &mut still_failed, Attempt::Repeated);
        }
        let progressed = still_failed.len() < cp.failed.len();
        cp.failed = still_failed;
        pages += 1;
        cp.save(checkpoint_path).await?;
        if !progressed {
            break;
        }
    }
    let total = cp.candidates;
    let concurrency = options.concurrency.max(1);
    let mut cursor = plan.candidates.cursor(cp.next_index)?;
    // The first group of a resumed run may repeat the deletes of the interrupted run.
    let mut attempt = if resumed { Attempt::Repeated } else { Attempt::First };
    while cp.next_index < total && budget_left(pages) {
        if !std::mem::take(&mut checked) {
            lineage.refresh().await.map_err(|e| writer_in_flight(e, &plan))?;
        }
        // Up to `concurrency` pages in flight; the checkpoint is saved after all of them.
        let mut batches: Vec<Vec<String>> = Vec::new();
        let mut index = cp.next_index;
        while index < total && batches.len() < concurrency && budget_left(pages + batches.len() as u64) {
            let mut batch = Vec::with_capacity(page_size);
            while index < total && batch.len() < page_size {
                let Some(candidate) = cursor.next_candidate()? else {
                    return Err(GcError::Checkpoint {
                        path: shown,
                        message: format!(
                            "its plan ended at candidate {index} of the {total} it records; nothing more was deleted"
                        ),
                    });
                };
                // A plan document carries its own digest, which anyone can recompute: the library
                // still deletes only collectable keys minted before the plan's cutoff.
                if candidate.key.minted_at().is_none_or(|t| t >= lineage.cutoff()) {
                    return Err(GcError::Checkpoint {
                        path: shown,
                        message: format!(
                            "its plan names `{}`, which is not a managed object minted before the plan's cutoff {}; GC never deletes it. Nothing more was deleted; make a new plan",
                            candidate.key, plan.cutoff
                        ),
                    });
                }
                // A shard deletes only keys of its range (shards applied at once never meet).
                if let Some(shard) = plan.shard.as_ref().filter(|s| !s.range.contains(candidate.key.as_str())) {
                    return Err(GcError::Checkpoint {
                        path: shown,
                        message: format!(
                            "its plan is shard {} covering {} but names `{}`, outside it; nothing more was deleted; make a new plan",
                            shard.index, shard.range, candidate.key
                        ),
                    });
                }
                batch.push(candidate.key.into_string());
                index += 1;
            }
            let batch = keep_unrevived(batch, &lineage, &mut live, &mut revived, &mut cp)?;
            if !batch.is_empty() {
                batches.push(batch);
            }
        }
        let mut failed = std::mem::take(&mut cp.failed);
        if !batches.is_empty() {
            let results = futures::future::join_all(batches.iter().map(|b| deleter.delete_batch(b))).await;
            failpoint::hit("apply.after_page")?;
            for (batch, outcomes) in batches.iter().zip(results) {
                for (key, outcome) in batch.iter().zip(outcomes?) {
                    record(&mut cp, key, outcome, &mut failed, attempt);
                }
                pages += 1;
            }
        }
        attempt = Attempt::First;
        cp.failed = failed;
        cp.next_index = index;
        failpoint::hit("apply.before_checkpoint_write")?;
        cp.save(checkpoint_path).await?;
        if let Some(hook) = &options.progress {
            (hook.0)(cp.next_index, total);
        }
    }
    cp.complete = cp.next_index >= total && cp.failed.is_empty();
    cp.save(checkpoint_path).await?;
    Ok(ApplyReport { checkpoint: cp, plan, pages, was_complete: false, resumed, replaced, state: None })
}

/// A lineage refusal whose every problem is a version committed since `plan` without its
/// journal entry (a missing sidecar, or the gap it leaves below a newer version) is
/// [`GcError::JournalPending`]: a writer between its Lance commit and its journal entry
/// looks exactly like that, and rerunning the same command once it finished is the fix, not a
/// repair that would race it. Any other refusal is returned as it is.
fn writer_in_flight(error: GcError, plan: &GcPlan) -> GcError {
    let GcError::LineageIncomplete { problems } = &error else { return error };
    let since_plan =
        |table: &str, version: u64| plan.basis.iter().find(|b| b.table == table).is_none_or(|b| version > b.version);
    let mut pending = Vec::new();
    for problem in problems {
        match problem {
            LineageProblem::MissingSidecar { table, version } | LineageProblem::ParentGap { table, version, .. }
                if since_plan(table, *version) =>
            {
                if !pending.contains(&(table.clone(), *version)) {
                    pending.push((table.clone(), *version));
                }
            }
            _ => return error,
        }
    }
    if pending.is_empty() {
        error
    } else {
        GcError::JournalPending { pending }
    }
}

/// The keys of `batch` (ascending, and after every key asked before) that are not live now and
/// that no version committed since the plan references; the others are recorded as revived
/// (once) and never deleted.
fn keep_unrevived(
    batch: Vec<String>,
    lineage: &Revalidation<'_>,
    live: &mut LiveKeys,
    revived: &mut BTreeSet<String>,
    cp: &mut ApplyCheckpoint,
) -> Result<Vec<String>, GcError> {
    let mut keep = Vec::with_capacity(batch.len());
    for key in batch {
        if revived.contains(&key) {
            continue;
        }
        if live.is_live(&key)? || lineage.revives(&key) {
            tracing::info!(key = %key, "candidate revived: a retained version references it now");
            revived.insert(key.clone());
            cp.revived.push(key);
            continue;
        }
        keep.push(key);
    }
    Ok(keep)
}

/// Whether a delete request may repeat an earlier one of this apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// No earlier request of this apply carried the key, as far as the checkpoint shows.
    First,
    /// An earlier request may have: a retry of a failed key, or the first group after a resume
    /// (an interrupted run may have sent it and not saved what happened).
    Repeated,
}

/// Counts `outcome` in the checkpoint. A store that confirms a key gone without saying whether
/// it existed ([`DeleteOutcome::Absent`]: S3 stores that ignore conditional deletes) counts
/// `deleted` on the key's first request: the plan listed it, so it existed when planned, and the
/// store confirms the delete. On a request that may repeat an earlier one it counts `absent`:
/// the earlier request may have removed it.
fn record(cp: &mut ApplyCheckpoint, key: &str, outcome: DeleteOutcome, failed: &mut Vec<String>, attempt: Attempt) {
    match outcome {
        DeleteOutcome::Deleted => cp.deleted += 1,
        DeleteOutcome::NotFound => cp.already_gone += 1,
        DeleteOutcome::Absent if attempt == Attempt::First => cp.deleted += 1,
        DeleteOutcome::Absent => cp.absent += 1,
        DeleteOutcome::Skipped(reason) => {
            tracing::warn!(key, %reason, "left alone; not retried");
            cp.skipped.push(crate::checkpoint::SkippedKey { key: key.into(), reason });
        }
        DeleteOutcome::Failed(message) => {
            tracing::warn!(key, %message, "delete failed; it stays pending for the next run");
            failed.push(key.to_string());
        }
    }
}
