//! `lake._lake`: the native module behind the Python package `lake` (`python/lake/__init__.py`
//! wraps it in the documented API). Every call that does I/O releases the GIL; long calls (GC
//! apply, appends) poll for signals every 100 ms so that Ctrl-C stops them at an await point,
//! which for apply leaves the checkpoint of the last finished group (resumable).
//!
//! Arrow data crosses the boundary through the Arrow C stream interface (`__arrow_c_stream__`
//! PyCapsules, arrow's `pyarrow` feature): pyarrow tables and readers, polars frames and any
//! other producer, without copies. Reports come back as JSON text that the Python layer decodes.

mod errors;
mod marking;
mod reader;

use arrow::ffi_stream::ArrowArrayStreamReader;
use arrow::pyarrow::{PyArrowType, ToPyArrow};
use arrow_array::{Array, RecordBatchReader};
use errors::{Committed, Failure, Kind};
use lake_common::DataLocationBuilder;
use lake_lance::update::Assignment;
use lake_lance::LanceEngine;
use lake_objects::apply::ApplyOptions;
use lake_objects::checkpoint::{ApplyCheckpoint, CheckpointLocation};
use lake_objects::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_objects::descriptor::LakeDescriptor;
use lake_objects::layout::validate_table_name;
use lake_objects::plan::GcPlan;
use lake_objects::shards::{ShardManifest, ShardSpec, ShardedPlan};
use lake_objects::writer::{ManagedObject, ManagedObjectWriter};
use lake_objects::LakeStore;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The process's Tokio runtime (Lance needs one), built by the process that uses it.
///
/// A process forked from one that used lake (`multiprocessing`'s default start method on
/// Linux) inherits the runtime's memory but none of its worker threads: a task spawned on it
/// would never run. The runtime is therefore owned by a process id; a call from another process
/// builds a fresh one, and the inherited one is leaked (dropping it would wait for threads that
/// do not exist in this process). Lance's own CPU runtime resets itself in a forked child
/// (`pthread_atfork`, lance-core `utils::tokio`).
fn runtime() -> Result<&'static tokio::runtime::Runtime, Failure> {
    static RUNTIME: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut current = RUNTIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, rt)) = *current {
        if owner == pid {
            return Ok(rt);
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(Kind::Lake, format!("cannot start the I/O runtime: {e}")))?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *current = Some((pid, rt));
    Ok(rt)
}

/// Runs `future` on the runtime with the GIL released, checking for signals (Ctrl-C) every
/// 100 ms; a signal drops the future at its next await point and raises in Python.
fn run<T: Send + 'static>(
    py: Python<'_>,
    future: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<T> {
    let rt = runtime()?;
    let mut handle = rt.spawn(future);
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut handle).await.ok() }));
        match done {
            Some(Ok(result)) => return result.map_err(|f| f.into_py(py)),
            Some(Err(e)) => return Err(Failure::task_failed(&e).into_py(py)),
            None => {
                if let Err(interrupted) = py.check_signals() {
                    handle.abort();
                    return Err(interrupted);
                }
            }
        }
    }
}

/// Runs a write (a call that may commit a table version) on the runtime with the GIL released.
/// Ctrl-C never drops it mid-way: dropped between its Lance commit and its journal entry, a
/// write would leave a version GC refuses until `lake refs repair`. A signal instead sets
/// `stop`, which ends the write's input stream (when it has one) so that Lance commits nothing
/// if it has not read it all, waits for the write to end, and raises the interrupt with a note
/// saying whether the write committed.
fn run_write<T: Send + 'static>(
    py: Python<'_>,
    future: impl Future<Output = Result<T, Failure>> + Send + 'static,
    stop: Option<Arc<AtomicBool>>,
) -> PyResult<T> {
    let rt = runtime()?;
    let mut handle = rt.spawn(future);
    let mut interrupted: Option<PyErr> = None;
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut handle).await.ok() }));
        let result = match done {
            Some(Ok(result)) => result,
            Some(Err(e)) => Err(Failure::task_failed(&e)),
            None => {
                if interrupted.is_none() {
                    if let Err(signal) = py.check_signals() {
                        if let Some(stop) = &stop {
                            stop.store(true, Ordering::SeqCst);
                        }
                        interrupted = Some(signal);
                    }
                }
                continue;
            }
        };
        let Some(signal) = interrupted else { return result.map_err(|f| f.into_py(py)) };
        // Whether anything was committed is what the write's own error states.
        let note = match &result {
            Ok(_) => {
                "lake: the write had committed (and was journaled) when the interrupt arrived; see Table.versions()"
                    .to_string()
            }
            Err(f) => match f.committed() {
                Committed::Nothing => "lake: the write was stopped; nothing was committed".to_string(),
                Committed::Version(v) => format!("lake: the write was stopped after it committed version {v}: {f}"),
                Committed::Unknown => format!("lake: the write was stopped; its commit's outcome is unknown: {f}"),
            },
        };
        let _ = signal.value(py).call_method1("add_note", (note,));
        return Err(signal);
    }
}

fn parse_duration(what: &str, text: &str) -> Result<Duration, Failure> {
    humantime::parse_duration(text).map_err(|e| {
        Failure::new(Kind::Policy, format!("{what} `{text}` is not a duration ({e}); write e.g. `7d`, `12h`, `90s`"))
    })
}

/// An opened lake: its root and storage options, and its store as opened by this process.
#[pyclass(module = "lake._lake", frozen)]
struct NativeLake {
    root: String,
    options: HashMap<String, String>,
    /// The process that opened `store`, and the store.
    opened: Mutex<(u32, LakeStore)>,
}

impl NativeLake {
    fn new(root: &str, options: HashMap<String, String>, store: LakeStore) -> Self {
        Self { root: root.to_string(), options, opened: Mutex::new((std::process::id(), store)) }
    }

    /// The lake's store. In a process forked from the one that opened it, the store is opened
    /// again: its HTTP connections belong to the parent's runtime (see [`runtime`]).
    fn store(&self) -> Result<LakeStore, Failure> {
        let pid = std::process::id();
        let mut opened = self.opened.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if opened.0 != pid {
            *opened = (pid, open_store(&self.root, &self.options)?);
        }
        Ok(opened.1.clone())
    }

    fn engine(&self) -> Result<LanceEngine, Failure> {
        Ok(LanceEngine::new(self.store()?))
    }

    /// The collector of this lake, with its engine.
    fn gc_parts(&self) -> Result<(LakeStore, LanceEngine), Failure> {
        let store = self.store()?;
        Ok((store.clone(), LanceEngine::new(store)))
    }
}

/// The store of `root`, with S3 `storage_options` over the `AWS_*` environment.
fn open_store(root: &str, storage_options: &HashMap<String, String>) -> Result<LakeStore, Failure> {
    Ok(LakeStore::open_with_options(root, storage_options)?)
}

/// Creates a lake at `root` with GC policy floor `min_age` (humantime), or opens it when it
/// exists with the same floor.
#[pyfunction]
#[pyo3(signature = (root, min_age, storage_options=None))]
fn init(
    py: Python<'_>,
    root: &str,
    min_age: &str,
    storage_options: Option<HashMap<String, String>>,
) -> PyResult<NativeLake> {
    let min_age = parse_duration("min_age", min_age)?;
    let options = storage_options.unwrap_or_default();
    let store = open_store(root, &options)?;
    let opened = store.clone();
    run(py, async move { Ok(LakeDescriptor::create(&opened, min_age).await.map(|_| ())?) })?;
    Ok(NativeLake::new(root, options, store))
}

/// Opens the lake at `root`.
#[pyfunction]
#[pyo3(signature = (root, storage_options=None))]
fn open(py: Python<'_>, root: &str, storage_options: Option<HashMap<String, String>>) -> PyResult<NativeLake> {
    let options = storage_options.unwrap_or_default();
    let store = open_store(root, &options)?;
    let opened = store.clone();
    run(py, async move { Ok(LakeDescriptor::load(&opened).await.map(|_| ())?) })?;
    Ok(NativeLake::new(root, options, store))
}

fn location_json(o: &ManagedObject) -> (String, Vec<u8>, u64) {
    (o.key.clone(), o.sha256.to_vec(), o.size)
}

/// A batch source from any Arrow stream producer, its plain DataLocation columns marked
/// ([`marking`]).
fn source(data: PyArrowType<ArrowArrayStreamReader>, stop: &Arc<AtomicBool>) -> Box<dyn RecordBatchReader + Send> {
    Box::new(marking::MarkingReader::new(Box::new(data.0), stop.clone()))
}

/// `value` as JSON text.
fn json<T: serde::Serialize>(value: &T) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::new(Kind::Lake, format!("cannot encode the report: {e}")))
}

#[pymethods]
impl NativeLake {
    /// The lake's root as lake spells it.
    #[getter]
    fn root(&self) -> PyResult<String> {
        Ok(self.store()?.root().to_string())
    }

    /// Uploads `data` (bytes) as a managed object named `name`: `(uri, sha256, size)`.
    fn put_bytes(&self, py: Python<'_>, name: String, data: Vec<u8>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        run(py, async move { Ok(writer.upload(&name, &data[..]).await.map(|o| location_json(&o))?) })
    }

    /// Uploads the file at `path` as a managed object named `name` (default: the file's name),
    /// streamed from disk (memory: a few parts of 8 MiB, whatever the file's size).
    #[pyo3(signature = (path, name=None))]
    fn put_file(
        &self,
        py: Python<'_>,
        path: std::path::PathBuf,
        name: Option<String>,
    ) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        run(py, async move {
            let uploaded = match name {
                None => writer.upload_file(&path).await,
                Some(name) => match tokio::fs::File::open(&path).await {
                    Ok(file) => writer.upload(&name, file).await,
                    Err(e) => Err(lake_objects::ObjectsError::Io { path: path.display().to_string(), source: e }),
                },
            };
            Ok(uploaded.map(|o| location_json(&o))?)
        })
    }

    /// Uploads what the binary file object `reader` gives (its `read(n)` until it returns no
    /// bytes) as a managed object named `name`, streamed: a few chunks of 1 MiB in memory.
    fn put_reader(&self, py: Python<'_>, name: String, reader: Py<PyAny>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store()?);
        let stream = reader::PyFileReader::start(runtime()?, reader);
        run(py, async move { Ok(writer.upload(&name, stream).await.map(|o| location_json(&o))?) })
    }

    /// Appends (or, with `overwrite`, replaces the content with) the rows of an Arrow stream.
    /// Returns the commit as JSON.
    fn write(
        &self,
        py: Python<'_>,
        table: String,
        data: PyArrowType<ArrowArrayStreamReader>,
        overwrite: bool,
    ) -> PyResult<String> {
        let engine = self.engine()?;
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write = async move {
            let out =
                if overwrite { engine.overwrite(&table, batches).await } else { engine.append(&table, batches).await };
            Ok(commit_json(&out?))
        };
        run_write(py, write, Some(stop))
    }

    /// Upserts the rows of an Arrow stream keyed on `on`.
    fn merge_insert(
        &self,
        py: Python<'_>,
        table: String,
        data: PyArrowType<ArrowArrayStreamReader>,
        on: Vec<String>,
    ) -> PyResult<String> {
        let engine = self.engine()?;
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write = async move { Ok(commit_json(&engine.upsert(&table, &on, batches).await?)) };
        run_write(py, write, Some(stop))
    }

    /// Deletes the rows matching `predicate`; `None` when none matched.
    fn delete(&self, py: Python<'_>, table: String, predicate: String) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.delete(&table, &predicate).await?.map(|o| commit_json(&o))) }, None)
    }

    /// Sets `assignments` (`COLUMN=EXPRESSION`) on the rows matching `predicate`.
    fn update(
        &self,
        py: Python<'_>,
        table: String,
        assignments: Vec<String>,
        predicate: Option<String>,
    ) -> PyResult<Option<String>> {
        let parsed = assignments
            .iter()
            .map(|a| a.parse::<Assignment>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::from)?;
        let engine = self.engine()?;
        run_write(
            py,
            async move { Ok(engine.update(&table, &parsed, predicate.as_deref()).await?.map(|o| commit_json(&o))) },
            None,
        )
    }

    /// Compacts the table's fragments; `None` when there was nothing to compact.
    fn compact(&self, py: Python<'_>, table: String) -> PyResult<Option<String>> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.compact(&table).await?.map(|o| commit_json(&o))) }, None)
    }

    /// Removes versions older than `older_than` (humantime); `(versions, bytes)` removed.
    fn cleanup(&self, py: Python<'_>, table: String, older_than: String) -> PyResult<(u64, u64)> {
        let older = parse_duration("older_than", &older_than)?;
        let engine = self.engine()?;
        run_write(
            py,
            async move {
                let o = engine.cleanup(&table, older).await?;
                Ok((o.old_versions, o.bytes_removed))
            },
            None,
        )
    }

    /// Tags `version`.
    fn tag(&self, py: Python<'_>, table: String, name: String, version: u64) -> PyResult<()> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(engine.create_tag(&table, version, &name).await?) }, None)
    }

    /// Restores `version` as a new latest version.
    fn restore(&self, py: Python<'_>, table: String, version: u64) -> PyResult<String> {
        let engine = self.engine()?;
        run_write(py, async move { Ok(commit_json(&engine.restore(&table, version).await?)) }, None)
    }

    /// The versions of a table as JSON (`[{version, timestamp, tags, journaled}]`).
    fn versions(&self, py: Python<'_>, table: String) -> PyResult<String> {
        let engine = self.engine()?;
        run(py, async move { json(&engine.versions(&table).await?) })
    }

    /// The dataset URI of a table (for `lance.dataset`); `InputError` for an invalid table name
    /// (`../x` would name a folder outside the lake's tables).
    fn dataset_uri(&self, table: String) -> PyResult<String> {
        validate_table_name(&table).map_err(Failure::from)?;
        Ok(self.engine()?.dataset_uri(&table))
    }

    /// The lake's storage options for Lance: its resolved S3 settings (the `AWS_*` environment
    /// read when the lake was opened, overlaid by its storage options); empty for a local root.
    fn storage_options(&self) -> PyResult<HashMap<String, String>> {
        Ok(self.store()?.storage_options().clone())
    }

    /// A GC dry run at horizon `min_age`: the plan document (JSON) and its digest.
    fn gc_plan(&self, py: Python<'_>, min_age: String, allow_below_policy: bool) -> PyResult<(String, String)> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.plan(&horizon, &PlanSettings::default()).await?;
            Ok((text(planned.plan.to_document())?, planned.plan.digest()))
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
        let options = apply_options(page_size, max_pages)?;
        let (store, engine) = self.gc_parts()?;
        let location = CheckpointLocation::parse_for(&checkpoint, &store).map_err(Failure::from)?;
        let plan = match plan {
            Some(document) => Some(GcPlan::from_document(document.as_bytes(), "the plan").map_err(Failure::input)?),
            None => None,
        };
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let no_checkpoint = || {
                Failure::new(
                    Kind::Policy,
                    format!("no checkpoint at {checkpoint} to resume and no plan given; pass the plan to apply"),
                )
            };
            // The horizon is the plan's; resuming without one, the checkpoint's plan's (checked
            // against the lake's policy floor like any horizon).
            let min_age = match &plan {
                Some(plan) => plan.min_age_seconds,
                None => match ApplyCheckpoint::load(&location).await? {
                    Some(loaded) => loaded.plan.min_age_seconds,
                    None => return Err(no_checkpoint()),
                },
            };
            let horizon = horizon(Duration::from_secs(min_age), allow_below_policy);
            // With a plan, `apply` resumes a checkpoint of that same plan and refuses one of
            // another (never resuming an older plan in its place); without, `resume`.
            let report = match &plan {
                Some(plan) => gc.apply(plan, &horizon, &location, &options).await?,
                None => gc.resume(&horizon, &location, &options).await?.ok_or_else(no_checkpoint)?,
            };
            json(&report.checkpoint)
        })
    }

    /// The coordinator's step of a sharded plan: the cutoff and `shards` key ranges, as a
    /// `ShardSpec` JSON document for the workers.
    fn gc_shard_spec(
        &self,
        py: Python<'_>,
        min_age: String,
        shards: usize,
        allow_below_policy: bool,
    ) -> PyResult<String> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            json(&gc.shard_ranges(&horizon, shards).await?)
        })
    }

    /// A worker's step: the plan document of shard `index` of the spec (JSON).
    fn gc_plan_shard(&self, py: Python<'_>, spec: String, index: usize, allow_below_policy: bool) -> PyResult<String> {
        let spec: ShardSpec = serde_json::from_str(&spec)
            .map_err(|e| Failure::new(Kind::Input, format!("the shard spec is not a ShardSpec document: {e}")))?;
        let horizon = horizon(Duration::from_secs(spec.min_age_seconds), allow_below_policy);
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.plan_shard(&horizon, &PlanSettings::default(), &spec, index).await?;
            text(planned.plan.to_document())
        })
    }

    /// Every shard in this process: the manifest document and the shards' plan documents.
    fn gc_plan_sharded(
        &self,
        py: Python<'_>,
        min_age: String,
        shards: usize,
        allow_below_policy: bool,
    ) -> PyResult<(String, Vec<String>)> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let (store, engine) = self.gc_parts()?;
        run(py, async move {
            let gc = GarbageCollector::open(store, &engine).await?;
            let planned = gc.plan_sharded(&horizon, &PlanSettings::default(), shards).await?;
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
            return Err(Failure::new(Kind::Policy, message).into());
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
        let options = apply_options(page_size, max_pages)?;
        let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(Failure::input)?;
        let plan = GcPlan::from_document(shard.as_bytes(), "the shard plan").map_err(Failure::input)?;
        let (store, engine) = self.gc_parts()?;
        let location = CheckpointLocation::parse_for(&checkpoint, &store).map_err(Failure::from)?;
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

    /// Compares the journal with full scans of every retained version; the report as JSON.
    fn refs_verify(&self, py: Python<'_>) -> PyResult<String> {
        let engine = self.engine()?;
        run(py, async move { json(&engine.verify_refs(&[]).await?) })
    }
}

/// Apply's options: `page_size` keys per delete request (1 to 1000, S3 DeleteObjects' limit), at
/// most `max_pages` pages in this call (at least 1).
fn apply_options(page_size: usize, max_pages: Option<u64>) -> Result<ApplyOptions, Failure> {
    if !(1..=1000).contains(&page_size) {
        return Err(Failure::new(Kind::Input, format!("page_size {page_size} must be 1 to 1000 keys")));
    }
    if max_pages == Some(0) {
        return Err(Failure::new(Kind::Input, "max_pages 0 would delete nothing; give at least 1, or None".into()));
    }
    Ok(ApplyOptions { page_size, max_pages, ..ApplyOptions::default() })
}

fn horizon(min_age: Duration, allow_below_policy: bool) -> Horizon {
    Horizon { allow_below_policy, ..Horizon::new(min_age) }
}

fn text(bytes: Vec<u8>) -> Result<String, Failure> {
    String::from_utf8(bytes).map_err(|e| Failure::new(Kind::Lake, format!("a document is not UTF-8: {e}")))
}

/// The manifest document and the shards' plan documents of `plan`.
fn sharded_documents(plan: &ShardedPlan) -> Result<(String, Vec<String>), Failure> {
    let shards = plan.plans.iter().map(|p| text(p.to_document())).collect::<Result<Vec<_>, _>>()?;
    Ok((text(plan.manifest.to_document())?, shards))
}

/// Writes a plan document into the file `path`, under the library's rules for written documents
/// (`lake_objects::output`): outside the plan's lake, over nothing or another plan (any regular
/// file when `force`), atomically.
#[pyfunction]
#[pyo3(signature = (path, document, force=false))]
fn plan_save(path: std::path::PathBuf, document: String, force: bool) -> PyResult<()> {
    let plan = GcPlan::from_document(document.as_bytes(), "the plan").map_err(Failure::input)?;
    Ok(plan.save(&lake_objects::output::OutputPath::new(path).force(force)).map_err(Failure::from)?)
}

/// Writes a sharded plan (manifest and shard documents) into the folder `dir` (created when its
/// parent exists), under the library's rules for written documents: outside the plan's lake,
/// into an empty folder or over another sharded plan (anything when `force`).
#[pyfunction]
#[pyo3(signature = (dir, manifest, shards, force=false))]
fn sharded_save(dir: std::path::PathBuf, manifest: String, shards: Vec<String>, force: bool) -> PyResult<()> {
    let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(Failure::input)?;
    let plans = shards
        .iter()
        .enumerate()
        .map(|(i, d)| GcPlan::from_document(d.as_bytes(), &format!("shard document {i}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::input)?;
    let folder = lake_objects::output::OutputPath::new(dir).force(force);
    Ok(ShardedPlan { manifest, plans }.save_to(&folder).map_err(Failure::from)?)
}

/// Reads the sharded plan saved in the folder `dir`: the manifest and shard documents, each
/// checked against its digest.
#[pyfunction]
fn sharded_load(dir: std::path::PathBuf) -> PyResult<(String, Vec<String>)> {
    Ok(sharded_documents(&ShardedPlan::load(&dir).map_err(Failure::from)?)?)
}

/// Checks a plan document (what `Plan.save` or `lake gc --out` wrote): its digest, and the
/// document as text. `InputError` for a document that is not a sealed plan.
#[pyfunction]
fn plan_digest(document: String, shown: String) -> PyResult<String> {
    Ok(GcPlan::from_document(document.as_bytes(), &shown).map_err(Failure::input)?.digest())
}

/// A commit as JSON (`{table, version, rows, references_added, references_removed, rebased}`).
fn commit_json(o: &lake_lance::CommitOutcome) -> String {
    serde_json::to_string(o).unwrap_or_default()
}

/// A pyarrow array of the DataLocation type (marked) from `(uri, sha256, size)` tuples.
#[pyfunction]
fn locations(py: Python<'_>, items: Vec<(String, Vec<u8>, u64)>) -> PyResult<Py<PyAny>> {
    let mut builder = DataLocationBuilder::new();
    for (uri, sha, size) in items {
        let sha: [u8; 32] = sha
            .as_slice()
            .try_into()
            .map_err(|_| Failure::new(Kind::Input, format!("the sha256 of `{uri}` has {} bytes, not 32", sha.len())))?;
        builder.append(&uri, sha, size);
    }
    let array = builder.finish();
    Ok(array.to_data().to_pyarrow(py)?.unbind())
}

/// The native module.
#[pymodule]
fn _lake(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeLake>()?;
    m.add_function(wrap_pyfunction!(init, m)?)?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(locations, m)?)?;
    m.add_function(wrap_pyfunction!(plan_save, m)?)?;
    m.add_function(wrap_pyfunction!(sharded_save, m)?)?;
    m.add_function(wrap_pyfunction!(sharded_load, m)?)?;
    m.add_function(wrap_pyfunction!(plan_digest, m)?)?;
    Ok(())
}
