//! The deleter of a local-folder lake (see the module documentation of [`super`]).

use super::{not_collectable, DeleteOutcome, ObjectDeleter};
use crate::error::GcError;
use crate::no_follow::{remove, Removal};
use async_trait::async_trait;
use lake_store::keys::is_collectable;
use lake_store::layout::OBJECTS_PREFIX;
use lake_store::store::LakeStore;
use lake_store::StoreError;

/// Removes files (and empty folders) under a local lake root, never through a symbolic link.
#[derive(Debug, Clone)]
pub struct LocalDeleter {
    store: LakeStore,
}

impl LocalDeleter {
    /// A deleter for the local-folder lake `store`.
    pub fn new(store: LakeStore) -> Self {
        Self { store }
    }
}

#[async_trait]
impl ObjectDeleter for LocalDeleter {
    async fn delete_batch(&self, keys: &[String]) -> Result<Vec<DeleteOutcome>, GcError> {
        let root = self.store.local_dir().map(std::path::Path::to_path_buf).ok_or_else(|| {
            GcError::from(StoreError::Root {
                root: self.store.display_root(),
                message: "the local deleter needs a local-folder root".into(),
            })
        })?;
        let keys = keys.to_vec();
        let remove_all = move || {
            keys.iter()
                .map(|key| {
                    if !is_collectable(key) {
                        return not_collectable(key);
                    }
                    match remove(&root, key, OBJECTS_PREFIX) {
                        Ok(Removal::Removed) => DeleteOutcome::Deleted,
                        Ok(Removal::Missing) => DeleteOutcome::NotFound,
                        Ok(Removal::Refused(reason)) => DeleteOutcome::Skipped(reason.to_string()),
                        Err(e) => DeleteOutcome::Failed(std::io::Error::from(e).to_string()),
                    }
                })
                .collect::<Vec<_>>()
        };
        tokio::task::spawn_blocking(remove_all).await.map_err(|e| GcError::storage(OBJECTS_PREFIX, e))
    }
}
