//! The commit handler every engine commit that adds references goes through
//! ([`CheckedCommitHandler`]): it runs lake's checks right before Lance publishes a manifest,
//! then lets the handler Lance would use publish it.
//!
//! Two checks, each optional:
//!
//! **A create lands only as version 1.** Lance commits a create as an `Overwrite` transaction.
//! When another writer's create lands between the moment this writer last saw no table and
//! Lance's commit, `CommitBuilder` loads the dataset that now exists and commits the `Overwrite`
//! on top of it as version 2, replacing the other writer's rows after that writer was told its
//! append succeeded (Lance 14, `CommitBuilder::execute`: a destination that exists goes through
//! `commit_transaction`, where an `Overwrite` conflicts with nothing). With `create_only`, the
//! handler refuses to publish any manifest version but 1 with [`CommitError::CommitConflict`];
//! the engine then reports `ConcurrentCreate` (nothing of this write is in the table; the retry
//! appends). Tested by the Python attack suite (`test_concurrent_first_appends_never_lose_rows`)
//! and the tests below, against real Lance datasets.
//!
//! **No manifest write after the write's deadline** ([`crate::intent_commit::CommitGate`]): a
//! write that recorded a write intent publishes its manifest only before its deadline, and
//! records the transaction's UUID first when the intent could not name it. This is what lets a
//! resolver prove later that a commit can no longer land (`crate::resolve`).

use std::sync::Arc;

use crate::intent_commit::CommitGate;
use futures::stream::BoxStream;
use lance::io::{ObjectStore, ObjectStoreParams};
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter, PredecessorIdentity,
};
use object_store::path::Path;

/// The only manifest version a create may publish: Lance numbers a new dataset's first
/// version 1.
const FIRST_VERSION: u64 = 1;

/// Refuses a manifest of any version but [`FIRST_VERSION`] as a conflict.
fn first_version_only(manifest: &Manifest) -> Result<(), CommitError> {
    if manifest.version == FIRST_VERSION {
        Ok(())
    } else {
        Err(CommitError::CommitConflict)
    }
}

/// A [`CommitHandler`] that runs lake's checks before the wrapped handler publishes a manifest
/// (see the module documentation); every other method is the wrapped handler's.
#[derive(Debug)]
pub(crate) struct CheckedCommitHandler {
    inner: Arc<dyn CommitHandler>,
    create_only: bool,
    gate: Option<Arc<CommitGate>>,
}

impl CheckedCommitHandler {
    /// The handler Lance resolves for `uri` (with `params`), publishing version 1 only.
    #[cfg(test)]
    ///
    /// # Errors
    /// Lance's, for a URI scheme it has no commit handler for.
    pub(crate) async fn create_only(
        uri: &str,
        params: &Option<ObjectStoreParams>,
    ) -> lance::Result<Arc<dyn CommitHandler>> {
        Self::for_uri(uri, params, true, None).await
    }

    /// The handler Lance resolves for `uri` (with `params`), with the checks asked for.
    ///
    /// # Errors
    /// Lance's, for a URI scheme it has no commit handler for.
    pub(crate) async fn for_uri(
        uri: &str,
        params: &Option<ObjectStoreParams>,
        create_only: bool,
        gate: Option<Arc<CommitGate>>,
    ) -> lance::Result<Arc<dyn CommitHandler>> {
        let inner = lance_table::io::commit::commit_handler_from_url(uri, params).await?;
        Ok(Arc::new(Self { inner, create_only, gate }))
    }

    /// Tells the gate how a manifest write it let through ended: a conflict (the store refused
    /// the create-only write: the slot belongs to another commit) is certain never to land.
    fn after_publish(&self, published: &Result<ManifestLocation, CommitError>) {
        if let (Some(gate), Err(CommitError::CommitConflict)) = (&self.gate, published) {
            gate.refused();
        }
    }

    /// The checks, right before a manifest is published.
    async fn before_publish(&self, manifest: &Manifest, transaction: Option<&Transaction>) -> Result<(), CommitError> {
        if self.create_only {
            first_version_only(manifest)?;
        }
        match &self.gate {
            Some(gate) => gate.before_publish(manifest, transaction).await,
            None => Ok(()),
        }
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
        self.before_publish(manifest, transaction.as_ref()).await?;
        let published = self
            .inner
            .commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction)
            .await;
        self.after_publish(&published);
        published
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
        self.before_publish(manifest, transaction.as_ref()).await?;
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
        self.after_publish(&published);
        published
    }

    async fn forget_version(&self, base_path: &Path, version: u64, identity: &str) -> lance::Result<()> {
        self.inner.forget_version(base_path, version, identity).await
    }

    async fn delete(&self, base_path: &Path) -> lance::Result<()> {
        self.inner.delete(base_path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
    use lance::Dataset;

    fn rows(values: &[i64]) -> Vec<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
        vec![RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()]
    }

    async fn keys(uri: &str) -> (u64, Vec<i64>) {
        let ds = Dataset::open(uri).await.unwrap();
        let scan = ds.scan();
        let batch = scan.try_into_batch().await.unwrap();
        let column = batch.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        (ds.version().version, column.values().to_vec())
    }

    /// Two creates race: the second's data files are written while the table does not exist,
    /// the first lands, then the second commits. Through Lance's own handler the second lands
    /// as version 2 and replaces the first's rows (the hole, kept here so a Lance change that
    /// closes it shows); through [`CheckedCommitHandler::create_only`] it is refused as a conflict and
    /// the first's rows stay the table's.
    #[tokio::test]
    async fn a_create_landing_on_another_create_is_refused() {
        for wrapped in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let uri = dir.path().join("t.lance").to_string_lossy().into_owned();
            let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
            let second =
                InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted(rows(&[2])).await.unwrap();
            InsertBuilder::new(uri.as_str()).with_params(&params).execute(rows(&[1])).await.unwrap();
            let mut commit = CommitBuilder::new(uri.as_str()).with_max_retries(1);
            if wrapped {
                commit = commit.with_commit_handler(CheckedCommitHandler::create_only(&uri, &None).await.unwrap());
            }
            let outcome = commit.execute(second).await;
            if wrapped {
                assert!(matches!(outcome, Err(lance::Error::CommitConflict { .. })), "{outcome:?}");
                assert_eq!(keys(&uri).await, (1, vec![1]));
            } else {
                assert!(outcome.is_ok(), "{outcome:?}");
                assert_eq!(keys(&uri).await, (2, vec![2]), "Lance no longer commits a create over a table");
            }
        }
    }

    /// With no table, the wrapped handler publishes the create as version 1.
    #[tokio::test]
    async fn a_create_on_no_table_lands_as_version_one() {
        let dir = tempfile::tempdir().unwrap();
        let uri = dir.path().join("t.lance").to_string_lossy().into_owned();
        let params = WriteParams { mode: WriteMode::Create, ..Default::default() };
        let create =
            InsertBuilder::new(uri.as_str()).with_params(&params).execute_uncommitted(rows(&[7, 8])).await.unwrap();
        let handler = CheckedCommitHandler::create_only(&uri, &None).await.unwrap();
        CommitBuilder::new(uri.as_str())
            .with_commit_handler(handler)
            .with_max_retries(1)
            .execute(create)
            .await
            .unwrap();
        assert_eq!(keys(&uri).await, (1, vec![7, 8]));
    }
}
