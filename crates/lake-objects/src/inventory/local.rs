//! The inventory of a local-folder lake.
//!
//! `LocalFileSystem::list` walks directories in no particular order, so this inventory walks
//! the managed prefix folder by folder with `list_with_delimiter`, sorting each folder's
//! entries so that the walk yields keys in byte order: a sub-folder `d` sorts as `d/` (its keys
//! all start with `d/`), which places `a.b` before `a/x` exactly as a flat key sort does.
//! Folders entirely before `after` are skipped without listing them.

use super::{InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::ObjectsError;
use crate::layout::OBJECTS_PREFIX;
use crate::store::LakeStore;
use async_trait::async_trait;

/// Inventory of the managed prefix of a local (or any `list_with_delimiter`) store.
#[derive(Debug, Clone)]
pub struct LocalInventory {
    store: LakeStore,
    prefix: String,
}

impl LocalInventory {
    /// The inventory of `objects/` in `store`.
    pub fn new(store: LakeStore) -> Self {
        Self { store, prefix: OBJECTS_PREFIX.to_string() }
    }
}

enum Item {
    File(InventoryEntry),
    Dir(String),
}

impl Item {
    fn sort_key(&self) -> String {
        match self {
            Item::File(e) => e.key.clone(),
            Item::Dir(d) => format!("{d}/"),
        }
    }
}

#[async_trait]
impl ObjectInventory for LocalInventory {
    async fn list_page(&self, after: Option<&str>, limit: usize) -> Result<InventoryPage, ObjectsError> {
        let limit = limit.max(1);
        let mut out: Vec<InventoryEntry> = Vec::new();
        let mut stack = vec![Item::Dir(self.prefix.clone())];
        while let Some(item) = stack.pop() {
            match item {
                Item::File(e) => {
                    if after.is_some_and(|a| e.key.as_str() <= a) {
                        continue;
                    }
                    if out.len() == limit {
                        // One more entry exists: the listing is not exhausted.
                        let next = out.last().map(|l| l.key.clone());
                        return Ok(InventoryPage { entries: out, next });
                    }
                    out.push(e);
                }
                Item::Dir(d) => {
                    let slash = format!("{d}/");
                    if let Some(a) = after {
                        if slash.as_str() < a && !a.starts_with(&slash) {
                            continue;
                        }
                    }
                    let (dirs, objects) = self.store.list_dir(&d).await?;
                    let mut items: Vec<Item> = dirs.into_iter().map(Item::Dir).collect();
                    for m in objects {
                        if let Some(key) = self.store.key_of(&m.location) {
                            items.push(Item::File(InventoryEntry {
                                key,
                                size: m.size,
                                last_modified: m.last_modified,
                            }));
                        }
                    }
                    items.sort_by_key(|i| std::cmp::Reverse(i.sort_key()));
                    stack.extend(items);
                }
            }
        }
        Ok(InventoryPage { entries: out, next: None })
    }
}
