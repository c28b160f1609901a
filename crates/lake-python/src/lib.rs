//! `lake._lake`: the native module behind the Python package `lake` (`python/lake/__init__.py`
//! wraps it in the documented API). Every call that does I/O releases the GIL; long calls (GC
//! apply, appends) poll for signals every 100 ms so that Ctrl-C stops them at an await point,
//! which for apply leaves the checkpoint of the last finished group (resumable).
//!
//! Arrow data crosses the boundary through the Arrow C stream interface (`__arrow_c_stream__`
//! PyCapsules, arrow's `pyarrow` feature): pyarrow tables and readers, polars frames and any
//! other producer, without copies. Reports come back as JSON text that the Python layer decodes.

mod marking;

use arrow::ffi_stream::ArrowArrayStreamReader;
use arrow::pyarrow::{PyArrowType, ToPyArrow};
use arrow_array::{Array, RecordBatchReader};
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
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

create_exception!(_lake, LakeError, PyException, "Any error of lake; `transient` says whether retrying can help.");
create_exception!(
    _lake,
    GuardError,
    LakeError,
    "The publication guard refused a reference to an object too old to publish."
);
create_exception!(
    _lake,
    PolicyError,
    LakeError,
    "A GC safety rule refused the call (policy floor, clock skew, binding of a plan)."
);
create_exception!(
    _lake,
    LineageError,
    LakeError,
    "The journal cannot account for a table's versions; GC refuses until repaired."
);
create_exception!(_lake, StorageError, LakeError, "The store failed; `transient` says whether retrying can help.");

/// The process's Tokio runtime (Lance needs one).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| LakeError::new_err(format!("cannot start the I/O runtime: {e}")))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// A Python exception for `error`, of the class its kind calls for, with `transient` set.
fn to_py(error: &(dyn std::error::Error + 'static), transient: bool, kind: Kind) -> PyErr {
    let message = error.to_string();
    let err = match kind {
        Kind::Guard => GuardError::new_err(message),
        Kind::Policy => PolicyError::new_err(message),
        Kind::Lineage => LineageError::new_err(message),
        Kind::Storage => StorageError::new_err(message),
        Kind::Other => LakeError::new_err(message),
    };
    Python::attach(|py| {
        let _ = err.value(py).setattr("transient", transient);
    });
    err
}

enum Kind {
    Guard,
    Policy,
    Lineage,
    Storage,
    Other,
}

fn objects_err(e: lake_objects::ObjectsError) -> PyErr {
    use lake_objects::ObjectsError as E;
    let kind = match &e {
        E::Policy(_) | E::Root { .. } | E::Output { .. } => Kind::Policy,
        E::PlanIncomplete { .. } | E::JournalPending { .. } => Kind::Lineage,
        E::Storage { .. } | E::Io { .. } => Kind::Storage,
        _ => Kind::Other,
    };
    let transient = e.is_transient();
    to_py(&e, transient, kind)
}

fn engine_err(e: lake_lance::LanceEngineError) -> PyErr {
    use lake_lance::LanceEngineError as E;
    let kind = match &e {
        E::Guard { .. } => Kind::Guard,
        E::Objects(lake_objects::ObjectsError::Storage { .. }) => Kind::Storage,
        _ => Kind::Other,
    };
    let transient = e.is_transient();
    to_py(&e, transient, kind)
}

/// Runs `future` on the runtime with the GIL released, checking for signals (Ctrl-C) every
/// 100 ms; a signal drops the future at its next await point and raises in Python.
fn run<T: Send + 'static>(py: Python<'_>, future: impl Future<Output = PyResult<T>> + Send + 'static) -> PyResult<T> {
    let rt = runtime()?;
    let mut handle = rt.spawn(future);
    loop {
        let done = py
            .detach(|| rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut handle).await.ok() }));
        match done {
            Some(Ok(result)) => return result,
            Some(Err(e)) => return Err(LakeError::new_err(format!("the operation's task failed: {e}"))),
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
    future: impl Future<Output = PyResult<T>> + Send + 'static,
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
            Some(Err(e)) => Err(LakeError::new_err(format!("the operation's task failed: {e}"))),
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
        let Some(signal) = interrupted else { return result };
        let note = match &result {
            Ok(_) => {
                "lake: the write had committed (and was journaled) when the interrupt arrived; see Table.versions()"
            }
            Err(_) => "lake: the write was stopped; nothing was committed",
        };
        let _ = signal.value(py).call_method1("add_note", (note,));
        return Err(signal);
    }
}

fn parse_duration(what: &str, text: &str) -> PyResult<Duration> {
    humantime::parse_duration(text).map_err(|e| {
        PolicyError::new_err(format!("{what} `{text}` is not a duration ({e}); write e.g. `7d`, `12h`, `90s`"))
    })
}

/// An opened lake: its store and engine.
#[pyclass(module = "lake._lake", frozen)]
struct NativeLake {
    store: LakeStore,
}

impl NativeLake {
    fn engine(&self) -> LanceEngine {
        LanceEngine::new(self.store.clone())
    }
}

/// The store of `root`, with S3 `storage_options` over the `AWS_*` environment.
fn open_store(root: &str, storage_options: Option<HashMap<String, String>>) -> PyResult<LakeStore> {
    LakeStore::open_with_options(root, &storage_options.unwrap_or_default()).map_err(objects_err)
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
    let store = open_store(root, storage_options)?;
    let opened = store.clone();
    run(py, async move { LakeDescriptor::create(&opened, min_age).await.map(|_| ()).map_err(objects_err) })?;
    Ok(NativeLake { store })
}

/// Opens the lake at `root`.
#[pyfunction]
#[pyo3(signature = (root, storage_options=None))]
fn open(py: Python<'_>, root: &str, storage_options: Option<HashMap<String, String>>) -> PyResult<NativeLake> {
    let store = open_store(root, storage_options)?;
    let opened = store.clone();
    run(py, async move { LakeDescriptor::load(&opened).await.map(|_| ()).map_err(objects_err) })?;
    Ok(NativeLake { store })
}

fn location_json(o: &ManagedObject) -> (String, Vec<u8>, u64) {
    (o.key.clone(), o.sha256.to_vec(), o.size)
}

/// A batch source from any Arrow stream producer, its plain DataLocation columns marked
/// ([`marking`]).
fn source(data: PyArrowType<ArrowArrayStreamReader>, stop: &Arc<AtomicBool>) -> Box<dyn RecordBatchReader + Send> {
    Box::new(marking::MarkingReader::new(Box::new(data.0), stop.clone()))
}

#[pymethods]
impl NativeLake {
    /// The lake's root as lake spells it.
    #[getter]
    fn root(&self) -> String {
        self.store.root().to_string()
    }

    /// Uploads `data` (bytes) as a managed object named `name`: `(uri, sha256, size)`.
    fn put_bytes(&self, py: Python<'_>, name: String, data: Vec<u8>) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store.clone());
        run(py, async move { writer.upload(&name, &data[..]).await.map(|o| location_json(&o)).map_err(objects_err) })
    }

    /// Uploads the file at `path` (streamed) as a managed object named after it.
    fn put_file(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<(String, Vec<u8>, u64)> {
        let writer = ManagedObjectWriter::new(self.store.clone());
        run(py, async move { writer.upload_file(&path).await.map(|o| location_json(&o)).map_err(objects_err) })
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
        let engine = self.engine();
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write = async move {
            let out =
                if overwrite { engine.overwrite(&table, batches).await } else { engine.append(&table, batches).await };
            out.map(|o| commit_json(&o)).map_err(engine_err)
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
        let engine = self.engine();
        let stop = Arc::new(AtomicBool::new(false));
        let batches = source(data, &stop);
        let write =
            async move { engine.upsert(&table, &on, batches).await.map(|o| commit_json(&o)).map_err(engine_err) };
        run_write(py, write, Some(stop))
    }

    /// Deletes the rows matching `predicate`; `None` when none matched.
    fn delete(&self, py: Python<'_>, table: String, predicate: String) -> PyResult<Option<String>> {
        let engine = self.engine();
        run_write(
            py,
            async move { engine.delete(&table, &predicate).await.map(|o| o.map(|o| commit_json(&o))).map_err(engine_err) },
            None,
        )
    }

    /// Sets `assignments` (`COLUMN=EXPRESSION`) on the rows matching `predicate`.
    fn update(
        &self,
        py: Python<'_>,
        table: String,
        assignments: Vec<String>,
        predicate: Option<String>,
    ) -> PyResult<Option<String>> {
        let parsed =
            assignments.iter().map(|a| a.parse::<Assignment>()).collect::<Result<Vec<_>, _>>().map_err(engine_err)?;
        let engine = self.engine();
        run_write(
            py,
            async move {
                engine
                    .update(&table, &parsed, predicate.as_deref())
                    .await
                    .map(|o| o.map(|o| commit_json(&o)))
                    .map_err(engine_err)
            },
            None,
        )
    }

    /// Compacts the table's fragments; `None` when there was nothing to compact.
    fn compact(&self, py: Python<'_>, table: String) -> PyResult<Option<String>> {
        let engine = self.engine();
        run_write(
            py,
            async move { engine.compact(&table).await.map(|o| o.map(|o| commit_json(&o))).map_err(engine_err) },
            None,
        )
    }

    /// Removes versions older than `older_than` (humantime); `(versions, bytes)` removed.
    fn cleanup(&self, py: Python<'_>, table: String, older_than: String) -> PyResult<(u64, u64)> {
        let older = parse_duration("older_than", &older_than)?;
        let engine = self.engine();
        run_write(
            py,
            async move {
                engine.cleanup(&table, older).await.map(|o| (o.old_versions, o.bytes_removed)).map_err(engine_err)
            },
            None,
        )
    }

    /// Tags `version`.
    fn tag(&self, py: Python<'_>, table: String, name: String, version: u64) -> PyResult<()> {
        let engine = self.engine();
        run_write(py, async move { engine.create_tag(&table, version, &name).await.map_err(engine_err) }, None)
    }

    /// Restores `version` as a new latest version.
    fn restore(&self, py: Python<'_>, table: String, version: u64) -> PyResult<String> {
        let engine = self.engine();
        run_write(
            py,
            async move { engine.restore(&table, version).await.map(|o| commit_json(&o)).map_err(engine_err) },
            None,
        )
    }

    /// The versions of a table as JSON (`[{version, timestamp, tags, journaled}]`).
    fn versions(&self, py: Python<'_>, table: String) -> PyResult<String> {
        let engine = self.engine();
        run(py, async move {
            let versions = engine.versions(&table).await.map_err(engine_err)?;
            serde_json::to_string(&versions).map_err(|e| LakeError::new_err(e.to_string()))
        })
    }

    /// The dataset URI of a table (for `lance.dataset`); `LakeError` for an invalid table name
    /// (`../x` would name a folder outside the lake's tables).
    fn dataset_uri(&self, table: String) -> PyResult<String> {
        validate_table_name(&table).map_err(objects_err)?;
        Ok(self.engine().dataset_uri(&table))
    }

    /// The lake's storage options for Lance (S3 endpoint and credentials from the environment).
    fn storage_options(&self) -> HashMap<String, String> {
        self.store.storage_options().clone()
    }

    /// A GC dry run at horizon `min_age`: the plan document (JSON) and its digest.
    fn gc_plan(&self, py: Python<'_>, min_age: String, allow_below_policy: bool) -> PyResult<(String, String)> {
        let horizon = horizon(parse_duration("min_age", &min_age)?, allow_below_policy);
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            let planned = gc.plan(&horizon, &PlanSettings::default()).await.map_err(objects_err)?;
            let document =
                String::from_utf8(planned.plan.to_document()).map_err(|e| LakeError::new_err(e.to_string()))?;
            Ok((document, planned.plan.digest()))
        })
    }

    /// Applies a plan document (JSON) with its checkpoint at `checkpoint` (a path or URL outside
    /// the lake), or resumes the apply the checkpoint records (with the plan's `min_age`, when no
    /// plan is given): `page_size` keys per delete request, at most `max_pages` pages in this
    /// call. Returns the checkpoint as JSON.
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
        let location = CheckpointLocation::parse(&checkpoint).map_err(objects_err)?;
        let plan = match plan {
            Some(document) => Some(GcPlan::from_document(document.as_bytes(), "the plan").map_err(objects_err)?),
            None => None,
        };
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            // The horizon is the plan's; resuming without one, the checkpoint's plan's (checked
            // against the lake's policy floor like any horizon).
            let min_age = match &plan {
                Some(plan) => plan.min_age_seconds,
                None => match ApplyCheckpoint::load(&location).await.map_err(objects_err)? {
                    Some(loaded) => loaded.plan.min_age_seconds,
                    None => {
                        return Err(PolicyError::new_err(format!(
                            "no checkpoint at {checkpoint} to resume and no plan given; pass the plan to apply"
                        )))
                    }
                },
            };
            let horizon = horizon(Duration::from_secs(min_age), allow_below_policy);
            // With a plan, `apply` resumes a checkpoint of that same plan and refuses one of
            // another (never resuming an older plan in its place); without, `resume`.
            let report = match &plan {
                Some(plan) => gc.apply(plan, &horizon, &location, &options).await.map_err(objects_err)?,
                None => match gc.resume(&horizon, &location, &options).await.map_err(objects_err)? {
                    Some(report) => report,
                    None => {
                        return Err(PolicyError::new_err(format!(
                            "no checkpoint at {checkpoint} to resume and no plan given; pass the plan to apply"
                        )))
                    }
                },
            };
            serde_json::to_string(&report.checkpoint).map_err(|e| LakeError::new_err(e.to_string()))
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
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            let spec = gc.shard_ranges(&horizon, shards).await.map_err(objects_err)?;
            serde_json::to_string(&spec).map_err(|e| LakeError::new_err(e.to_string()))
        })
    }

    /// A worker's step: the plan document of shard `index` of the spec (JSON).
    fn gc_plan_shard(&self, py: Python<'_>, spec: String, index: usize, allow_below_policy: bool) -> PyResult<String> {
        let spec: ShardSpec = serde_json::from_str(&spec)
            .map_err(|e| PolicyError::new_err(format!("the shard spec is not a ShardSpec document: {e}")))?;
        let horizon = horizon(Duration::from_secs(spec.min_age_seconds), allow_below_policy);
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            let planned = gc.plan_shard(&horizon, &PlanSettings::default(), &spec, index).await.map_err(objects_err)?;
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
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            let planned = gc.plan_sharded(&horizon, &PlanSettings::default(), shards).await.map_err(objects_err)?;
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
            .map_err(objects_err)?;
        let manifest = ShardManifest::assemble(&plans).map_err(objects_err)?;
        if manifest.root != self.store.root().to_string() {
            return Err(PolicyError::new_err(format!(
                "the shards belong to lake {}, not {}",
                manifest.root,
                self.store.root()
            )));
        }
        text(manifest.to_document())
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
        let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(objects_err)?;
        let plan = GcPlan::from_document(shard.as_bytes(), "the shard plan").map_err(objects_err)?;
        let location = CheckpointLocation::parse(&checkpoint).map_err(objects_err)?;
        let horizon = horizon(Duration::from_secs(manifest.min_age_seconds), allow_below_policy);
        let store = self.store.clone();
        run(py, async move {
            let engine = LanceEngine::new(store.clone());
            let gc = GarbageCollector::open(store, &engine).await.map_err(objects_err)?;
            let report = match gc.resume_shard(&manifest, &horizon, &location, &options).await.map_err(objects_err)? {
                Some(report) => report,
                None => gc.apply_shard(&manifest, &plan, &horizon, &location, &options).await.map_err(objects_err)?,
            };
            serde_json::to_string(&report.checkpoint).map_err(|e| LakeError::new_err(e.to_string()))
        })
    }

    /// Compares the journal with full scans of every retained version; the report as JSON.
    fn refs_verify(&self, py: Python<'_>) -> PyResult<String> {
        let engine = self.engine();
        run(py, async move {
            let report = engine.verify_refs(&[]).await.map_err(engine_err)?;
            serde_json::to_string(&report).map_err(|e| LakeError::new_err(e.to_string()))
        })
    }
}

/// Apply's options: `page_size` keys per delete request (1 to 1000, S3 DeleteObjects' limit), at
/// most `max_pages` pages in this call.
fn apply_options(page_size: usize, max_pages: Option<u64>) -> PyResult<ApplyOptions> {
    if !(1..=1000).contains(&page_size) {
        return Err(PolicyError::new_err(format!("page_size {page_size} must be 1 to 1000 keys")));
    }
    Ok(ApplyOptions { page_size, max_pages, ..ApplyOptions::default() })
}

fn horizon(min_age: Duration, allow_below_policy: bool) -> Horizon {
    Horizon { allow_below_policy, ..Horizon::new(min_age) }
}

fn text(bytes: Vec<u8>) -> PyResult<String> {
    String::from_utf8(bytes).map_err(|e| LakeError::new_err(e.to_string()))
}

/// The manifest document and the shards' plan documents of `plan`.
fn sharded_documents(plan: &ShardedPlan) -> PyResult<(String, Vec<String>)> {
    let shards = plan.plans.iter().map(|p| text(p.to_document())).collect::<PyResult<Vec<_>>>()?;
    Ok((text(plan.manifest.to_document())?, shards))
}

/// Writes a plan document into the file `path`, under the library's rules for written documents
/// (`lake_objects::output`): outside the plan's lake, over nothing or another plan (any regular
/// file when `force`), atomically.
#[pyfunction]
#[pyo3(signature = (path, document, force=false))]
fn plan_save(path: std::path::PathBuf, document: String, force: bool) -> PyResult<()> {
    let plan = GcPlan::from_document(document.as_bytes(), "the plan").map_err(objects_err)?;
    plan.save(&lake_objects::output::OutputPath::new(path).force(force)).map_err(objects_err)
}

/// Writes a sharded plan (manifest and shard documents) into the folder `dir` (created when its
/// parent exists), under the library's rules for written documents: outside the plan's lake,
/// into an empty folder or over another sharded plan (anything when `force`).
#[pyfunction]
#[pyo3(signature = (dir, manifest, shards, force=false))]
fn sharded_save(dir: std::path::PathBuf, manifest: String, shards: Vec<String>, force: bool) -> PyResult<()> {
    let manifest = ShardManifest::from_document(manifest.as_bytes(), "the manifest").map_err(objects_err)?;
    let plans = shards
        .iter()
        .enumerate()
        .map(|(i, d)| GcPlan::from_document(d.as_bytes(), &format!("shard document {i}")))
        .collect::<Result<Vec<_>, _>>()
        .map_err(objects_err)?;
    let folder = lake_objects::output::OutputPath::new(dir).force(force);
    ShardedPlan { manifest, plans }.save_to(&folder).map_err(objects_err)
}

/// Reads the sharded plan saved in the folder `dir`: the manifest and shard documents, each
/// checked against its digest.
#[pyfunction]
fn sharded_load(dir: std::path::PathBuf) -> PyResult<(String, Vec<String>)> {
    sharded_documents(&ShardedPlan::load(&dir).map_err(objects_err)?)
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
            .map_err(|_| LakeError::new_err(format!("the sha256 of `{uri}` has {} bytes, not 32", sha.len())))?;
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
    let py = m.py();
    m.add("LakeError", py.get_type::<LakeError>())?;
    m.add("GuardError", py.get_type::<GuardError>())?;
    m.add("PolicyError", py.get_type::<PolicyError>())?;
    m.add("LineageError", py.get_type::<LineageError>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    Ok(())
}
