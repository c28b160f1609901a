//! The deleter of an `s3://` lake: bulk `DeleteObjects` through `object_store` (see the module
//! documentation of [`super`]).

use super::{not_collectable, DeleteOutcome, ObjectDeleter};
use crate::error::ObjectsError;
use crate::keys::{is_collectable, split_staged, Staged};
use crate::store::LakeStore;
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};

/// The deleter of a [`LakeStore`], through `object_store`'s `delete_stream`.
#[derive(Debug, Clone)]
pub struct StoreDeleter {
    store: LakeStore,
}

impl StoreDeleter {
    /// A deleter for `store`.
    pub fn new(store: LakeStore) -> Self {
        Self { store }
    }
}

#[async_trait]
impl ObjectDeleter for StoreDeleter {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, ObjectsError> {
        // Only collectable keys are sent; the others keep their place in the outcomes. Staged
        // uploads (of reference logs and of managed objects) are aborted, one request each.
        let sent: Vec<&String> = keys.iter().filter(|k| sent_in_bulk(k)).collect();
        let paths: Vec<object_store::path::Path> = sent.iter().map(|k| self.store.path(k)).collect();
        let input = futures::stream::iter(paths.clone().into_iter().map(Ok)).boxed();
        let results: Vec<object_store::Result<object_store::path::Path>> =
            self.store.object_store().delete_stream(input).collect().await;
        let mut deleted: HashSet<String> = HashSet::new();
        let mut not_found: HashSet<String> = HashSet::new();
        let mut failed: HashMap<String, String> = HashMap::new();
        let mut unattributed: Vec<String> = Vec::new();
        for r in results {
            match r {
                Ok(p) => {
                    deleted.insert(p.to_string());
                }
                Err(object_store::Error::NotFound { path, .. }) => {
                    not_found.insert(path.trim_start_matches('/').to_string());
                }
                Err(e) => {
                    let message = e.to_string();
                    match paths.iter().find(|p| message.contains(p.as_ref())) {
                        Some(p) => {
                            failed.insert(p.to_string(), message);
                        }
                        None => unattributed.push(message),
                    }
                }
            }
        }
        let mut outcomes = paths.iter().map(|p| {
            let s = p.to_string();
            if deleted.contains(&s) {
                // S3 reports a key that did not exist as deleted too.
                DeleteOutcome::Absent
            } else if not_found.contains(&s) || not_found.iter().any(|n| n.ends_with(&s)) {
                DeleteOutcome::NotFound
            } else if let Some(m) = failed.get(&s) {
                DeleteOutcome::Failed(m.clone())
            } else {
                DeleteOutcome::Failed(if unattributed.is_empty() {
                    "the store reported no outcome for this key".into()
                } else {
                    unattributed.join("; ")
                })
            }
        });
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

impl StoreDeleter {
    /// Aborts the multipart upload `id` of `key` (named in a plan as `<key>#upload=<id>`).
    async fn abort(&self, key: &str, id: &str) -> DeleteOutcome {
        let Some(requests) = self.store.s3_requests() else {
            return DeleteOutcome::Skipped("an upload can only be aborted on an s3:// root".into());
        };
        match requests.abort_multipart_upload(self.store.path(key).as_ref(), id).await {
            // S3 does not say whether the upload was still there.
            Ok(()) => DeleteOutcome::Absent,
            Err(e) => DeleteOutcome::Failed(e.to_string()),
        }
    }
}
