//! The commit handler every manifest write of the engine goes through ([`CheckedCommitHandler`]
//! with its [`Gate`]): lake's checks run right before Lance publishes a manifest, then the
//! handler Lance would use publishes it. Steps 2 to 4 of the protocol (docs/protocol.md) live
//! here, so that they run however Lance commits: a staged transaction through the protocol's
//! `CommitBuilder`, or Lance's own call (an update, a merge, a branch) on a dataset opened with
//! this handler.
//!
//! Before each manifest write, in this order:
//!
//! 1. **A create lands only as version 1.** Lance commits a create as an `Overwrite`
//!    transaction. When another writer's create lands between the moment this writer last saw
//!    no table and Lance's commit, `CommitBuilder` loads the dataset that now exists and commits
//!    the `Overwrite` on top of it as version 2, replacing the other writer's rows after that
//!    writer was told its append succeeded (Lance 14, `CommitBuilder::execute`). The gate
//!    refuses to publish any manifest version but 1 of a create with
//!    [`CommitError::CommitConflict`]; the engine reports `ConcurrentCreate`.
//! 2. **The write intent, once** (a change that may add references): written create-only before
//!    the first manifest write, naming the references and the Lance transaction's UUID as the
//!    manifest about to be published carries it (`commit::intent`).
//! 3. **The publication guard**, on every attempt, after the intent exists.
//! 4. **Liveness**: the store says the intent is neither revoked nor gone
//!    ([`lake_store::intents::liveness`]). A resolver revokes a write before it proves that the
//!    write can no longer land; a manifest write that passed this check before the revocation
//!    targets a version slot no later than the resolver's fence (docs/protocol.md,
//!    "Revocation").
//!
//! The gate counts the manifest writes it let through and those the store refused as
//! create-only conflicts: a write is *uncertain* when one it let through may have landed.

use crate::commit::change::Precondition;
use crate::commit::intent::{IntentSpec, IntentWrite};
use crate::error::LanceEngineError;
use futures::stream::BoxStream;
use lake_store::failpoint;
use lake_store::guard::WriterClock;
use lake_store::intents::{self, Liveness};
use lake_store::store::LakeStore;
use lance::io::{ObjectStore, ObjectStoreParams};
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter, PredecessorIdentity,
};
use object_store::path::Path;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The only manifest version a create may publish: Lance numbers a new dataset's first
/// version 1.
const FIRST_VERSION: u64 = 1;

/// The checks of one change's commit (see the module documentation), shared by every manifest
/// write attempt of it.
pub(crate) struct Gate {
    store: LakeStore,
    table: String,
    write_id: String,
    create_only: bool,
    /// The intent to write before the first manifest write, when the change adds references.
    spec: Option<IntentSpec>,
    /// What else must hold before each manifest write.
    precondition: Option<Precondition>,
    clock: Arc<dyn WriterClock>,
    state: tokio::sync::Mutex<GateState>,
    issued: AtomicU64,
    refused: AtomicU64,
    /// The versions whose manifest write the store accepted (answered with success).
    published: std::sync::Mutex<Vec<u64>>,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate").field("table", &self.table).field("write_id", &self.write_id).finish()
    }
}

#[derive(Default)]
struct GateState {
    /// The intent, once written.
    written: Option<IntentWrite>,
    /// Why the gate refused a manifest write (a typed error the protocol returns).
    refusal: Option<LanceEngineError>,
    /// The transaction UUIDs of the manifests the gate let through.
    uuids: BTreeSet<String>,
}

impl Gate {
    /// The gate of a change to `table` with write id `write_id`.
    pub(crate) fn new(
        store: LakeStore,
        table: &str,
        write_id: &str,
        create_only: bool,
        spec: Option<IntentSpec>,
        precondition: Option<Precondition>,
        clock: Arc<dyn WriterClock>,
    ) -> Self {
        Self {
            store,
            table: table.into(),
            write_id: write_id.into(),
            create_only,
            spec,
            precondition,
            clock,
            state: tokio::sync::Mutex::new(GateState::default()),
            issued: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            published: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Whether any manifest write was let through (false: Lance's call published nothing).
    pub(crate) fn issued_any(&self) -> bool {
        self.issued.load(Ordering::Acquire) > 0
    }

    /// Whether every manifest write let through was answered as a create-only conflict. Not
    /// proof on its own that none landed: a write whose answer was lost and whose retry met its
    /// own object is answered so too (Lance then reads the version back, and returns success when
    /// it is its own: `lance::io::commit::verify_commit_outcome`). A failure is certain only
    /// when this holds and the failure itself is a definite refusal (the protocol's
    /// `refused_for_certain`).
    pub(crate) fn all_refused(&self) -> bool {
        self.issued.load(Ordering::Acquire) == self.refused.load(Ordering::Acquire)
    }

    /// The versions whose manifest write the store accepted, in order.
    pub(crate) fn published(&self) -> Vec<u64> {
        self.published.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// The intent, if it was written.
    pub(crate) async fn intent(&self) -> Option<IntentWrite> {
        self.state.lock().await.written.clone()
    }

    /// The typed reason the gate refused a manifest write, if it did (taken once).
    pub(crate) async fn take_refusal(&self) -> Option<LanceEngineError> {
        self.state.lock().await.refusal.take()
    }

    /// The transaction UUIDs of every manifest write the gate let through, and the intent's.
    pub(crate) async fn uuids(&self) -> Vec<String> {
        let state = self.state.lock().await;
        let mut uuids: BTreeSet<String> = state.uuids.clone();
        uuids.extend(state.written.as_ref().and_then(|w| w.transaction_uuid.clone()));
        uuids.into_iter().collect()
    }

    /// The handler Lance resolves for `uri` (with `params`), wrapped with this gate.
    ///
    /// # Errors
    /// Lance's, for a URI scheme it has no commit handler for.
    pub(crate) async fn handler(
        self: &Arc<Self>,
        uri: &str,
        params: &Option<ObjectStoreParams>,
    ) -> lance::Result<Arc<dyn CommitHandler>> {
        let inner = lance_table::io::commit::commit_handler_from_url(uri, params).await?;
        Ok(Arc::new(CheckedCommitHandler { inner, gate: self.clone() }))
    }

    /// Writes the intent (once, naming `uuid`: the Lance transaction's) and checks the
    /// publication guard: steps 2 and 3 of the protocol, before a manifest write. The protocol
    /// calls it before Lance's commit of a staged transaction (so a refused write leaves
    /// nothing of Lance's behind); the gate calls it again before each manifest write (the
    /// intent is then written already; the guard is checked again).
    ///
    /// # Errors
    /// Storage errors writing the intent; [`LanceEngineError::Guard`].
    pub(crate) async fn prepare(&self, uuid: Option<String>) -> Result<(), LanceEngineError> {
        let Some(spec) = &self.spec else { return Ok(()) };
        let mut state = self.state.lock().await;
        if state.written.is_none() {
            state.written = Some(spec.write(&self.store, &self.table, &self.write_id, uuid).await?);
            drop(state);
            failpoint::step("commit.after_intent")?;
        } else {
            drop(state);
        }
        spec.guard
            .check(spec.named.guarded().iter(), self.clock.now())
            .map_err(|source| LanceEngineError::Guard { table: self.table.clone(), source })
    }

    /// The publication guard on what the change adds, before anything is written (Lance's own
    /// calls write their data before their commit: a reference the guard refuses is refused
    /// before that). The gate checks it again before each manifest write.
    ///
    /// # Errors
    /// [`LanceEngineError::Guard`].
    pub(crate) fn check_guard(&self) -> Result<(), LanceEngineError> {
        let Some(spec) = &self.spec else { return Ok(()) };
        spec.guard
            .check(spec.named.guarded().iter(), self.clock.now())
            .map_err(|source| LanceEngineError::Guard { table: self.table.clone(), source })
    }

    /// Refuses with `refusal` (kept for the protocol) and `message` (Lance's error).
    async fn refuse(&self, refusal: LanceEngineError) -> CommitError {
        let message = refusal.to_string();
        self.state.lock().await.refusal = Some(refusal);
        CommitError::OtherError(lance::Error::invalid_input(message))
    }

    /// The checks, right before a manifest is published (the module documentation).
    async fn before_publish(&self, manifest: &Manifest, transaction: Option<&Transaction>) -> Result<(), CommitError> {
        if self.create_only && manifest.version != FIRST_VERSION {
            return Err(CommitError::CommitConflict);
        }
        // The UUID from the inline transaction, else from the transaction file's name
        // (`<read_version>-<uuid>.txn`).
        let uuid = transaction.map(|t| t.inner.uuid.clone()).or_else(|| {
            let file = manifest.transaction_file.as_deref()?;
            let stem = file.strip_suffix(".txn")?;
            stem.split_once('-').map(|(_, uuid)| uuid.to_string())
        });
        let uuid = uuid.filter(|u| lake_common::intent::is_uuid(u));
        if self.spec.is_some() {
            if let Err(refusal) = self.prepare(uuid.clone()).await {
                return Err(self.refuse(refusal).await);
            }
            match intents::liveness(&self.store, &self.table, &self.write_id).await {
                Ok(Liveness::Live) => {}
                Ok(gone) => {
                    return Err(self
                        .refuse(LanceEngineError::Revoked {
                            table: self.table.clone(),
                            intent: intents::intent_key(&self.table, &self.write_id),
                            gone: gone == Liveness::Gone,
                        })
                        .await)
                }
                Err(e) => return Err(CommitError::OtherError(lance::Error::io(e.to_string()))),
            }
        }
        if let Some(precondition) = &self.precondition {
            if let Some(refusal) = self.unmet(precondition).await? {
                return Err(self.refuse(refusal).await);
            }
        }
        step("commit.before_manifest").await?;
        if let Some(uuid) = uuid {
            self.state.lock().await.uuids.insert(uuid);
        }
        self.issued.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Why `precondition` does not hold now, if it does not.
    async fn unmet(&self, precondition: &Precondition) -> Result<Option<LanceEngineError>, CommitError> {
        match precondition {
            Precondition::Tagged { key, name, version } => {
                let bytes =
                    self.store.get(key).await.map_err(|e| CommitError::OtherError(lance::Error::io(e.to_string())))?;
                let names = bytes
                    .and_then(|b| serde_json::from_slice::<lance::dataset::refs::TagContents>(&b).ok())
                    .map(|tag| tag.version);
                if names == Some(*version) {
                    return Ok(None);
                }
                Ok(Some(LanceEngineError::InvalidInput(format!(
                    "table `{}`: the restore's tag `{name}` no longer names version {version} (a cleanup judged it stale and removed it); nothing was committed. Run the restore again",
                    self.table
                ))))
            }
        }
    }

    /// Tells the gate how a manifest write it let through ended: a conflict (the store refused
    /// the create-only write: the slot belongs to another commit) is certain never to land.
    fn after_publish(&self, published: &Result<ManifestLocation, CommitError>) {
        match published {
            Err(CommitError::CommitConflict) => {
                self.refused.fetch_add(1, Ordering::AcqRel);
            }
            Ok(location) => {
                if let Ok(mut published) = self.published.lock() {
                    published.push(location.version);
                }
            }
            Err(_) => {}
        }
    }
}

/// A failure point of the protocol as a commit error ([`failpoint::step`]).
async fn step(name: &'static str) -> Result<(), CommitError> {
    failpoint::step(name).map_err(|e| CommitError::OtherError(lance::Error::io(e.to_string())))
}

/// A [`CommitHandler`] that runs its [`Gate`] before the wrapped handler publishes a manifest
/// (see the module documentation); every other method is the wrapped handler's.
#[derive(Debug)]
pub(crate) struct CheckedCommitHandler {
    inner: Arc<dyn CommitHandler>,
    gate: Arc<Gate>,
}

impl CheckedCommitHandler {
    /// The gate's bookkeeping after the wrapped handler's `commit` (or `commit_after`); a
    /// failure point can lose the response of a write that landed.
    async fn published(
        &self,
        published: Result<ManifestLocation, CommitError>,
    ) -> Result<ManifestLocation, CommitError> {
        self.gate.after_publish(&published);
        let published = published?;
        // The write landed; its answer may still be lost on the way back.
        step("commit.lost_manifest_response").await?;
        Ok(published)
    }
}

#[async_trait::async_trait]
impl CommitHandler for CheckedCommitHandler {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
    }

    async fn resolve_latest_location(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
    ) -> lance::Result<ManifestLocation> {
        self.inner.resolve_latest_location(base_path, object_store).await
    }

    async fn resolve_version_location(
        &self,
        base_path: &Path,
        version: u64,
        object_store: &dyn object_store::ObjectStore,
    ) -> lance::Result<ManifestLocation> {
        self.inner.resolve_version_location(base_path, version, object_store).await
    }

    async fn version_exists(
        &self,
        base_path: &Path,
        version: u64,
        object_store: &dyn object_store::ObjectStore,
        naming_scheme: ManifestNamingScheme,
    ) -> lance::Result<bool> {
        self.inner.version_exists(base_path, version, object_store, naming_scheme).await
    }

    fn list_detached_manifest_locations<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
    ) -> BoxStream<'a, lance::Result<ManifestLocation>> {
        self.inner.list_detached_manifest_locations(base_path, object_store)
    }

    fn list_manifest_locations<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        sorted_descending: bool,
    ) -> BoxStream<'a, lance::Result<ManifestLocation>> {
        self.inner.list_manifest_locations(base_path, object_store, sorted_descending)
    }

    fn list_manifest_locations_since<'a>(
        &self,
        base_path: &Path,
        object_store: &'a ObjectStore,
        since_version: u64,
    ) -> BoxStream<'a, lance::Result<ManifestLocation>> {
        self.inner.list_manifest_locations_since(base_path, object_store, since_version)
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> Result<ManifestLocation, CommitError> {
        self.gate.before_publish(manifest, transaction.as_ref()).await?;
        let published = self
            .inner
            .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
            .await;
        self.published(published).await
    }

    fn supports_predecessor_condition(&self) -> bool {
        self.inner.supports_predecessor_condition()
    }

    async fn resolve_latest_identity(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
    ) -> lance::Result<Option<PredecessorIdentity>> {
        self.inner.resolve_latest_identity(base_path, object_store).await
    }

    async fn resolve_identity(
        &self,
        base_path: &Path,
        object_store: &ObjectStore,
        version: u64,
    ) -> lance::Result<Option<PredecessorIdentity>> {
        self.inner.resolve_identity(base_path, object_store, version).await
    }

    async fn commit_after(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
        predecessor: &PredecessorIdentity,
    ) -> Result<ManifestLocation, CommitError> {
        self.gate.before_publish(manifest, transaction.as_ref()).await?;
        let published = self
            .inner
            .commit_after(
                manifest,
                indices,
                base_path,
                object_store,
                manifest_writer,
                naming_scheme,
                transaction,
                predecessor,
            )
            .await;
        self.published(published).await
    }

    async fn forget_version(&self, base_path: &Path, version: u64, identity: &str) -> lance::Result<()> {
        self.inner.forget_version(base_path, version, identity).await
    }

    async fn delete(&self, base_path: &Path) -> lance::Result<()> {
        self.inner.delete(base_path).await
    }
}
