//! Apply: revalidate a plan against the journal, then delete page by page with a checkpoint.
//!
//! Order of one run:
//! 1. Load the checkpoint at PATH and its plan document (refusing either edited, a checkpoint
//!    of another format, or one bound to another plan than the one given), or create it from
//!    the plan, refusing a plan with incomplete lineage. The plan is persisted once, beside the
//!    checkpoint (`PATH.plan.json`), before the checkpoint and before any delete.
//! 2. A complete checkpoint is reported as is: a second apply is a no-op.
//! 3. Revalidate: read every table's lineage again (refuse if incomplete) and drop every
//!    not-yet-deleted candidate that a version newer than the plan's basis references
//!    (`revived`).
//! 4. Retry keys whose delete failed in an earlier run, then delete the remaining candidates
//!    in bounded pages, up to `concurrency` pages in flight; after each group, save the
//!    checkpoint (a small document: the plan is not rewritten). NotFound counts as done. Stop
//!    after `max_pages` pages when asked (an operator's budget, or a test's crash).
//!
//! Candidates are read in one sequential pass from where the checkpoint stopped
//! ([`crate::candidates::CandidateCursor`]), so a spilled candidate list is never loaded whole.

use crate::checkpoint::{ApplyCheckpoint, CheckpointLocation, LoadedCheckpoint};
use crate::deleter::{DeleteOutcome, ObjectDeleter};
use crate::error::ObjectsError;
use crate::failpoint;
use crate::plan::GcPlan;
use lake_engine::Engine;
use std::collections::{BTreeMap, BTreeSet};

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
}

impl Default for ApplyOptions {
    fn default() -> Self {
        Self { page_size: DEFAULT_PAGE_SIZE, max_pages: None, progress: None, concurrency: DEFAULT_CONCURRENCY }
    }
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
}

/// Applies `plan` (or resumes the apply recorded at `checkpoint_path`). See the module docs.
///
/// # Errors
/// [`ObjectsError::Checkpoint`] for a checkpoint bound to another plan or edited;
/// [`ObjectsError::LineageIncomplete`] when the plan or the current journal is incomplete;
/// engine and storage errors. Progress made before an error is in the checkpoint.
pub async fn apply(
    engine: &dyn Engine,
    deleter: &dyn ObjectDeleter,
    checkpoint_path: &CheckpointLocation,
    plan: Option<&GcPlan>,
    options: &ApplyOptions,
) -> Result<ApplyReport, ObjectsError> {
    let loaded = ApplyCheckpoint::load(checkpoint_path).await?;
    apply_loaded(engine, deleter, checkpoint_path, loaded, plan, options).await
}

/// [`apply`] with the checkpoint at `checkpoint_path` already loaded by the caller
/// ([`ApplyCheckpoint::load`]; `None` when there is none), so that a caller that inspects it
/// first (the CLI checks its root and horizon) reads the checkpoint and its plan once.
///
/// # Errors
/// As [`apply`].
pub async fn apply_loaded(
    engine: &dyn Engine,
    deleter: &dyn ObjectDeleter,
    checkpoint_path: &CheckpointLocation,
    loaded: Option<LoadedCheckpoint>,
    plan: Option<&GcPlan>,
    options: &ApplyOptions,
) -> Result<ApplyReport, ObjectsError> {
    let shown = checkpoint_path.display();
    let (mut cp, plan) = match (loaded, plan) {
        (Some(loaded), Some(p)) => {
            let digest = p.digest();
            if loaded.checkpoint.plan_digest != digest {
                return Err(ObjectsError::Checkpoint {
                    path: shown,
                    message: format!(
                        "it records the apply of plan {} but this run's plan is {digest}; resume with the same plan, or choose a new checkpoint path for a new plan",
                        loaded.checkpoint.plan_digest,
                    ),
                });
            }
            resume(loaded, checkpoint_path).await?
        }
        (Some(loaded), None) => resume(loaded, checkpoint_path).await?,
        (None, Some(p)) => {
            if !p.lineage_complete {
                return Err(ObjectsError::PlanIncomplete { problems: p.problems.clone() });
            }
            // The plan first (once, streamed), then the checkpoint bound to it: a crash between
            // the two leaves no checkpoint, and the next run writes both again.
            ApplyCheckpoint::persist_plan(p, checkpoint_path).await?;
            let cp = ApplyCheckpoint::new(p);
            cp.save(checkpoint_path).await?;
            failpoint::hit("apply.after_plan_persisted")?;
            (cp, p.clone())
        }
        (None, None) => {
            return Err(ObjectsError::Checkpoint {
                path: shown,
                message: "no checkpoint exists here and no plan was given".into(),
            })
        }
    };
    if cp.complete {
        return Ok(ApplyReport { checkpoint: cp, plan, pages: 0, was_complete: true });
    }
    revalidate(engine, &mut cp, &plan).await?;
    cp.save(checkpoint_path).await?;

    let page_size = options.page_size.clamp(1, DEFAULT_PAGE_SIZE);
    let mut pages = 0u64;
    let budget_left = |pages: u64| options.max_pages.is_none_or(|m| pages < m);
    // Retry earlier failures first.
    while !cp.failed.is_empty() && budget_left(pages) {
        let batch: Vec<String> = cp.failed.iter().take(page_size).cloned().collect();
        let outcomes = deleter.delete_batch(&batch).await?;
        let mut still_failed: Vec<String> = cp.failed[batch.len()..].to_vec();
        for (key, outcome) in batch.iter().zip(outcomes) {
            record(&mut cp, key, outcome, &mut still_failed);
        }
        let progressed = still_failed.len() < cp.failed.len();
        cp.failed = still_failed;
        pages += 1;
        cp.save(checkpoint_path).await?;
        if !progressed {
            break;
        }
    }
    let revived: BTreeSet<String> = cp.revived.iter().cloned().collect();
    let total = cp.candidates;
    let concurrency = options.concurrency.max(1);
    let mut cursor = plan.candidates.cursor(cp.next_index)?;
    while cp.next_index < total && budget_left(pages) {
        // Up to `concurrency` pages in flight; the checkpoint is saved after all of them.
        let mut batches: Vec<Vec<String>> = Vec::new();
        let mut index = cp.next_index;
        while index < total && batches.len() < concurrency && budget_left(pages + batches.len() as u64) {
            let mut batch = Vec::with_capacity(page_size);
            while index < total && batch.len() < page_size {
                let Some(candidate) = cursor.next_candidate()? else {
                    return Err(ObjectsError::Checkpoint {
                        path: shown,
                        message: format!(
                            "its plan ended at candidate {index} of the {total} it records; nothing more was deleted"
                        ),
                    });
                };
                if !revived.contains(&candidate.uri) {
                    batch.push(candidate.uri);
                }
                index += 1;
            }
            if !batch.is_empty() {
                batches.push(batch);
            }
        }
        let mut failed = std::mem::take(&mut cp.failed);
        if !batches.is_empty() {
            if let Err(e) = failpoint::hit("apply.mid_page") {
                // A crash half-way through a page: some keys deleted, nothing recorded.
                deleter.delete_batch(&batches[0][..batches[0].len() / 2]).await?;
                return Err(e);
            }
            let results = futures::future::join_all(batches.iter().map(|b| deleter.delete_batch(b))).await;
            failpoint::hit("apply.after_page")?;
            for (batch, outcomes) in batches.iter().zip(results) {
                for (key, outcome) in batch.iter().zip(outcomes?) {
                    record(&mut cp, key, outcome, &mut failed);
                }
                pages += 1;
            }
        }
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
    Ok(ApplyReport { checkpoint: cp, plan, pages, was_complete: false })
}

/// The progress and plan of a loaded checkpoint; a format-1 checkpoint's plan is first written
/// beside it, and the checkpoint saved again as format 2.
async fn resume(
    loaded: LoadedCheckpoint,
    checkpoint_path: &CheckpointLocation,
) -> Result<(ApplyCheckpoint, GcPlan), ObjectsError> {
    if !loaded.plan_persisted {
        ApplyCheckpoint::persist_plan(&loaded.plan, checkpoint_path).await?;
        loaded.checkpoint.save(checkpoint_path).await?;
    }
    Ok((loaded.checkpoint, loaded.plan))
}

fn record(cp: &mut ApplyCheckpoint, key: &str, outcome: DeleteOutcome, failed: &mut Vec<String>) {
    match outcome {
        DeleteOutcome::Deleted => cp.deleted += 1,
        DeleteOutcome::NotFound => cp.already_gone += 1,
        DeleteOutcome::Failed(message) => {
            tracing::warn!(key, %message, "delete failed; it stays pending for the next run");
            failed.push(key.to_string());
        }
    }
}

/// Drops candidates that versions newer than the plan's basis reference (one pass over the
/// candidates not yet attempted, only when such versions added references).
async fn revalidate(engine: &dyn Engine, cp: &mut ApplyCheckpoint, plan: &GcPlan) -> Result<(), ObjectsError> {
    let basis: BTreeMap<&str, u64> = plan.basis.iter().map(|b| (b.table.as_str(), b.version)).collect();
    let tables = engine.tables().await?;
    let mut problems = tables.problems.clone();
    let mut added: BTreeSet<String> = BTreeSet::new();
    for location in &tables.tables {
        let lineage = engine.lineage(location).await?;
        if !lineage.problems.is_empty() {
            problems.extend(lineage.problems.clone());
            continue;
        }
        let since = basis.get(location.name.as_str()).copied().unwrap_or(0);
        if lineage.latest_version > since {
            match engine.references_added_after(location, since).await {
                Ok(ids) => added.extend(ids.into_iter().map(|i| i.uri)),
                // A version committed after its lineage was read, its sidecar not yet written.
                Err(lake_engine::EngineError::Lineage { problems: found, .. }) => problems.extend(found),
                Err(e) => return Err(e.into()),
            }
        }
    }
    if !problems.is_empty() {
        return Err(ObjectsError::LineageIncomplete { problems });
    }
    if added.is_empty() {
        return Ok(());
    }
    let already: BTreeSet<String> = cp.revived.iter().cloned().collect();
    let mut revived = Vec::new();
    let mut cursor = plan.candidates.cursor(cp.next_index)?;
    while let Some(c) = cursor.next_candidate()? {
        if added.contains(&c.uri) && !already.contains(&c.uri) {
            tracing::info!(key = %c.uri, "candidate revived: a version newer than the plan references it");
            revived.push(c.uri);
        }
    }
    cp.revived.extend(revived);
    Ok(())
}
