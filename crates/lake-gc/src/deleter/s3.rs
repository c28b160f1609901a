//! The deleter of an `s3://` lake: bulk DeleteObjects requests sent by [`lake_store::s3_requests`]
//! (see the module documentation of [`super`]).
//!
//! Each key's outcome is what S3 answered for that key. Keys are deleted on condition that they
//! exist ([`lake_store::s3_requests::S3Requests::delete_objects`]): where the store honours that
//! (Amazon S3), a key in `<Deleted>` is [`DeleteOutcome::Deleted`] (this request removed it) and
//! a key answered as missing is [`DeleteOutcome::NotFound`], exactly, even when several applies
//! delete the same keys at once. Where the store ignores it (LocalStack), a key in `<Deleted>` is
//! [`DeleteOutcome::Absent`]: gone now, whether or not it existed. A key in `<Error>` with any
//! other code is [`DeleteOutcome::Failed`] with S3's code and message (it stays pending and is
//! retried on resume), and so is a key the answer does not mention. A request that fails as a
//! whole (after retries) fails every key it carried, and only those. With object_store's
//! `aws_disable_bulk_delete` setting, each key is one DELETE request instead (S3 answers 204
//! whether or not the key existed: absent).

use super::{not_collectable, DeleteOutcome, ObjectDeleter};
use crate::error::GcError;
use async_trait::async_trait;
use futures::StreamExt;
use lake_store::keys::{is_collectable, split_staged, Staged};
use lake_store::s3_requests::DeleteAnswer;
use lake_store::store::LakeStore;
use object_store::aws::AmazonS3ConfigKey;
use object_store::ObjectStoreExt;

/// Keys per DeleteObjects request: S3's limit.
const MAX_KEYS_PER_REQUEST: usize = 1000;
/// Single DELETE requests in flight when bulk deletes are disabled (object_store's number).
const SINGLE_DELETES_IN_FLIGHT: usize = 20;

/// The deleter of an `s3://` [`LakeStore`].
#[derive(Debug, Clone)]
pub struct StoreDeleter {
    store: LakeStore,
}

impl StoreDeleter {
    /// A deleter for `store`.
    pub fn new(store: LakeStore) -> Self {
        Self { store }
    }

    /// The bucket key of a key relative to the root.
    fn full_key(&self, key: &str) -> String {
        match self.store.root().path().as_str() {
            "" => key.to_string(),
            prefix => format!("{prefix}/{key}"),
        }
    }

    /// Outcomes of deleting `keys` (collectable object keys) with DeleteObjects requests.
    async fn delete_bulk(&self, keys: &[&String]) -> Vec<DeleteOutcome> {
        let Some(requests) = self.store.s3_requests() else { return self.delete_single(keys).await };
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MAX_KEYS_PER_REQUEST) {
            let full: Vec<String> = chunk.iter().map(|k| self.full_key(k)).collect();
            match requests.delete_objects(&full).await {
                Ok(answers) => out.extend(answers.into_iter().map(|a| match a {
                    DeleteAnswer::Removed => DeleteOutcome::Deleted,
                    DeleteAnswer::Gone => DeleteOutcome::Absent,
                    DeleteAnswer::Missing => DeleteOutcome::NotFound,
                    DeleteAnswer::Error { code, message } => {
                        DeleteOutcome::Failed(format!("S3 did not delete it: {code} {message}").trim().to_string())
                    }
                    DeleteAnswer::Unanswered => {
                        DeleteOutcome::Failed("S3's DeleteObjects answer did not mention this key".into())
                    }
                })),
                Err(e) => out.extend(chunk.iter().map(|_| DeleteOutcome::Failed(e.to_string()))),
            }
        }
        out
    }

    /// Outcomes of deleting `keys` one DELETE request each (object_store's `delete`).
    async fn delete_single(&self, keys: &[&String]) -> Vec<DeleteOutcome> {
        let paths: Vec<object_store::path::Path> = keys.iter().map(|k| self.store.path(k)).collect();
        let store = self.store.object_store();
        let deletes = paths.into_iter().map(move |path| {
            let store = store.clone();
            async move {
                match store.delete(&path).await {
                    Ok(()) => DeleteOutcome::Absent,
                    Err(object_store::Error::NotFound { .. }) => DeleteOutcome::NotFound,
                    Err(e) => DeleteOutcome::Failed(e.to_string()),
                }
            }
        });
        futures::stream::iter(deletes).buffered(SINGLE_DELETES_IN_FLIGHT).collect().await
    }

    /// Aborts the multipart upload `id` of `key` (named in a plan as `<key>#upload=<id>`, of a
    /// managed object or a reference log): deleted when this request aborted it, not found when
    /// it no longer existed.
    async fn abort(&self, key: &str, id: &str) -> DeleteOutcome {
        let Some(requests) = self.store.s3_requests() else {
            return DeleteOutcome::Skipped("an upload can only be aborted on an s3:// root".into());
        };
        let log = key.split_once('#').map(|(log, _)| log).unwrap_or(key);
        match requests.abort_multipart_upload(&self.full_key(log), id).await {
            Ok(true) => DeleteOutcome::Deleted,
            Ok(false) => DeleteOutcome::NotFound,
            Err(e) => DeleteOutcome::Failed(e.to_string()),
        }
    }
}

#[async_trait]
impl ObjectDeleter for StoreDeleter {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        // Only collectable keys are sent; the others keep their place in the outcomes. Staged
        // uploads (of reference logs and of managed objects) are aborted, one request each.
        let sent: Vec<&String> = keys.iter().filter(|k| sent_in_bulk(k)).collect();
        let single = self.store.s3_requests().is_none()
            || self.store.s3_settings().is_some_and(|s| s.is_true(AmazonS3ConfigKey::DisableBulkDelete));
        let outcomes = if single { self.delete_single(&sent).await } else { self.delete_bulk(&sent).await };
        let mut outcomes = outcomes.into_iter();
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let outcome = if sent_in_bulk(k) {
                outcomes.next().unwrap_or_else(|| DeleteOutcome::Failed("no outcome".into()))
            } else if let Some((upload, Staged::Upload(id))) = is_collectable(k).then(|| split_staged(k)).flatten() {
                self.abort(upload, &id).await
            } else {
                not_collectable(k)
            };
            out.push(outcome);
        }
        Ok(out)
    }
}

/// Keys deleted by DeleteObjects: collectable keys that are neither folders nor multipart
/// uploads.
fn sent_in_bulk(key: &str) -> bool {
    is_collectable(key) && !key.ends_with('/') && !matches!(split_staged(key), Some((_, Staged::Upload(_))))
}
