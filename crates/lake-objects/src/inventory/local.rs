//! The inventory of a local-folder lake.
//!
//! A folder's entries come back from the file system in no particular order, so the inventory
//! walks the managed prefix folder by folder, depth first, taking each folder's children in the
//! order that makes the walk yield keys in byte order: a sub-folder `d` sorts as `d/` (its keys
//! all start with `d/`), which places `a.b` before `a/x` exactly as a flat key sort does.
//!
//! Memory is bounded whatever the number of objects: a folder is read by streaming passes over
//! `std::fs::read_dir`, each keeping only the W smallest children after a cursor (a bounded
//! max-heap; W is [`WINDOW`] or the page size when larger), so a walk holds at most W children
//! per folder depth. The walk is cached between pages: a page that resumes after the last key of
//! the previous one continues it, so listing a folder of N children costs about N / W passes
//! over it, not one per page. Any other `after` rebuilds the walk with one pass per folder on
//! the path to `after`.
//!
//! Entries are read as object_store's `LocalFileSystem` reads them: symbolic links are followed
//! (broken ones skipped), files named like its staged uploads (`name#123`) are skipped, entries
//! that vanish while listing are skipped, a name that is not a valid object key (not UTF-8, or
//! an ASCII control character) fails the listing, and `size` and `last_modified` are the file's
//! length and modification time.

use super::{InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::ObjectsError;
use crate::layout::OBJECTS_PREFIX;
use crate::store::LakeStore;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use object_store::path::PathPart;
use std::collections::{BinaryHeap, VecDeque};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The default number of children one pass over a folder keeps (or the page size when larger):
/// about 64 bytes each, so a window of a big folder takes about 1 MiB.
pub const WINDOW: usize = 16_384;

/// Inventory of the managed prefix of a local-folder store.
///
/// Holds the walk of the last page (at most one window per folder depth) so that the next page
/// continues it; clones start without one.
pub struct LocalInventory {
    store: LakeStore,
    window: usize,
    cache: Mutex<Option<Walk>>,
}

impl std::fmt::Debug for LocalInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalInventory").field("store", &self.store).field("window", &self.window).finish()
    }
}

impl Clone for LocalInventory {
    fn clone(&self) -> Self {
        Self::with_window(self.store.clone(), self.window)
    }
}

impl LocalInventory {
    /// The inventory of `objects/` in `store`, reading folders [`WINDOW`] children at a time.
    pub fn new(store: LakeStore) -> Self {
        Self::with_window(store, WINDOW)
    }

    /// The inventory of `objects/` in `store`, keeping at most `window` (>= 1; or the page size
    /// when larger) children of a folder per pass: memory grows with it, passes over a big folder
    /// shrink with it.
    pub fn with_window(store: LakeStore, window: usize) -> Self {
        Self { store, window: window.max(1), cache: Mutex::new(None) }
    }
}

#[async_trait]
impl ObjectInventory for LocalInventory {
    /// Costs one `stat` per object returned plus one streaming pass over a folder per window of
    /// children taken from it (and one per folder on the path to `after` when `after` is not the
    /// `next` of the previous page).
    async fn list_page(&self, after: Option<&str>, limit: usize) -> Result<InventoryPage, ObjectsError> {
        let root = self.store.local_dir().map(Path::to_path_buf).ok_or_else(|| ObjectsError::Root {
            root: self.store.display_root(),
            message: "the local inventory needs a local-folder root".into(),
        })?;
        let cached = self.cache.lock().unwrap_or_else(PoisonError::into_inner).take();
        let walk = match (cached, after) {
            (Some(walk), Some(a)) if walk.last == a => walk,
            _ => Walk::start(root, after),
        };
        let limit = limit.max(1);
        let width = limit.max(self.window);
        let (page, walk) = if tokio::runtime::Handle::try_current().is_ok() {
            tokio::task::spawn_blocking(move || walk.page(limit, width))
                .await
                .map_err(|e| ObjectsError::storage(OBJECTS_PREFIX, e))??
        } else {
            walk.page(limit, width)?
        };
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = walk;
        Ok(page)
    }
}

/// One folder being walked.
#[derive(Debug)]
struct Frame {
    /// Key of the folder, without a trailing slash (`objects`, `objects/<ULID>/a`).
    key: String,
    /// Sort keys of the children not walked yet, smallest first: the name, plus `/` for a
    /// folder (a file name never contains `/`).
    window: VecDeque<String>,
    /// The next pass takes the children whose sort key is greater (all children when `None`).
    cursor: Option<String>,
    /// No child after `cursor` is left to read.
    done: bool,
}

impl Frame {
    fn new(key: String, cursor: Option<String>) -> Self {
        Self { key, window: VecDeque::new(), cursor, done: false }
    }

    /// One streaming pass over the folder: keeps the `width` smallest children after `cursor`.
    /// A folder that does not exist (or is no longer a folder) has no children.
    fn refill(&mut self, root: &Path, width: usize) -> Result<(), ObjectsError> {
        let fail = |e: std::io::Error| ObjectsError::storage(&self.key, e);
        let dir = root.join(&self.key);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                self.done = true;
                return Ok(());
            }
            Err(e) => return Err(fail(e)),
        };
        let mut heap: BinaryHeap<String> = BinaryHeap::new();
        let mut truncated = false;
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(fail(e)),
            };
            let mut name = entry.file_name().into_string().map_err(|n| {
                ObjectsError::storage(format!("{}/{}", self.key, n.to_string_lossy()), "file name is not UTF-8")
            })?;
            PathPart::parse(&name).map_err(|e| ObjectsError::storage(format!("{}/{name}", self.key), e))?;
            // Like object_store: follow symbolic links, skip broken or vanished entries.
            let dir = match entry.file_type() {
                Ok(t) if t.is_symlink() => match std::fs::metadata(entry.path()) {
                    Ok(m) => m.is_dir(),
                    Err(_) => continue,
                },
                Ok(t) => t.is_dir(),
                Err(_) => continue,
            };
            if dir {
                name.push('/');
            } else if is_staged_upload(&name) {
                continue;
            }
            if self.cursor.as_ref().is_some_and(|c| name <= *c) {
                continue;
            }
            if heap.len() >= width {
                truncated = true;
                if heap.peek().is_some_and(|top| name >= *top) {
                    continue;
                }
                heap.pop();
            }
            heap.push(name);
        }
        self.window = heap.into_sorted_vec().into();
        self.done = !truncated;
        if truncated {
            self.cursor = self.window.back().cloned();
        }
        Ok(())
    }
}

/// A depth-first walk of the managed prefix, resumable after `last`.
#[derive(Debug)]
struct Walk {
    root: PathBuf,
    /// Open folders, outermost first.
    stack: Vec<Frame>,
    /// The key of the first file of the next page, read ahead to tell whether one exists.
    pending: Option<String>,
    /// The last key returned: a page asked for after it continues this walk.
    last: String,
}

impl Walk {
    /// A walk of the keys under `objects/` strictly after `after`: along the folders of `after`,
    /// each folder takes the children after the one `after` is in (or is).
    fn start(root: PathBuf, after: Option<&str>) -> Self {
        let prefix = format!("{OBJECTS_PREFIX}/");
        let mut stack = Vec::new();
        match after.map(|a| (a, a.strip_prefix(&prefix))) {
            Some((_, Some(mut rest))) => {
                let mut key = OBJECTS_PREFIX.to_string();
                // Below `seg/`: this folder resumes after `seg/`, and `seg` after the rest.
                while let Some((seg, tail)) = rest.split_once('/') {
                    stack.push(Frame::new(key.clone(), Some(format!("{seg}/"))));
                    if matches!(seg, "" | "." | "..") {
                        break; // no such folder: nothing below it
                    }
                    key = format!("{key}/{seg}");
                    rest = tail;
                }
                if !rest.contains('/') {
                    stack.push(Frame::new(key, Some(rest.to_string())));
                }
            }
            // Outside the prefix: before all of its keys, or after all of them.
            Some((a, None)) if a > prefix.as_str() => {}
            _ => stack.push(Frame::new(OBJECTS_PREFIX.to_string(), None)),
        }
        Self { root, stack, pending: None, last: String::new() }
    }

    /// The next page of at most `limit` entries, and the walk to continue it (`None` when the
    /// listing is exhausted). Each file is read when it is returned: one that vanished is skipped.
    fn page(mut self, limit: usize, width: usize) -> Result<(InventoryPage, Option<Walk>), ObjectsError> {
        let mut entries = Vec::new();
        let mut pending = self.pending.take();
        while entries.len() < limit {
            let key = match pending.take() {
                Some(key) => Some(key),
                None => self.next_key(width)?,
            };
            let Some(key) = key else {
                return Ok((InventoryPage { entries, next: None }, None));
            };
            entries.extend(self.entry(key)?);
        }
        self.pending = self.next_key(width)?;
        match (&self.pending, entries.last()) {
            (Some(_), Some(last)) => {
                self.last = last.key.clone();
                let next = Some(self.last.clone());
                Ok((InventoryPage { entries, next }, Some(self)))
            }
            _ => Ok((InventoryPage { entries, next: None }, None)),
        }
    }

    /// The key of the next file of the walk in key order; `None` when every folder is walked.
    fn next_key(&mut self, width: usize) -> Result<Option<String>, ObjectsError> {
        while let Some(frame) = self.stack.last_mut() {
            if frame.window.is_empty() && !frame.done {
                frame.refill(&self.root, width)?;
            }
            let Some(child) = frame.window.pop_front() else {
                self.stack.pop();
                continue;
            };
            match child.strip_suffix('/') {
                Some(dir) => {
                    let key = format!("{}/{dir}", frame.key);
                    self.stack.push(Frame::new(key, None));
                }
                None => return Ok(Some(format!("{}/{child}", frame.key))),
            }
        }
        Ok(None)
    }

    /// The listing entry of the file at `key` (its target for a symbolic link); `None` when it
    /// vanished.
    fn entry(&self, key: String) -> Result<Option<InventoryEntry>, ObjectsError> {
        let meta = match std::fs::metadata(self.root.join(&key)) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ObjectsError::storage(key, e)),
        };
        let last_modified: DateTime<Utc> = meta.modified().map_err(|e| ObjectsError::storage(&key, e))?.into();
        Ok(Some(InventoryEntry { key, size: meta.len(), last_modified }))
    }
}

/// object_store's `LocalFileSystem` stages uploads as `name#<digits>` and lists no such file.
fn is_staged_upload(name: &str) -> bool {
    match name.split_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}
