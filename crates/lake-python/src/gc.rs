//! GC: dry runs (whole or sharded), applies and resumes, and the plan documents' files. The
//! rules live in `lake_gc`; this module only carries documents across as JSON text.

use crate::errors::Failure;
use crate::json;
use crate::lake::NativeLake;
use crate::runtime::{parse_duration, run};
use ::lake::collect::apply::ApplyOptions;
use ::lake::collect::checkpoint::CheckpointLocation;
use ::lake::collect::collector::{GarbageCollector, Horizon, PlanSettings};
use ::lake::collect::plan::GcPlan;
use ::lake::collect::run::{PlanSource, RunRequest};
use ::lake::collect::shards::{ShardManifest, ShardSpec, ShardedPlan};
use ::lake::collect::state::IncrementalPolicy;
use ::lake::collect::GcError;
use ::lake::common::ErrorKind;
use pyo3::prelude::*;
use std::time::Duration;

#[pymethods]
impl NativeLake {
    /// A GC dry run at horizon `min_age`: the plan document (JSON) and its digest. Incremental
    /// when the lake's GC state allows (`lake_gc::state`), full with `full` or when the last full
    /// plan is older than `full_every` (humantime; default 7 days).
    #[pyo3(signature = (min_age, allow_below_policy, full=false, full_every=None))]
    fn gc_plan(
        &self,
        py: Python<'_>,
        min_age: String,
        allow_below_policy: bool,
        full: bool,
        full_every: Option<String>,
    ) -> PyResult<(String, String)> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let incremental = incremental_policy(full, full_every)?;
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.run(&RunRequest { incremental, ..RunRequest::dry_run(horizon) }).await?;
            Ok((text(planned.plan.to_document()?)?, planned.plan.digest()?))
        })
    }

    /// Applies a plan document (JSON) with its checkpoint at `checkpoint` (a path, or an
    /// `s3://` URL opened with this lake's S3 settings, outside the lake), or resumes the apply
    /// the checkpoint records (with the plan's `min_age`, when no plan is given): `page_size`
    /// keys per delete request, at most `max_pages` pages in this call. Returns the checkpoint as
    /// JSON.
    #[pyo3(signature = (plan, checkpoint, allow_below_policy, page_size=1000, max_pages=None))]
    fn gc_apply(
        &self,
        py: Python<'_>,
        plan: Option<String>,
        checkpoint: String,
        allow_below_policy: bool,
        page_size: usize,
        max_pages: Option<u64>,
    ) -> PyResult<String> {
        let Apply { options, store, engine, location } = self.apply_parts(&checkpoint, page_size, max_pages)?;
        let plan = match plan {
            Some(document) => Some(GcPlan::from_document(document.as_bytes(), "the plan").map_err(Failure::input)?),
            None => None,
        };
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            // The horizon is the plan's; resuming without one, the checkpoint's plan's (the
            // collector reads it). The decision (resume, replace, refuse) is the collector's.
            let min_age = plan.as_ref().map_or(0, |plan| plan.min_age_seconds);
            let request = RunRequest {
                checkpoint: Some(&location),
                plan: plan.as_ref().map_or(PlanSource::Resume, PlanSource::Given),
                apply: options,
                ..RunRequest::dry_run(horizon(Duration::from_secs(min_age), allow_below_policy))
            };
            let done = gc.run(&request).await?;
            match &done.apply {
                Some(report) => json(&report.checkpoint),
                None => Err(Failure::new(ErrorKind::Internal, "an apply with a checkpoint reported no apply".into())),
            }
        })
    }

    /// The coordinator's step of a sharded plan: the cutoff and `shards` key ranges, as a
    /// `ShardSpec` JSON document for the workers; one incremental shard over every key when
    /// the lake's GC state allows (unless `full`; `full_every` as for `gc_plan`).
    #[pyo3(signature = (min_age, shards, allow_below_policy, full=false, full_every=None))]
    fn gc_shard_spec(
        &self,
        py: Python<'_>,
        min_age: String,
        shards: usize,
        allow_below_policy: bool,
        full: bool,
        full_every: Option<String>,
    ) -> PyResult<String> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let incremental = incremental_policy(full, full_every)?;
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            json(&gc.shard_ranges_with(&horizon, shards, &incremental).await?)
        })
    }

    /// A worker's step: the plan document of shard `index` of the spec (JSON).
    fn gc_plan_shard(&self, py: Python<'_>, spec: String, index: usize, allow_below_policy: bool) -> PyResult<String> {
        let spec: ShardSpec = serde_json::from_str(&spec).map_err(|e| {
            Failure::new(ErrorKind::InvalidInput, format!("the shard spec is not a ShardSpec document: {e}"))
        })?;
        let horizon = horizon(Duration::from_secs(spec.min_age_seconds), allow_below_policy);
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.plan_shard(&horizon, &PlanSettings::default(), &spec, index).await?;
            text(planned.plan.to_document()?)
        })
    }

    /// Every shard in this process: the manifest document and the shards' plan documents; one
    /// incremental shard when the lake's GC state allows (unless `full`).
    #[pyo3(signature = (min_age, shards, allow_below_policy, full=false, full_every=None))]
    fn gc_plan_sharded(
        &self,
        py: Python<'_>,
        min_age: String,
        shards: usize,
        allow_below_policy: bool,
        full: bool,
        full_every: Option<String>,
    ) -> PyResult<(String, Vec<String>)> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let incremental = incremental_policy(full, full_every)?;
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.plan_sharded_with(&horizon, &PlanSettings::default(), shards, &incremental).await?;
            sharded_documents(&planned.plan)
        })
    }

    /// The manifest document binding the shards' plan documents (made by `gc_plan_shard`).
    fn gc_assemble(&self, documents: Vec<String>) -> PyResult<String> {
        let plans = documents
            .iter()
            .enumerate()
            .map(|(i, d)| GcPlan::from_document(d.as_bytes(), &format!("shard document {i}")))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::input)?;
        let manifest = ShardManifest::assemble(&plans).map_err(Failure::from)?;
        let root = self.store()?.root().to_string();
        if manifest.root != root {
            let message = format!("the shards belong to lake {}, not {root}", manifest.root);
            return Err(Failure::from(GcError::refused(ErrorKind::BoundToRoot, message)).into());
        }
        Ok(text(manifest.to_document())?)
    }

    /// Applies one shard (its plan document, bound to the manifest document) with its
    /// checkpoint at `checkpoint`, or resumes the apply the checkpoint records. Returns the
    /// checkpoint as JSON.
    #[pyo3(signature = (manifest, shard, checkpoint, allow_below_policy, page_size=1000, max_pages=None))]
    #[allow(clippy::too_many_arguments)]
    fn gc_apply_shard(
        &self,
        py: Python<'_>,
        manifest: String,
        shard: String,
        checkpoint: String,
        allow_below_policy: bool,
        page_size: usize,
        max_pages: Option<u64>,
    ) -> PyResult<String> {
        let Apply { options, store, engine, location } = self.apply_parts(&checkpoint, page_size, max_pages)?;
        let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(Failure::input)?;
        let plan = GcPlan::from_document(shard.as_bytes(), "the shard plan").map_err(Failure::input)?;
        let horizon = horizon(Duration::from_secs(manifest.min_age_seconds), allow_below_policy);
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let report = match gc.resume_shard(&manifest, &horizon, &location, &options).await? {
                Some(report) => report,
                None => gc.apply_shard(&manifest, &plan, &horizon, &location, &options).await?,
            };
            json(&report.checkpoint)
        })
    }
}

/// What an apply call works with.
struct Apply {
    options: ApplyOptions,
    store: ::lake::store::LakeStore,
    engine: ::lake::lance::LanceEngine,
    location: CheckpointLocation,
}

impl NativeLake {
    /// The options (see [`apply_options`]), the lake's store and engine, and the checkpoint
    /// `checkpoint` (a path, or an `s3://` URL opened with this lake's S3 settings).
    fn apply_parts(&self, checkpoint: &str, page_size: usize, max_pages: Option<u64>) -> Result<Apply, Failure> {
        let options = apply_options(page_size, max_pages)?;
        let (store, engine) = self.gc_parts()?;
        let location = CheckpointLocation::parse_for(checkpoint, &store)?;
        Ok(Apply { options, store, engine, location })
    }
}

/// Apply's options: `page_size` keys per delete request (1 to 1000, S3 DeleteObjects' limit), at
/// most `max_pages` pages in this call (at least 1).
fn apply_options(page_size: usize, max_pages: Option<u64>) -> Result<ApplyOptions, Failure> {
    if !(1..=1000).contains(&page_size) {
        return Err(Failure::new(ErrorKind::InvalidInput, format!("page_size {page_size} must be 1 to 1000 keys")));
    }
    if max_pages == Some(0) {
        return Err(Failure::new(
            ErrorKind::InvalidInput,
            "max_pages 0 would delete nothing; give at least 1, or None".into(),
        ));
    }
    Ok(ApplyOptions { page_size, max_pages, ..ApplyOptions::default() })
}

fn horizon(min_age: Duration, allow_below_policy: bool) -> Horizon {
    Horizon { allow_below_policy, ..Horizon::new(min_age) }
}

fn text(bytes: Vec<u8>) -> Result<String, Failure> {
    String::from_utf8(bytes).map_err(|e| Failure::new(ErrorKind::Corrupt, format!("a document is not UTF-8: {e}")))
}

/// The manifest document and the shards' plan documents of `plan`.
fn sharded_documents(plan: &ShardedPlan) -> Result<(String, Vec<String>), Failure> {
    let shards = plan.plans.iter().map(|p| text(p.to_document()?)).collect::<Result<Vec<_>, _>>()?;
    Ok((text(plan.manifest.to_document())?, shards))
}

/// Writes a plan document into the file `path`, under the library's rules for written documents
/// (`::lake::collect::output`): outside the plan's lake, over nothing or another plan (any regular
/// file when `force`), atomically.
#[pyfunction]
#[pyo3(signature = (path, document, force=false))]
pub(crate) fn plan_save(path: std::path::PathBuf, document: String, force: bool) -> PyResult<()> {
    let plan = GcPlan::from_document(document.as_bytes(), "the plan").map_err(Failure::input)?;
    Ok(plan.save(&::lake::collect::output::OutputPath::new(path).force(force)).map_err(Failure::from)?)
}

/// Writes a sharded plan (manifest and shard documents) into the folder `dir` (created when its
/// parent exists), under the library's rules for written documents: outside the plan's lake,
/// into an empty folder or over another sharded plan (anything when `force`).
#[pyfunction]
#[pyo3(signature = (dir, manifest, shards, force=false))]
pub(crate) fn sharded_save(
    dir: std::path::PathBuf,
    manifest: String,
    shards: Vec<String>,
    force: bool,
) -> PyResult<()> {
    let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(Failure::input)?;
    let plans = shards
        .iter()
        .enumerate()
        .map(|(i, d)| GcPlan::from_document(d.as_bytes(), &format!("shard document {i}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::input)?;
    let folder = ::lake::collect::output::OutputPath::new(dir).force(force);
    Ok(ShardedPlan { manifest, plans }.save_to(&folder).map_err(Failure::from)?)
}

/// Reads the sharded plan saved in the folder `dir`: the manifest and shard documents, each
/// checked against its digest.
#[pyfunction]
pub(crate) fn sharded_load(dir: std::path::PathBuf) -> PyResult<(String, Vec<String>)> {
    Ok(sharded_documents(&ShardedPlan::load(&dir).map_err(Failure::from)?)?)
}

/// Checks a plan document (what `Plan.save` or `lake gc --out` wrote): its digest, and the
/// document as text. `InputError` for a document that is not a sealed plan.
#[pyfunction]
pub(crate) fn plan_digest(document: String, shown: String) -> PyResult<String> {
    let plan = GcPlan::from_document(document.as_bytes(), &shown).map_err(Failure::input)?;
    Ok(plan.digest().map_err(Failure::from)?)
}

/// The incremental policy of a plan: always full with `full`, else incremental when the lake's
/// GC state allows, with a full plan every `full_every` (humantime; default 7 days).
fn incremental_policy(full: bool, full_every: Option<String>) -> PyResult<IncrementalPolicy> {
    let mut policy = if full { IncrementalPolicy::full() } else { IncrementalPolicy::default() };
    if let Some(every) = full_every {
        policy.full_every = parse_duration("full_every", &every)?;
    }
    Ok(policy)
}
