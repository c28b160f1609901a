//! lake: a data lake on Lance tables whose rows reference large immutable objects (recordings,
//! images, sensor logs) stored beside the tables, in a local folder or an S3 bucket prefix, with
//! safe garbage collection of the objects no retained version references.
//!
//! This crate is lake's face: [`Lake::open`] or [`Lake::init`] give a lake, and from it
//! [`Lake::objects`] (upload and verified reads), [`Lake::table`] (journaled writes to a
//! table, by a [`TableName`] checked once) and [`Lake::gc`] (plans and applies). Every error is
//! an [`Error`] with one [`ErrorKind`] (docs/errors.md lists them).
//!
//! ```no_run
//! # async fn example() -> Result<(), lake::Error> {
//! let lake = lake::Lake::init("/data/lake", std::time::Duration::from_secs(7 * 86400)).await?;
//! let object = lake.objects().put("run-1.log", &b"sensor log"[..]).await?;
//! println!("uploaded {} ({} bytes)", object.key, object.size);
//! # Ok(()) }
//! ```
//!
//! The layers below the face are re-exported for tools that need more than it offers (the
//! `lake` command, the Python binding): [`common`] (the data model: references, journal
//! entries, [`ErrorKind`]), [`engine`] (the table interface GC plans through), [`store`] (the
//! root, its documents, the managed writer and reader), [`collect`] (planning and apply) and
//! [`lance`] (the Lance engine and its write protocol). A rule that keeps a live object alive
//! lives in those layers, so every caller inherits it.

use std::sync::Arc;
use std::time::Duration;

pub use lake_common as common;
pub use lake_engine as engine;
pub use lake_gc as collect;
pub use lake_lance as lance;
pub use lake_store as store;

/// Lance's dataset, as [`Table::dataset`] returns it, and the Arrow crates rows are built with
/// (the versions Lance uses).
pub use ::lance::Dataset;
pub use arrow_array;
pub use arrow_schema;
pub use lake_common::{
    data_location_field, data_location_list_field, data_location_type, DataLocationBuilder, ErrorKind, ObjectIdentity,
};
pub use lake_gc::plan::GcPlan;
pub use lake_lance::{CleanupOutcome, CommitOutcome, VersionInfo};
pub use lake_store::writer::ManagedObject;

use arrow_array::RecordBatchReader;
use lake_gc::apply::{ApplyOptions, ApplyReport};
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::collector::{GarbageCollector, Horizon};
use lake_gc::run::{PlanSource, RunRequest};
use lake_lance::LanceEngine;
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::ManagedObjectWriter;
use lake_store::{LakeStore, ObjectReader};

/// An error of lake: its [`ErrorKind`] (what callers act on, and whether retrying can help) and
/// the library error it came from, kept whole as its source (downcast it for details: a
/// `lake_store::StoreError`, `lake_gc::GcError`, `lake_lance::LanceEngineError` or
/// `lake_engine::EngineError`).
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct Error {
    kind: ErrorKind,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl Error {
    /// The error's kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Whether retrying the same call can help ([`ErrorKind::is_transient`]).
    pub fn is_transient(&self) -> bool {
        self.kind.is_transient()
    }

    /// The version a failed write committed before it failed, when it says so (retrying such a
    /// write would commit it again).
    pub fn committed_version(&self) -> Option<u64> {
        self.downcast_ref::<lake_lance::LanceEngineError>().and_then(lake_lance::LanceEngineError::committed_version)
    }

    /// The library error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.source.downcast_ref::<T>()
    }
}

macro_rules! from_library_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error { kind: e.kind(), source: Box::new(e) }
            }
        }
    )*};
}
from_library_error!(lake_store::StoreError, lake_gc::GcError, lake_lance::LanceEngineError, lake_engine::EngineError);

/// A table's name, checked once: 1 to 64 characters of A-Z, a-z, 0-9, `_` and `-`, or
/// `<table>@<branch>` for a branch, the branch name alike.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TableName(String);

impl TableName {
    /// `name`, checked.
    ///
    /// # Errors
    /// [`ErrorKind::TableName`] for a name that breaks the rule.
    pub fn new(name: impl Into<String>) -> Result<Self, Error> {
        let name = name.into();
        lake_store::layout::validate_table_name(&name)?;
        Ok(Self(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TableName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        TableName::new(s)
    }
}

/// An opened lake: its store, its GC policy floor, and the engine that writes its tables.
/// Cheap to clone (the clones share the engine).
#[derive(Clone)]
pub struct Lake {
    store: LakeStore,
    policy: LakeDescriptor,
    engine: Arc<LanceEngine>,
}

impl std::fmt::Debug for Lake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lake").field("root", &self.root()).field("min_age", &self.min_age()).finish()
    }
}

impl Lake {
    /// Opens the lake at `root` (a local folder, a `file://` URL, or `s3://bucket/prefix` with
    /// the `AWS_*` environment).
    ///
    /// # Errors
    /// [`ErrorKind::NotALake`] when no lake is there; [`ErrorKind::Root`] for a root lake may
    /// not use; store failures.
    pub async fn open(root: &str) -> Result<Lake, Error> {
        Self::opened(LakeStore::open(root)?).await
    }

    /// As [`Lake::open`], with S3 settings in `options` (object_store's names, e.g.
    /// `aws_region`, `aws_endpoint`) over the environment.
    ///
    /// # Errors
    /// As [`Lake::open`]; [`ErrorKind::Root`] for an option that is not an S3 setting.
    pub async fn open_with_options(
        root: &str,
        options: &std::collections::HashMap<String, String>,
    ) -> Result<Lake, Error> {
        Self::opened(LakeStore::open_with_options(root, options)?).await
    }

    async fn opened(store: LakeStore) -> Result<Lake, Error> {
        let policy = LakeDescriptor::load(&store).await?;
        let engine = Arc::new(LanceEngine::new(store.clone()));
        Ok(Lake { store, policy, engine })
    }

    /// Creates a lake at `root` whose GC policy floor is `min_age` (whole seconds, rounded up:
    /// GC never deletes an unreferenced object younger than that unless told to), or opens the
    /// lake there when it has the same floor.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a floor that is zero or longer than any object's age can
    /// be; [`ErrorKind::StoreCapability`] for a store that does not refuse create-only writes
    /// over existing keys; [`ErrorKind::Root`] when a lake with another floor is there.
    pub async fn init(root: &str, min_age: Duration) -> Result<Lake, Error> {
        let store = LakeStore::open(root)?;
        let (policy, _) = LakeDescriptor::create(&store, min_age).await?;
        let engine = Arc::new(LanceEngine::new(store.clone()));
        Ok(Lake { store, policy, engine })
    }

    /// The lake's root, as opened.
    pub fn root(&self) -> String {
        self.store.root().to_string()
    }

    /// The GC policy floor.
    pub fn min_age(&self) -> Duration {
        self.policy.min_age()
    }

    /// The lake's objects: uploads and verified reads.
    pub fn objects(&self) -> Objects {
        Objects { writer: ManagedObjectWriter::new(self.store.clone()), reader: ObjectReader::new(self.store.clone()) }
    }

    /// The table `name` (it is created by its first write).
    ///
    /// # Errors
    /// [`ErrorKind::TableName`] for a name that breaks the rule ([`TableName`]).
    pub fn table(&self, name: &str) -> Result<Table, Error> {
        Ok(Table { name: TableName::new(name)?, engine: self.engine.clone() })
    }

    /// The tables of the lake, by name.
    ///
    /// # Errors
    /// Store failures.
    pub async fn tables(&self) -> Result<Vec<TableName>, Error> {
        Ok(lake_store::registry::tables(&self.store).await?.into_iter().map(TableName).collect())
    }

    /// Garbage collection of the lake's orphan objects.
    pub fn gc(&self) -> Gc<'_> {
        Gc { lake: self }
    }

    /// The store (for the layers below the face).
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// The Lance engine that writes the lake's tables (for the layers below the face).
    pub fn engine(&self) -> &LanceEngine {
        &self.engine
    }
}

/// A lake's objects: every object enters through [`Objects::put`] (a fresh key
/// `objects/<ULID>/<name>`, with its SHA-256 and size), and reads are verified against the
/// reference's size and SHA-256.
#[derive(Debug, Clone)]
pub struct Objects {
    writer: ManagedObjectWriter,
    reader: ObjectReader,
}

impl Objects {
    /// Uploads the bytes `reader` yields as a new object named `name`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a name that is not one path segment; store failures.
    pub async fn put(&self, name: &str, reader: impl tokio::io::AsyncRead + Unpin) -> Result<ManagedObject, Error> {
        Ok(self.writer.upload(name, reader).await?)
    }

    /// Uploads the local file `path`, named by its file name.
    ///
    /// # Errors
    /// As [`Objects::put`]; a file that cannot be read.
    pub async fn put_file(&self, path: &std::path::Path) -> Result<ManagedObject, Error> {
        Ok(self.writer.upload_file(path).await?)
    }

    /// Copies the object `source` names to a fresh key (the same bytes, a new ULID): the way to
    /// reference an object too old for the publication guard.
    ///
    /// # Errors
    /// [`ErrorKind::ObjectMissing`], [`ErrorKind::ObjectMismatch`]; store failures.
    pub async fn copy_fresh(&self, source: &ObjectIdentity) -> Result<ManagedObject, Error> {
        Ok(self.writer.copy_fresh(source).await?)
    }

    /// The bytes of the object `reference` names, verified against its size and SHA-256.
    ///
    /// # Errors
    /// [`ErrorKind::ObjectMissing`], [`ErrorKind::ObjectMismatch`] (no bytes are returned),
    /// [`ErrorKind::ObjectUnreachable`]; store failures.
    pub async fn read(&self, reference: &ObjectIdentity) -> Result<bytes::Bytes, Error> {
        Ok(self.reader.read_verified(reference).await?)
    }
}

/// A table of the lake: writes through the engine journal every reference they add and remove.
#[derive(Clone)]
pub struct Table {
    name: TableName,
    engine: Arc<LanceEngine>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table").field("name", &self.name).finish()
    }
}

impl Table {
    /// The table's name.
    pub fn name(&self) -> &TableName {
        &self.name
    }

    /// Appends `batches` as one new version (creating the table on its first write). Columns
    /// of the DataLocation type ([`data_location_field`]) reference objects.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for an invalid reference (nothing committed);
    /// [`ErrorKind::Guard`] for a reference to an object too old to publish (nothing
    /// committed); [`ErrorKind::Conflict`] for a race lost to another writer; store failures.
    pub async fn append(&self, batches: Box<dyn RecordBatchReader + Send>) -> Result<CommitOutcome, Error> {
        Ok(self.engine.append(self.name.as_str(), batches).await?)
    }

    /// Deletes the rows matching `predicate` (one SQL expression), journaling the references
    /// they held. `None` when the table did not change.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a predicate that is not one expression;
    /// [`ErrorKind::NoSuchTable`]; store failures.
    pub async fn delete(&self, predicate: &str) -> Result<Option<CommitOutcome>, Error> {
        Ok(self.engine.delete(self.name.as_str(), predicate).await?)
    }

    /// The table's versions, oldest first.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchTable`]; store failures.
    pub async fn versions(&self) -> Result<Vec<VersionInfo>, Error> {
        Ok(self.engine.versions(self.name.as_str()).await?)
    }

    /// Removes the table's versions older than `older_than` (never the latest, nor a tagged
    /// one), and the files no remaining version needs: the objects only removed versions
    /// referenced become orphans GC can collect.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a duration past what a time can represent;
    /// [`ErrorKind::NoSuchTable`]; store failures.
    pub async fn cleanup(&self, older_than: Duration) -> Result<CleanupOutcome, Error> {
        Ok(self.engine.cleanup(self.name.as_str(), older_than).await?)
    }

    /// The latest version's Lance dataset, to read with Lance itself.
    ///
    /// # Errors
    /// [`ErrorKind::NoSuchTable`]; store failures.
    pub async fn dataset(&self) -> Result<Dataset, Error> {
        Ok(self.engine.open(self.name.as_str()).await?)
    }

    /// The latest version number.
    ///
    /// # Errors
    /// As [`Table::dataset`].
    pub async fn version(&self) -> Result<u64, Error> {
        Ok(self.dataset().await?.version().version)
    }
}

/// Garbage collection of a lake's orphan objects: a dry run plans, an apply deletes through a
/// checkpoint outside the lake (resumable). Every rule is the collector's
/// (`lake_gc::collector::GarbageCollector`).
#[derive(Debug, Clone, Copy)]
pub struct Gc<'a> {
    lake: &'a Lake,
}

impl Gc<'_> {
    /// A dry run: the plan of what a horizon of `min_age` allows deleting now (nothing is
    /// deleted).
    ///
    /// # Errors
    /// [`ErrorKind::Horizon`] below 1 s, [`ErrorKind::PolicyFloor`] below the lake's floor,
    /// [`ErrorKind::ClockSkew`]; store failures.
    pub async fn plan(&self, min_age: Duration) -> Result<GcPlan, Error> {
        let gc = GarbageCollector::open(self.lake.store.clone(), self.lake.engine.as_ref()).await?;
        Ok(gc.run(&RunRequest::dry_run(Horizon::new(min_age))).await?.plan)
    }

    /// Applies `plan`, recording its progress at `checkpoint` (a local file path, or an
    /// `s3://` URL opened with the lake's S3 settings; outside the lake either way), or resumes
    /// the apply recorded there.
    ///
    /// # Errors
    /// [`ErrorKind::Output`] or [`ErrorKind::Root`] for a checkpoint location that is not one
    /// (a folder, a missing folder, a name ending `.lock` or `.plan.json`);
    /// [`ErrorKind::BoundToRoot`] and the other binding refusals for a plan of another lake or
    /// horizon, [`ErrorKind::Root`] for a checkpoint inside the lake, [`ErrorKind::Checkpoint`]
    /// for an unfinished apply of another plan there, [`ErrorKind::LineageIncomplete`] when the
    /// journal cannot account for a version; store failures.
    pub async fn apply(&self, plan: &GcPlan, checkpoint: &str) -> Result<ApplyReport, Error> {
        let gc = GarbageCollector::open(self.lake.store.clone(), self.lake.engine.as_ref()).await?;
        // Parsed as every caller's is: a name a lock or a plan document takes is refused.
        let location = CheckpointLocation::parse_for(checkpoint, &self.lake.store)?;
        let request = RunRequest {
            plan: PlanSource::Given(plan),
            checkpoint: Some(&location),
            apply: ApplyOptions::default(),
            ..RunRequest::dry_run(Horizon::new(Duration::from_secs(plan.min_age_seconds)))
        };
        let run = gc.run(&request).await?;
        run.apply.ok_or_else(|| Error {
            kind: ErrorKind::Internal,
            source: "an apply with a checkpoint reported no apply".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    /// The README's Rust example is the example file `cargo test` runs, character for character.
    #[test]
    fn the_readme_example_is_the_example_file() {
        const FILE: &str = "crates/lake/examples/write_from_rust.rs";
        let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let readme = std::fs::read_to_string(workspace.join("README.md")).unwrap();
        let file = std::fs::read_to_string(workspace.join(FILE)).unwrap();
        let begin = format!("<!-- begin {FILE} -->\n```rust\n");
        let end = format!("```\n<!-- end {FILE} -->");
        let start = readme.find(&begin).unwrap_or_else(|| panic!("README.md has no `{begin}`")) + begin.len();
        let close = readme[start..].find(&end).unwrap_or_else(|| panic!("README.md has no `{end}`")) + start;
        assert!(
            readme[start..close] == file,
            "README.md's copy of {FILE} differs from the file; paste the file between the comments"
        );
    }

    /// A checkpoint named like the lock or the plan document of another checkpoint is refused
    /// before anything runs, as the CLI refuses it.
    #[tokio::test]
    async fn a_checkpoint_named_like_a_lock_or_a_plan_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let lake = super::Lake::init(dir.path().join("lake").to_str().unwrap(), std::time::Duration::from_secs(1))
            .await
            .unwrap();
        let plan = lake.gc().plan(std::time::Duration::from_secs(1)).await.unwrap();
        for name in ["gc.ckpt.lock", "gc.ckpt.plan.json"] {
            let path = dir.path().join(name);
            let err = lake.gc().apply(&plan, path.to_str().unwrap()).await.unwrap_err();
            assert!(matches!(err.kind(), super::ErrorKind::Root | super::ErrorKind::Output), "{name}: {err}");
            assert!(!path.exists(), "{name}: nothing was written");
        }
    }

    #[test]
    fn table_names_are_checked_once() {
        assert_eq!(super::TableName::new("episodes").unwrap().as_str(), "episodes");
        for bad in ["", "bad name!", "../x", "a/b"] {
            assert_eq!(super::TableName::new(bad).unwrap_err().kind(), super::ErrorKind::TableName, "{bad}");
        }
    }
}
