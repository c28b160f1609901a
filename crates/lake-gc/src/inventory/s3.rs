//! The inventory of an `s3://` lake: one ListObjectsV2 request per page.
//!
//! S3 returns keys in ascending UTF-8 byte order, `max-keys` bounds the page, and `start-after`
//! resumes after a key, so a stream's position is the last key it listed: its next page is the
//! request that starts after it. Requests go through
//! [`lake_store::s3_requests`], not object_store's listing: object_store parses every key with
//! `Path::parse`, which drops a trailing `/`, so a folder marker (`objects/<ULID>/x/`, made by
//! the S3 console, Hadoop s3a or sync tools) would list as the object `objects/<ULID>/x` and
//! break the key order. Here such a key keeps its slash and is a foreign entry: never a
//! candidate, and it pages and orders like any other key.

use super::{EntryKind, InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::GcError;
use crate::inventory::Foreign;
use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use lake_store::layout::OBJECTS_PREFIX;
use lake_store::store::LakeStore;
use lake_store::StoreError;

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

    /// The bucket key of a key relative to the root.
    fn full_key(&self, key: &str) -> String {
        let prefix = self.store.root().path();
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}/{key}")
        }
    }

    /// The page of up to `limit` keys after `after`: one request.
    async fn page(&self, after: Option<&str>, limit: usize) -> Result<InventoryPage, GcError> {
        let requests = self.store.s3_requests().ok_or_else(|| {
            GcError::from(StoreError::Root {
                root: self.store.display_root(),
                message: "the S3 inventory needs an s3:// root".into(),
            })
        })?;
        // A trailing slash: `objects-old/` must not match.
        let prefix = format!("{}/", self.full_key(OBJECTS_PREFIX));
        let root_prefix = self.full_key("");
        let start_after = after.map(|a| self.full_key(a));
        let page = requests.list_objects_v2(&prefix, start_after.as_deref(), limit).await?;
        let mut entries = Vec::with_capacity(page.objects.len());
        for o in page.objects {
            // `list_objects_v2` refuses keys outside the prefix; the root's prefix is in it.
            let key = o.key.strip_prefix(&root_prefix).unwrap_or(&o.key).to_string();
            let kind = if key.ends_with('/') { EntryKind::Foreign(Foreign::FolderMarker) } else { EntryKind::Object };
            entries.push(InventoryEntry { key, size: o.size, last_modified: o.last_modified, kind });
        }
        if entries.windows(2).any(|w| w[0].key >= w[1].key)
            || after.is_some_and(|a| entries.first().is_some_and(|e| e.key.as_str() <= a))
        {
            return Err(GcError::storage(
                &prefix,
                "the store returned keys out of order; refusing to plan from this listing",
            ));
        }
        let next = if page.truncated { entries.last().map(|e| e.key.clone()) } else { None };
        Ok(InventoryPage { entries, next, links: Vec::new() })
    }
}

impl ObjectInventory for S3Inventory {
    /// One ListObjectsV2 request per page, each starting after the last key of the one before.
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        let limit = page_size.clamp(1, 1000);
        // `None` once the listing is exhausted or failed.
        futures::stream::unfold(Some(after), move |after| async move {
            let after = after?;
            match self.page(after.as_deref(), limit).await {
                Ok(page) => {
                    let next = page.next.clone().map(Some);
                    Some((Ok(page), next))
                }
                Err(e) => Some((Err(e), None)),
            }
        })
        .fuse()
        .boxed()
    }

    /// Clock probes left under `_lake/clock/` and incomplete multipart uploads of managed
    /// objects, minted before `cutoff` (see [`ObjectInventory::own_garbage`]).
    fn own_garbage(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> futures::future::BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        Box::pin(super::own::own_garbage(&self.store, cutoff))
    }

    /// One HEAD request (see [`ObjectInventory::head`]); a key ending with `/` is no object here.
    fn head(&self, key: &str) -> futures::future::BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        let key = key.to_string();
        Box::pin(async move {
            if key.ends_with('/') {
                return Ok(None);
            }
            // S3 answers a HEAD's `Last-Modified` to the second (an HTTP date), where a listing
            // gives milliseconds: a whole-second time is taken as the last millisecond of its
            // second, so a key written just after a cutoff never looks older to an incremental
            // plan's look-up than to a full plan's listing.
            Ok(self.store.head(&key).await?.map(|meta| InventoryEntry {
                key,
                size: meta.size,
                last_modified: end_of_second(meta.last_modified),
                kind: EntryKind::Object,
            }))
        })
    }
}

/// `t` when it has a fraction of a second, else the last millisecond of its second (a HEAD's
/// `Last-Modified`, an HTTP date, has whole seconds; RFC 9110, section 5.6.7).
fn end_of_second(t: DateTime<Utc>) -> DateTime<Utc> {
    if t.timestamp_subsec_millis() == 0 {
        t + chrono::Duration::milliseconds(999)
    } else {
        t
    }
}

#[cfg(test)]
mod tests {
    use super::end_of_second;
    use chrono::{DateTime, Utc};

    /// A HEAD's whole-second time never looks older than the listing's milliseconds of the same
    /// write (written at .400 after a cutoff at .300: the HEAD says :00, taken as :00.999).
    #[test]
    fn a_whole_second_time_is_the_end_of_its_second_and_a_fraction_is_kept() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        assert_eq!(end_of_second(at("2026-12-07T12:00:00Z")), at("2026-12-07T12:00:00.999Z"));
        assert_eq!(end_of_second(at("2026-12-07T12:00:00.400Z")), at("2026-12-07T12:00:00.400Z"));
        assert!(end_of_second(at("2026-12-07T12:00:00Z")) > at("2026-12-07T12:00:00.300Z"));
    }
}
