//! GC's own garbage outside the listing of `objects/`: what a killed or failed run leaves under
//! the root that no listing of the managed prefix shows (see
//! [`super::ObjectInventory::own_garbage`]).
//!
//! - Store-clock probes (`_lake/clock/<ULID>`, [`lake_store::clock`]): a dry run writes one, reads its
//!   `last_modified` and deletes it; a run killed in between, or whose delete failed (S3
//!   throttling), leaves it. Locally a run killed during the probe's write leaves object_store's
//!   staging file `<probe>#<n>`, which object_store's listing does not show: the folder is read
//!   itself.
//! - On S3, incomplete multipart uploads of managed objects (an upload above
//!   [`lake_store::writer::PART_SIZE`] killed before it completed or aborted): ListMultipartUploads
//!   under `objects/`. Locally the same upload is a staging file in the object's folder, which
//!   the local inventory lists itself ([`super::EntryKind::Staged`]).
//!
//! Each is kept only when its key's ULID was minted before the cutoff; the planner checks the
//! rest of the age rule (`last_modified` before the cutoff) like for any entry.

use super::{EntryKind, InventoryEntry};
use crate::error::GcError;
use chrono::{DateTime, Utc};
use lake_store::keys::{minted_at, parse_clock_probe, parse_staged_object};
use lake_store::layout::{CLOCK_PREFIX, OBJECTS_PREFIX};
use lake_store::store::LakeStore;

/// Clock probes and (on S3) incomplete multipart uploads of managed objects in `store` minted
/// before `cutoff`, sorted by key.
///
/// # Errors
/// [`StoreError::Storage`](lake_store::StoreError::Storage) when a folder or listing cannot be read.
pub(crate) async fn own_garbage(store: &LakeStore, cutoff: DateTime<Utc>) -> Result<Vec<InventoryEntry>, GcError> {
    let old = |key: &str| minted_at(key).is_some_and(|m| m < cutoff);
    let mut found = Vec::new();
    match store.local_dir() {
        Some(dir) => {
            let folder = dir.join(CLOCK_PREFIX);
            let entries = match std::fs::read_dir(&folder) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
                Err(e) => return Err(GcError::storage(CLOCK_PREFIX, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| GcError::storage(CLOCK_PREFIX, e))?;
                let Ok(name) = entry.file_name().into_string() else { continue };
                let key = format!("{CLOCK_PREFIX}/{name}");
                if parse_clock_probe(&key).is_none() || !old(&key) {
                    continue;
                }
                // The entry itself (a link is never followed, and the deleter refuses it).
                let meta = match std::fs::symlink_metadata(entry.path()) {
                    Ok(meta) if meta.is_file() => meta,
                    Ok(_) => continue,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(GcError::storage(&key, e)),
                };
                let last_modified: DateTime<Utc> = meta.modified().map_err(|e| GcError::storage(&key, e))?.into();
                found.push(InventoryEntry { key, size: meta.len(), last_modified, kind: EntryKind::Object });
            }
        }
        None => {
            for (key, meta) in store.list_all(CLOCK_PREFIX).await? {
                if parse_clock_probe(&key).is_some() && old(&key) {
                    found.push(InventoryEntry {
                        key,
                        size: meta.size,
                        last_modified: meta.last_modified,
                        kind: EntryKind::Object,
                    });
                }
            }
            if let Some(requests) = store.s3_requests() {
                let root = store.prefix().to_string();
                let full = |key: &str| if root.is_empty() { key.to_string() } else { format!("{root}/{key}") };
                // A trailing slash: `objects-old/` must not match.
                for upload in requests.list_multipart_uploads(&format!("{}/", full(OBJECTS_PREFIX))).await? {
                    let key = match root.is_empty() {
                        true => upload.key.clone(),
                        false => upload.key.strip_prefix(&format!("{root}/")).unwrap_or(&upload.key).to_string(),
                    };
                    let key = format!("{key}#upload={}", upload.upload_id);
                    if parse_staged_object(&key).is_some() && old(&key) {
                        found.push(InventoryEntry {
                            key,
                            size: 0,
                            last_modified: upload.initiated,
                            kind: EntryKind::Staged,
                        });
                    }
                }
            }
        }
    }
    found.sort_by(|a, b| a.key.cmp(&b.key));
    found.dedup_by(|a, b| a.key == b.key);
    Ok(found)
}
