//! Deleters: bulk deletes with an outcome per key, one module per backend.
//!
//! - [`local`]: a local-folder lake. Each key is removed with `unlinkat` relative to its folder,
//!   opened without following a symbolic link anywhere (`crate::no_follow`); only a regular file
//!   (or, for a key ending with `/`, an empty folder) is removed, and the folders a removal
//!   leaves empty go with it, up to `objects/`. Outcomes are exact: deleted, or not found.
//! - [`s3`]: an `s3://` lake, through bulk `DeleteObjects` requests of up to 1,000 keys (S3's
//!   limit) sent by [`lake_store::s3_requests`], which read S3's answer key by key, each key deleted
//!   on condition that it exists. Where the store honours that (Amazon S3), outcomes are exact:
//!   deleted, or not found. Where it ignores it (LocalStack), a key that did not exist is reported
//!   deleted too, so a key in `<Deleted>` is [`DeleteOutcome::Absent`]: gone, whether or not this
//!   request removed it (apply counts it `deleted` on the key's first request: the plan listed
//!   it, so it existed; see [`crate::apply`]). Only a key in `<Error>` (or one the answer does
//!   not mention, or every key of a request that failed as a whole) is
//!   [`DeleteOutcome::Failed`].
//!
//! Every deleter refuses a key that is not collectable ([`lake_store::keys::is_collectable`]): the
//! last line of defence against a plan that names anything else.

pub mod local;
pub mod s3;

use crate::error::GcError;
use async_trait::async_trait;

/// The outcome of deleting one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// This request removed it (known: a local removal, an S3 conditional delete, an aborted
    /// multipart upload).
    Deleted,
    /// It was already gone before this request (known: a local file not found, an S3
    /// conditional delete of a missing key, an upload no longer there).
    NotFound,
    /// The store confirms it is gone but not whether this request removed it (DeleteObjects
    /// `<Deleted>` from a store that ignores conditional deletes, or a 204 to a single DELETE).
    Absent,
    /// Left alone and not retried: not a regular file (a symbolic link or folder swapped in), a
    /// folder no longer empty, or not a collectable key. The reason.
    Skipped(String),
    /// The store refused or failed; the key stays pending and is retried on resume.
    Failed(String),
}

/// Deletes keys in bulk.
#[async_trait]
pub trait ObjectDeleter: Send + Sync {
    /// Deletes `keys` (relative to the lake root), returning one outcome per key in input order.
    ///
    /// # Errors
    /// Only for failures that leave every outcome unknown; per-key failures are outcomes.
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError>;
}

#[async_trait]
impl<T: ObjectDeleter + ?Sized> ObjectDeleter for Box<T> {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        (**self).delete_batch(keys).await
    }
}

#[async_trait]
impl<T: ObjectDeleter + ?Sized> ObjectDeleter for &T {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        (**self).delete_batch(keys).await
    }
}

/// The deleter of `store`'s managed prefix: bulk `DeleteObjects` for `s3://` roots, no-follow
/// removals for local roots.
pub fn for_store(store: &lake_store::LakeStore) -> Box<dyn ObjectDeleter> {
    match store.local_dir() {
        Some(_) => Box::new(local::LocalDeleter::new(store.clone())),
        None => Box::new(s3::StoreDeleter::new(store.clone())),
    }
}

/// The outcome for a key a deleter must not touch.
pub(crate) fn not_collectable(key: &str) -> DeleteOutcome {
    DeleteOutcome::Skipped(format!("`{key}` is not a managed object key or managed folder; never deleted"))
}
