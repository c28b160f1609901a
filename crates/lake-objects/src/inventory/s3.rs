//! The inventory of an `s3://` lake: one ListObjectsV2 request per page.
//!
//! S3 returns keys in ascending UTF-8 byte order, `max-keys` bounds the page, and `start-after`
//! (object_store's `offset`) resumes after a key, so a page needs no state beyond the last key.
//! Requests go through `object_store`'s `PaginatedListStore` for `AmazonS3`.

use super::{InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::ObjectsError;
use crate::layout::OBJECTS_PREFIX;
use crate::store::LakeStore;
use async_trait::async_trait;
use object_store::list::{PaginatedListOptions, PaginatedListStore};

/// Inventory of `objects/` in an S3 lake.
#[derive(Debug, Clone)]
pub struct S3Inventory {
    store: LakeStore,
}

impl S3Inventory {
    /// The inventory of `objects/` in `store` (which must be an `s3://` root).
    pub fn new(store: LakeStore) -> Self {
        Self { store }
    }

    fn full_key(&self, key: &str) -> String {
        self.store.path(key).to_string()
    }
}

#[async_trait]
impl ObjectInventory for S3Inventory {
    async fn list_page(&self, after: Option<&str>, limit: usize) -> Result<InventoryPage, ObjectsError> {
        let s3 = self.store.s3().ok_or_else(|| ObjectsError::Root {
            root: self.store.display_root(),
            message: "the S3 inventory needs an s3:// root".into(),
        })?;
        // A trailing slash: `objects-old/` must not match (object_store does not add one here).
        let prefix = format!("{}/", self.full_key(OBJECTS_PREFIX));
        let opts = PaginatedListOptions {
            offset: after.map(|a| self.full_key(a)),
            max_keys: Some(limit.clamp(1, 1000)),
            ..Default::default()
        };
        let result = s3.list_paginated(Some(&prefix), opts).await.map_err(|e| ObjectsError::storage(&prefix, e))?;
        let mut entries = Vec::with_capacity(result.result.objects.len());
        for m in result.result.objects {
            let key = self
                .store
                .key_of(&m.location)
                .ok_or_else(|| ObjectsError::storage(m.location.as_ref(), "listed key outside the lake root"))?;
            entries.push(InventoryEntry::object(key, m.size, m.last_modified));
        }
        if entries.windows(2).any(|w| w[0].key >= w[1].key)
            || after.is_some_and(|a| entries.first().is_some_and(|e| e.key.as_str() <= a))
        {
            return Err(ObjectsError::storage(
                &prefix,
                "the store returned keys out of order; refusing to plan from this listing",
            ));
        }
        let next = match result.page_token {
            Some(_) => entries.last().map(|e| e.key.clone()),
            None => None,
        };
        Ok(InventoryPage { entries, next })
    }
}
