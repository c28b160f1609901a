//! Deleters: bulk deletes with an outcome per key.
//!
//! On S3, `object_store`'s `delete_stream` sends `DeleteObjects` requests of up to 1,000 keys
//! (S3's limit per request) and reports per-key errors; locally it removes files one by one.
//! S3 reports a missing key as deleted (DeleteObjects is idempotent); a local store reports it
//! as not found. Both count as done for GC.

use crate::error::ObjectsError;
use crate::store::LakeStore;
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::{HashMap, HashSet};

/// The outcome of deleting one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The store deleted it.
    Deleted,
    /// It was already gone.
    NotFound,
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
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, ObjectsError>;
}

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
        let paths: Vec<object_store::path::Path> = keys.iter().map(|k| self.store.path(k)).collect();
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
        Ok(paths
            .iter()
            .map(|p| {
                let s = p.to_string();
                if deleted.contains(&s) {
                    DeleteOutcome::Deleted
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
            })
            .collect())
    }
}
