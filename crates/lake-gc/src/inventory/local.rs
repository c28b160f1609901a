//! The inventory of a local-folder lake.
//!
//! A folder's entries come back from the file system in no particular order, so the inventory
//! walks the managed prefix folder by folder, depth first, taking each folder's children in the
//! order that makes the walk yield keys in byte order: a sub-folder `d` sorts as `d/` (its keys
//! all start with `d/`), which places `a.b` before `a/x` exactly as a flat key sort does.
//!
//! One pass per folder: a walk reads each folder it enters once, in one pass over
//! `std::fs::read_dir`, and keeps its children (those after the walk's position in it) sorted
//! until it has walked them. Up to W of them (W is [`WINDOW`], or the window given to
//! [`LocalInventory::with_window`]) are sorted in memory. Past W, the pass feeds them to an
//! external sort (`crate::spill::SortedRuns`), which writes sorted runs of W children to a
//! temporary folder, and the walk takes them from the merge of the runs.
//!
//! Cost: a folder of N children costs one pass and O(N log N) comparisons, plus, past W, N names
//! written to and read back from N / W run files once each; each file returned costs one `stat`.
//! `objects/`, one sub-folder per object, is thus listed in O(N log N), where passes keeping W
//! children each cost O(N² / W). A stream ([`ObjectInventory::list_from`]) owns its walk and
//! continues it from page to page. A stream from `after` starts a new walk, with one pass over
//! each folder on the path to `after`, keeping only the children after it. A walk does not list
//! children added to a folder after it read the folder (a later walk does).
//!
//! Memory is bounded by W and the constants below, not by the number of objects: per open folder
//! (one per depth), at most W children, plus for a folder sorted through runs one buffered record
//! and one open file per run (N / W of them, at most 64: `lake_engine::spill` merges runs into
//! one past that); plus what is read ahead, at most [`LOOK_AHEAD`] folders of at most
//! [`SMALL_FOLDER`] children.
//!
//! Reading ahead: most of a listing's time is kernel time in the folders of one object each
//! (open, read, close, and the `stat` of the file). A sub-folder of at most [`SMALL_FOLDER`]
//! children is read whole with its files' metadata; a bigger one is handed back mid-pass and the
//! walk finishes that same pass as above. The walk takes up to [`LOOK_AHEAD`] children at a time
//! and shares their sub-folders with [`READERS`] reader threads (started for a page and joined
//! before it returns): it reads the first share itself as it reaches it while each reader reads
//! one of the later shares, and it takes the readers' folders in key order. It takes no more
//! children ahead than the entries left in the page (plus one), and a page's files are read
//! during that page: what a page read ahead but did not return, and the files of a folder an
//! earlier page read, are read again.
//!
//! Entries are read as object_store's `LocalFileSystem` reads them, except for symbolic links
//! and its staging files: a file named like one of its staged uploads (`name#123`, an upload
//! that has not finished, or never will: a process killed mid-upload leaves it) is listed as
//! [`EntryKind::Staged`] (object_store's own listing skips it), entries that vanish while
//! listing are skipped, a name that is not a valid object key (not UTF-8, or an ASCII control
//! character) fails the listing, and `size` and `last_modified` are the file's length and
//! modification time. A symbolic link is never followed (object_store follows them): it is
//! listed as itself, foreign, like a named pipe, socket or device node
//! ([`EntryKind::Foreign`]); folders are opened without following a link anywhere in their
//! path (`crate::no_follow`), so a link swapped in while listing is not walked either. A folder
//! with no entries is listed itself, as `key/` ([`EntryKind::EmptyFolder`]). Folders are read with `getdents64` on a descriptor (rustix's
//! `Dir`) and files stat'ed relative to it: per object, one `openat`, two `getdents64` (the
//! second finds the end), one `fstatat` and one `close`.
//!
//! (Longer than most modules: the walk, its readers and its external sort of big folders are one
//! algorithm whose invariants (key order, one pass per folder, bounded memory) span all of them.)

use super::{EntryKind, InventoryEntry, InventoryPage, ObjectInventory};
use crate::error::GcError;
use crate::inventory::Foreign;
use crate::spill::{MergedKeys, SortedRuns};
use chrono::{DateTime, Utc};
use futures::stream::{BoxStream, StreamExt};
use lake_store::layout::OBJECTS_PREFIX;
use lake_store::store::LakeStore;
use lake_store::StoreError;
use object_store::path::PathPart;
use rustix::fs::{AtFlags, Dir, FileType};
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Mutex, PoisonError};
use std::thread::Scope;

/// The default number of children of a folder held in memory: about 100 bytes each with the
/// lake's names, so about 1.5 MiB. A folder with more is sorted externally.
pub const WINDOW: usize = 16_384;

/// The default number of reader threads reading sub-folders alongside the walk. On 2 cores, one
/// reader listed 200,000 objects about a third faster than none, and two were slower than one.
pub const READERS: usize = 1;

/// The walk takes at most this many children of a folder at a time and shares their sub-folders
/// with the readers.
pub const LOOK_AHEAD: usize = 64;

/// A sub-folder of at most this many children (or of the window, when smaller) is read whole
/// with the metadata of its files.
pub const SMALL_FOLDER: usize = 64;

/// What `SortedRuns::new` is given per child of the window, in bytes: its budget counts each
/// name's allocation plus a `String` (24 bytes); 64 keeps about a window of the lake's names
/// (26-character ULID folders) per run.
const SPILL_BUDGET_PER_CHILD: usize = 64;

/// Inventory of the managed prefix of a local-folder store: its configuration only; each stream
/// it returns holds its own walk (at most one window per folder depth).
#[derive(Debug, Clone)]
pub struct LocalInventory {
    store: LakeStore,
    window: usize,
    readers: usize,
}

impl LocalInventory {
    /// The lake root's folder.
    ///
    /// # Errors
    /// [`StoreError::Root`] for a store that is not a local folder.
    fn root(&self) -> Result<PathBuf, GcError> {
        self.store.local_dir().map(Path::to_path_buf).ok_or_else(|| {
            GcError::from(StoreError::Root {
                root: self.store.display_root(),
                message: "the local inventory needs a local-folder root".into(),
            })
        })
    }

    /// The inventory of `objects/` in `store`, holding up to [`WINDOW`] children of a folder in
    /// memory and reading sub-folders on [`READERS`] threads besides the walk.
    pub fn new(store: LakeStore) -> Self {
        Self::with_window(store, WINDOW)
    }

    /// The inventory of `objects/` in `store`, holding up to `window` (>= 1) children of a folder
    /// in memory: memory grows with it, and a folder with more children is sorted in runs of
    /// `window` spilled to a temporary folder.
    pub fn with_window(store: LakeStore, window: usize) -> Self {
        Self { store, window: window.max(1), readers: READERS }
    }

    /// The same inventory reading sub-folders on `readers` threads besides the walk (0: the walk
    /// reads every folder itself).
    pub fn with_readers(mut self, readers: usize) -> Self {
        self.readers = readers;
        self
    }
}

impl ObjectInventory for LocalInventory {
    /// A walk from `after`, one page at a time (on a blocking thread when a Tokio runtime is
    /// present). Costs one `stat` per object returned plus one pass over each folder the walk
    /// enters and over each folder on the path to `after`; a folder of more children than the
    /// window is sorted through run files.
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        let root = match self.root() {
            Ok(root) => root,
            Err(error) => return futures::stream::once(async move { Err(error) }).boxed(),
        };
        let walk = Walk::start(root, after.as_deref());
        let (limit, window, readers) = (page_size.max(1), self.window, self.readers);
        // `None` once the walk is done or failed.
        futures::stream::unfold(Some(walk), move |walk| async move {
            let walk = walk?;
            let read = if tokio::runtime::Handle::try_current().is_ok() {
                tokio::task::spawn_blocking(move || walk.page(limit, window, readers))
                    .await
                    .unwrap_or_else(|e| Err(GcError::storage(OBJECTS_PREFIX, e)))
            } else {
                walk.page(limit, window, readers)
            };
            match read {
                Ok((page, walk)) => Some((Ok(page), walk)),
                Err(e) => Some((Err(e), None)),
            }
        })
        .fuse()
        .boxed()
    }

    /// Clock probes left under `_lake/clock/` (a staging file of an object's upload is listed by
    /// the walk itself, [`EntryKind::Staged`]), minted before `cutoff` (see
    /// [`ObjectInventory::own_garbage`]).
    fn own_garbage(
        &self,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> futures::future::BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        Box::pin(super::own::own_garbage(&self.store, cutoff))
    }

    /// [`ObjectInventory::links_among`]: the keys split in contiguous parts, each part on a
    /// blocking thread (as many as the machine has cores, at most 8; inline outside a Tokio
    /// runtime), links in the keys' order. Per key one `openat2(O_PATH, RESOLVE_NO_SYMLINKS)`
    /// relative to `objects/` ([`crate::no_follow::resolves_plainly`]); a key whose path meets
    /// a link, a mount or a file is looked up as [`ObjectInventory::head`] does.
    fn links_among(&self, keys: Vec<String>) -> futures::future::BoxFuture<'_, Result<Vec<String>, GcError>> {
        Box::pin(async move {
            let root = self.root()?;
            if tokio::runtime::Handle::try_current().is_err() {
                return links_local(&root, &keys);
            }
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
            let per_thread = keys.len().div_ceil(threads).max(1);
            let mut parts = Vec::new();
            let mut keys = keys.into_iter();
            loop {
                let part: Vec<String> = keys.by_ref().take(per_thread).collect();
                if part.is_empty() {
                    break;
                }
                let root = root.clone();
                parts.push(tokio::task::spawn_blocking(move || links_local(&root, &part)));
            }
            let mut links = Vec::new();
            for part in parts {
                links.extend(part.await.map_err(|e| GcError::storage(OBJECTS_PREFIX, e))??);
            }
            Ok(links)
        })
    }

    /// `lstat`s relative to the key's folder, opened without following a link (see
    /// [`ObjectInventory::head`]).
    fn head(&self, key: &str) -> futures::future::BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        let key = key.to_string();
        Box::pin(async move {
            let root = self.root()?;
            head_local(&root, &key)
        })
    }
}

/// [`LocalInventory`]'s [`ObjectInventory::links_among`] on this thread.
fn links_local(root: &Path, keys: &[String]) -> Result<Vec<String>, GcError> {
    use rustix::io::Errno;
    // `objects/` itself a link, a mount or missing: every key is looked up.
    let objects = crate::no_follow::open_folder(root, OBJECTS_PREFIX).ok();
    let mut links = Vec::new();
    for key in keys {
        let rest = key.strip_prefix(OBJECTS_PREFIX).and_then(|k| k.strip_prefix('/')).map(|k| k.trim_end_matches('/'));
        let plain = match (&objects, rest) {
            (Some(objects), Some(rest)) if !rest.is_empty() => {
                match crate::no_follow::resolves_plainly(objects, rest) {
                    // A missing component: no link before it (resolution stops at the first).
                    Ok(plain) => plain,
                    Err(Errno::NOENT) => true,
                    Err(Errno::NOSYS | Errno::PERM) => false,
                    Err(e) => return Err(GcError::storage(key, std::io::Error::from(e))),
                }
            }
            _ => false,
        };
        if !plain {
            if let Some(entry) = head_local(root, key)? {
                if entry.kind == EntryKind::Foreign(Foreign::SymbolicLink) {
                    links.push(entry.key);
                }
            }
        }
    }
    Ok(links)
}

/// [`LocalInventory`]'s [`ObjectInventory::head`].
fn head_local(root: &Path, key: &str) -> Result<Option<InventoryEntry>, GcError> {
    use rustix::io::Errno;
    let storage = |e: Errno| GcError::storage(key, std::io::Error::from(e));
    let (folder, name) = match key.strip_suffix('/') {
        Some(folder) => (folder, None),
        None => match key.rsplit_once('/') {
            Some((folder, name)) => (folder, Some(name)),
            None => return Ok(None),
        },
    };
    let fd = match crate::no_follow::open_folder(root, folder) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(None),
        Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => {
            // A link (or a mount, or a file) on the path: the first such component, as itself.
            let mut prefix = String::new();
            for part in folder.split('/') {
                prefix = if prefix.is_empty() { part.to_string() } else { format!("{prefix}/{part}") };
                let st = match rustix::fs::statat(rustix::fs::CWD, root.join(&prefix), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    Err(Errno::NOENT) => return Ok(None),
                    Err(e) => return Err(storage(e)),
                };
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    return Ok(meta_of(&st).map(|m| InventoryEntry {
                        key: prefix.clone(),
                        size: m.size,
                        last_modified: m.last_modified,
                        kind: m.kind,
                    }));
                }
            }
            // A mount crossing: never looked through, like a link.
            return Ok(Some(InventoryEntry {
                key: folder.to_string(),
                size: 0,
                last_modified: DateTime::<Utc>::MIN_UTC,
                kind: EntryKind::Foreign(Foreign::Unknown),
            }));
        }
        Err(e) => return Err(storage(e)),
    };
    let Some(name) = name else {
        // A folder key: an empty folder when it holds nothing.
        let st = rustix::fs::fstat(&fd).map_err(storage)?;
        for child in Dir::read_from(&fd).map_err(storage)? {
            let child = child.map_err(storage)?;
            if !matches!(child.file_name().to_bytes(), b"." | b"..") {
                return Ok(None);
            }
        }
        return Ok(meta_of(&st).map(|m| InventoryEntry {
            key: key.to_string(),
            size: 0,
            last_modified: m.last_modified,
            kind: EntryKind::EmptyFolder,
        }));
    };
    let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(None),
        Err(e) => return Err(storage(e)),
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        return Ok(None);
    }
    Ok(meta_of(&st).map(|m| {
        let kind = match m.kind {
            EntryKind::Object if is_staged_upload(key) => EntryKind::Staged,
            kind => kind,
        };
        InventoryEntry { key: key.to_string(), size: m.size, last_modified: m.last_modified, kind }
    }))
}

/// The size, modification time and kind of a file, read with its folder.
#[derive(Debug, Clone, Copy)]
struct Meta {
    size: u64,
    last_modified: DateTime<Utc>,
    kind: EntryKind,
}

/// The listing kind of a non-folder entry of file type `kind`: a regular file is an object,
/// anything else is foreign (never followed, planned or deleted).
fn kind_of(kind: FileType) -> EntryKind {
    match kind {
        FileType::RegularFile => EntryKind::Object,
        FileType::Symlink => EntryKind::Foreign(Foreign::SymbolicLink),
        FileType::Fifo => EntryKind::Foreign(Foreign::NamedPipe),
        FileType::Socket => EntryKind::Foreign(Foreign::Socket),
        FileType::CharacterDevice | FileType::BlockDevice => EntryKind::Foreign(Foreign::DeviceNode),
        _ => EntryKind::Foreign(Foreign::Unknown),
    }
}

/// A child of a folder.
#[derive(Debug)]
struct Child {
    /// Its sort key: the name, plus `/` for a folder (a file name never contains `/`).
    name: String,
    /// A file's metadata, when it was read with its folder.
    meta: Option<Meta>,
    /// It is a symbolic link (known from the folder's entry type, at no cost).
    link: bool,
}

/// A child taken from its folder's sorted children ahead of the walk.
struct Ahead {
    child: Child,
    /// A sub-folder handed to a reader: its reading is the next one of the frame's.
    by_reader: bool,
}

/// A sub-folder read by [`read_small`].
type Reading = Result<Folder, GcError>;

/// A sub-folder as [`read_small`] read it.
enum Folder {
    /// Gone, or no longer a folder: no children.
    Missing,
    /// All its children, with the metadata of its files.
    Whole(Vec<Child>),
    /// Its first children, and the rest of the pass.
    Partial(Vec<Child>, Entries),
}

/// One folder being walked.
struct Frame {
    /// Key of the folder, without a trailing slash (`objects`, `objects/<ULID>/a`).
    key: String,
    /// Only the children whose sort key is greater are walked (all when `None`).
    cursor: Option<String>,
    /// The folder was read: its children not walked yet are `ahead`, then `front`, then `rest`.
    read: bool,
    /// The metadata in `front` was read during this page.
    fresh: bool,
    /// The smallest children not taken yet, in order.
    front: VecDeque<Child>,
    /// The children after `front`, from the merge of a big folder's runs.
    rest: Option<MergedKeys>,
    /// Children taken from `front` and `rest`, in order, their sub-folders read ahead.
    ahead: VecDeque<Ahead>,
    /// The batches of sub-folders handed to readers, in order, with their number of folders...
    batches: VecDeque<(Receiver<Vec<Reading>>, usize)>,
    /// ...and the folders they read not taken yet (`None`: the reader failed; the walk reads it).
    readings: VecDeque<Option<Reading>>,
    /// The folder was read whole (no cursor) and has no children: listed as an empty folder.
    empty: bool,
    /// Keys of the symbolic links its read found, whether or not the walk reaches them.
    links: Vec<String>,
}

impl Frame {
    fn new(key: String, cursor: Option<String>) -> Self {
        Self {
            key,
            cursor,
            read: false,
            fresh: false,
            front: VecDeque::new(),
            rest: None,
            ahead: VecDeque::new(),
            batches: VecDeque::new(),
            readings: VecDeque::new(),
            empty: false,
            links: Vec::new(),
        }
    }

    /// Reads the folder in one pass (a folder that does not exist, or is no longer a folder, has
    /// no children).
    fn read(&mut self, root: &Path, window: usize) -> Result<(), GcError> {
        self.read = true;
        match Entries::open(root, &self.key)? {
            Some(entries) => self.collect(Vec::new(), entries, window),
            None => Ok(()),
        }
    }

    /// Takes the folder as [`read_small`] read it.
    fn read_from(&mut self, folder: Folder, window: usize) -> Result<(), GcError> {
        self.read = true;
        match folder {
            Folder::Missing => Ok(()),
            Folder::Whole(mut children) => {
                self.empty = children.is_empty() && self.cursor.is_none();
                let key = &self.key;
                self.links.extend(children.iter().filter(|c| c.link).map(|c| format!("{key}/{}", c.name)));
                children.sort_unstable_by(|a, b| a.name.cmp(&b.name));
                self.front = children.into();
                self.fresh = true;
                Ok(())
            }
            Folder::Partial(head, entries) => self.collect(head, entries, window),
        }
    }

    /// Finishes a pass over the folder whose first children are `head`: its children after the
    /// cursor, sorted in memory up to `window` of them, externally past it.
    fn collect(&mut self, head: Vec<Child>, mut entries: Entries, window: usize) -> Result<(), GcError> {
        let cursor = self.cursor.as_deref();
        let read = std::iter::from_fn(|| entries.next_child(false));
        let mut memory = Vec::new();
        let mut runs: Option<SortedRuns> = None;
        for child in head.into_iter().map(|c| Ok(Some(c))).chain(read) {
            let Some(Child { name, link, .. }) = child? else { continue };
            if link {
                self.links.push(format!("{}/{name}", self.key));
            }
            if cursor.is_some_and(|c| name.as_str() <= c) {
                continue;
            }
            match &mut runs {
                Some(runs) => runs.push(name)?,
                None if memory.len() < window => memory.push(name),
                None => {
                    let mut spilled = SortedRuns::new(window.saturating_mul(SPILL_BUDGET_PER_CHILD));
                    for name in std::mem::take(&mut memory).into_iter().chain([name]) {
                        spilled.push(name)?;
                    }
                    runs = Some(spilled);
                }
            }
        }
        match runs {
            Some(runs) => self.rest = Some(runs.finish()?),
            None => {
                self.empty = memory.is_empty() && self.cursor.is_none();
                memory.sort_unstable();
                self.front = memory.into_iter().map(|name| Child { name, meta: None, link: false }).collect();
            }
        }
        Ok(())
    }

    /// The next child in order, from `front` then `rest`.
    fn next_child(&mut self) -> Result<Option<Child>, GcError> {
        if let Some(child) = self.front.pop_front() {
            return Ok(Some(child));
        }
        let Some(rest) = &mut self.rest else { return Ok(None) };
        match rest.next_key()? {
            Some(name) => Ok(Some(Child { name, meta: None, link: false })),
            None => {
                self.rest = None; // removes the run files
                Ok(None)
            }
        }
    }

    /// The next child in order, with its folder when a reader read it; `None` when every child
    /// was taken.
    fn take(
        &mut self,
        readers: &mut Readers<'_, '_>,
        ahead: usize,
    ) -> Result<Option<(Child, Option<Reading>)>, GcError> {
        if self.ahead.is_empty() {
            self.take_ahead(readers, ahead)?;
        }
        let Some(Ahead { child, by_reader }) = self.ahead.pop_front() else { return Ok(None) };
        if !by_reader {
            return Ok(Some((child, None)));
        }
        if self.readings.is_empty() {
            if let Some((batch, folders)) = self.batches.pop_front() {
                match batch.recv() {
                    Ok(readings) => self.readings.extend(readings.into_iter().map(Some)),
                    Err(_) => self.readings.extend((0..folders).map(|_| None)),
                }
            }
        }
        Ok(Some((child, self.readings.pop_front().flatten())))
    }

    /// Takes up to `ahead` (at most [`LOOK_AHEAD`]) children and shares their sub-folders with
    /// the readers: the walk reads the first share itself as it reaches them, while each reader
    /// reads one of the shares after it. The walk's share is as big as a reader's, so that with
    /// the rest of its work it seldom waits for a reader.
    fn take_ahead(&mut self, readers: &mut Readers<'_, '_>, ahead: usize) -> Result<(), GcError> {
        let mut children = Vec::new();
        while children.len() < ahead.clamp(1, LOOK_AHEAD) {
            let Some(child) = self.next_child()? else { break };
            children.push(child);
        }
        let dirs: Vec<usize> = (0..children.len()).filter(|&i| children[i].name.ends_with('/')).collect();
        let share = dirs.len().div_ceil(readers.max + 1).max(1);
        let mut by_reader = vec![false; children.len()];
        for batch in dirs.chunks(share).skip(1) {
            let keys = batch.iter().map(|&i| format!("{}/{}", self.key, children[i].name.trim_end_matches('/')));
            if let Some(reading) = readers.read(keys.collect()) {
                self.batches.push_back((reading, batch.len()));
                batch.iter().for_each(|&i| by_reader[i] = true);
            }
        }
        self.ahead = children.into_iter().zip(by_reader).map(|(child, by_reader)| Ahead { child, by_reader }).collect();
        Ok(())
    }

    /// At the end of a page: the children read ahead go back to `front` unread, and the
    /// metadata read during the page is stale.
    fn rewind(&mut self) {
        while let Some(ahead) = self.ahead.pop_back() {
            self.front.push_front(ahead.child);
        }
        self.batches.clear();
        self.readings.clear();
        self.fresh = false;
    }
}

/// One pass over a folder's entries, read with `getdents64` on a descriptor of the folder
/// (rustix's `Dir`): unlike `std::fs::read_dir` (glibc's `opendir`), opening costs no `fstat`,
/// and a file's metadata is read relative to the folder's descriptor.
struct Entries {
    dir: Dir,
    key: String,
}

fn errno(key: &str, e: rustix::io::Errno) -> GcError {
    GcError::storage(key, std::io::Error::from(e))
}

impl Entries {
    /// Opens the folder `key` under `root` without following a symbolic link anywhere in
    /// `key` (the root's own path is resolved when the lake is opened), nor a mount point below
    /// `objects/`; `None` when it is gone, not a folder, reached through a symbolic link
    /// (swapped in since it was listed), or a mount point (never listed through).
    fn open(root: &Path, key: &str) -> Result<Option<Self>, GcError> {
        let fd = match crate::no_follow::open_folder(root, key) {
            Ok(fd) => fd,
            Err(e)
                if e == rustix::io::Errno::NOENT
                    || e == rustix::io::Errno::NOTDIR
                    || e == rustix::io::Errno::LOOP
                    || e == rustix::io::Errno::XDEV =>
            {
                return Ok(None)
            }
            Err(e) => return Err(errno(key, e)),
        };
        let dir = Dir::new(fd).map_err(|e| errno(key, e))?;
        Ok(Some(Self { dir, key: key.to_string() }))
    }

    /// The next child (`Ok(None)` for an entry object_store does not list), with `stat` the
    /// metadata of a file; `None` at the end of the pass.
    fn next_child(&mut self, stat: bool) -> Option<Result<Option<Child>, GcError>> {
        loop {
            let entry = match self.dir.read()? {
                Ok(entry) => entry,
                Err(e) if e == rustix::io::Errno::NOENT => return Some(Ok(None)),
                Err(e) => return Some(Err(errno(&self.key, e))),
            };
            let raw = entry.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            return Some(self.classify(raw, entry.file_type(), stat));
        }
    }

    /// The sort key of the entry `raw` of type `kind`, and with `stat` the metadata of a file;
    /// `None` for an entry object_store does not list.
    fn classify(&self, raw: &[u8], kind: FileType, stat: bool) -> Result<Option<Child>, GcError> {
        let key = &self.key;
        let mut name = String::from_utf8(raw.to_vec()).map_err(|n| {
            GcError::storage(format!("{key}/{}", String::from_utf8_lossy(n.as_bytes())), "file name is not UTF-8")
        })?;
        PathPart::parse(&name).map_err(|e| GcError::storage(format!("{key}/{name}"), e))?;
        // Never followed: a symbolic link is the link itself (foreign), whatever it points at.
        // An entry of unknown type (some file systems) is stat'ed to tell a folder.
        let (dir, meta) = match kind {
            FileType::Directory => (true, None),
            FileType::Unknown => match self.lstat(&name) {
                Ok(Some(st)) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => (true, None),
                Ok(Some(st)) => (false, stat.then(|| meta_of(&st)).flatten()),
                Ok(None) => return Ok(None),
                Err(_) => (false, None), // the walk reports it when it returns the entry
            },
            _ if !stat => (false, None),
            _ => match self.lstat(&name) {
                Ok(Some(st)) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => (true, None),
                Ok(Some(st)) => (false, meta_of(&st)),
                Ok(None) => return Ok(None),
                Err(_) => (false, None), // the walk reports it when it returns the entry
            },
        };
        if dir {
            name.push('/');
            return Ok(Some(Child { name, meta: None, link: false }));
        }
        let link = kind == FileType::Symlink
            || meta.is_some_and(|m| m.kind == EntryKind::Foreign(Foreign::SymbolicLink))
            || (kind == FileType::Unknown
                && self
                    .lstat(&name)
                    .ok()
                    .flatten()
                    .is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink));
        Ok(Some(Child { name, meta, link }))
    }

    /// The metadata of the entry `name` itself (a symbolic link is not followed); `None` when
    /// it vanished.
    fn lstat(&self, name: &str) -> Result<Option<rustix::fs::Stat>, rustix::io::Errno> {
        match self.dir.fd().and_then(|fd| rustix::fs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)) {
            Ok(st) => Ok(Some(st)),
            Err(e) if e == rustix::io::Errno::NOENT => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The listing metadata of a non-folder entry from its `lstat`.
fn meta_of(st: &rustix::fs::Stat) -> Option<Meta> {
    let last_modified = DateTime::<Utc>::from_timestamp(st.st_mtime, st.st_mtime_nsec as u32)?;
    Some(Meta { size: st.st_size as u64, last_modified, kind: kind_of(FileType::from_raw_mode(st.st_mode)) })
}

/// A reader's job: folders under the root, and where to send them.
struct Job {
    keys: Vec<String>,
    reply: SyncSender<Vec<Reading>>,
}

/// The reader threads of one page, started as folders are handed to them.
struct Readers<'scope, 'env> {
    scope: &'scope Scope<'scope, 'env>,
    root: &'env Path,
    queue: &'env Mutex<Receiver<Job>>,
    jobs: Sender<Job>,
    /// A folder of at most this many children is read whole.
    small: usize,
    started: usize,
    max: usize,
}

impl Readers<'_, '_> {
    /// Hands the folders `keys` to a reader; `None` when there is none (the walk reads them).
    fn read(&mut self, keys: Vec<String>) -> Option<Receiver<Vec<Reading>>> {
        if self.started < self.max {
            let (root, queue, small) = (self.root, self.queue, self.small);
            let started = std::thread::Builder::new()
                .name("lake-inventory".into())
                .spawn_scoped(self.scope, move || read_jobs(root, queue, small));
            match started {
                Ok(_) => self.started += 1,
                Err(_) => self.max = self.started, // run with the readers there are
            }
        }
        if self.started == 0 {
            return None;
        }
        let (reply, reading) = mpsc::sync_channel(1);
        self.jobs.send(Job { keys, reply }).ok()?;
        Some(reading)
    }
}

/// A reader: reads the folders handed to it (whole up to `small` children) until the page ends.
fn read_jobs(root: &Path, queue: &Mutex<Receiver<Job>>, small: usize) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else { return };
        // The walk may have ended the page without waiting for it.
        let _ = job.reply.send(job.keys.iter().map(|key| read_small(root, key, small)).collect());
    }
}

/// Reads the folder `key`: whole, with its files' metadata, when it has at most `small` children;
/// else its first children and the rest of the pass.
fn read_small(root: &Path, key: &str, small: usize) -> Reading {
    let Some(mut entries) = Entries::open(root, key)? else { return Ok(Folder::Missing) };
    let mut children = Vec::new();
    while children.len() < small {
        let Some(child) = entries.next_child(true) else { return Ok(Folder::Whole(children)) };
        children.extend(child?);
    }
    Ok(Folder::Partial(children, entries))
}

/// A depth-first walk of the managed prefix, one page at a time.
struct Walk {
    root: PathBuf,
    /// Open folders, outermost first.
    stack: Vec<Frame>,
    /// The key of the first file of the next page, read ahead to tell whether one exists.
    pending: Option<String>,
    /// Symbolic links the reads of this page found (see [`InventoryPage::links`]).
    links: Vec<String>,
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
        Self { root, stack, pending: None, links: Vec::new() }
    }

    /// The next page of at most `limit` entries, and the walk to continue it (`None` when the
    /// listing is exhausted), holding up to `window` children of a folder in memory and sharing
    /// sub-folders with up to `readers` reader threads.
    fn page(mut self, limit: usize, window: usize, readers: usize) -> Result<(InventoryPage, Option<Walk>), GcError> {
        let root = self.root.clone();
        let (jobs, queue) = mpsc::channel();
        let queue = Mutex::new(queue);
        let entries = std::thread::scope(|scope| {
            let small = SMALL_FOLDER.min(window);
            let mut readers = Readers { scope, root: &root, queue: &queue, jobs, small, started: 0, max: readers };
            self.entries(limit, window, &mut readers)
            // `readers` drops its sender here: the readers finish their jobs and end.
        })?;
        for frame in &mut self.stack {
            frame.rewind();
        }
        let links = std::mem::take(&mut self.links);
        match (&self.pending, entries.last()) {
            (Some(_), Some(last)) => {
                let next = Some(last.key.clone());
                Ok((InventoryPage { entries, next, links }, Some(self)))
            }
            _ => Ok((InventoryPage { entries, next: None, links }, None)),
        }
    }

    /// Up to `limit` entries, then the key of the next file in `pending` (`None` at the end).
    /// A file is read when it is returned (or with its folder during this page): one that
    /// vanished is skipped.
    fn entries(
        &mut self,
        limit: usize,
        window: usize,
        readers: &mut Readers<'_, '_>,
    ) -> Result<Vec<InventoryEntry>, GcError> {
        let mut entries = Vec::new();
        while entries.len() < limit {
            let next = match self.pending.take() {
                Some(key) => Some((key, None)),
                None => self.next_file(window, readers, limit - entries.len() + 1)?,
            };
            let Some((key, meta)) = next else { return Ok(entries) };
            entries.extend(self.entry(key, meta)?);
        }
        self.pending = self.next_file(window, readers, 1)?.map(|(key, _)| key);
        Ok(entries)
    }

    /// The key of the next file of the walk in key order, with its metadata when it was read
    /// during this page; `None` when every folder is walked. Takes up to `ahead` children of a
    /// folder at a time.
    fn next_file(
        &mut self,
        window: usize,
        readers: &mut Readers<'_, '_>,
        ahead: usize,
    ) -> Result<Option<(String, Option<Meta>)>, GcError> {
        while let Some(frame) = self.stack.last_mut() {
            if !frame.read {
                frame.read(&self.root, window)?;
                self.links.append(&mut frame.links);
            }
            let Some((child, reading)) = frame.take(readers, ahead)? else {
                // A folder with nothing in it is listed itself (`key/`), where its children
                // would sort.
                let done = self.stack.pop();
                if let Some(folder) = done.filter(|f| f.empty && f.key != OBJECTS_PREFIX) {
                    return Ok(Some((format!("{}/", folder.key), None)));
                }
                continue;
            };
            let Some(dir) = child.name.strip_suffix('/') else {
                let meta = child.meta.filter(|_| frame.fresh);
                return Ok(Some((format!("{}/{}", frame.key, child.name), meta)));
            };
            // Read by a reader, or now, the same way.
            let key = format!("{}/{dir}", frame.key);
            let folder = match reading {
                Some(folder) => folder?,
                None => read_small(&self.root, &key, readers.small)?,
            };
            let mut sub = Frame::new(key, None);
            sub.read_from(folder, window)?;
            self.links.append(&mut sub.links);
            self.stack.push(sub);
        }
        Ok(None)
    }

    /// The listing entry at `key`: from `meta`, or read now (the entry itself, never what a
    /// symbolic link points at; an empty folder for a key ending with `/`); `None` when it
    /// vanished (or a folder is no longer one).
    fn entry(&self, key: String, meta: Option<Meta>) -> Result<Option<InventoryEntry>, GcError> {
        let staged = |kind| match kind {
            EntryKind::Object if is_staged_upload(&key) => EntryKind::Staged,
            kind => kind,
        };
        if let Some(Meta { size, last_modified, kind }) = meta {
            let kind = staged(kind);
            return Ok(Some(InventoryEntry { key, size, last_modified, kind }));
        }
        let meta = match std::fs::symlink_metadata(self.root.join(key.trim_end_matches('/'))) {
            Ok(meta) => meta,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(GcError::storage(key, e)),
        };
        let kind = match (key.ends_with('/'), meta.is_dir()) {
            (true, true) => EntryKind::EmptyFolder,
            (false, false) => {
                use std::os::unix::fs::FileTypeExt;
                let t = meta.file_type();
                match () {
                    _ if t.is_file() => EntryKind::Object,
                    _ if t.is_symlink() => EntryKind::Foreign(Foreign::SymbolicLink),
                    _ if t.is_fifo() => EntryKind::Foreign(Foreign::NamedPipe),
                    _ if t.is_socket() => EntryKind::Foreign(Foreign::Socket),
                    _ if t.is_block_device() || t.is_char_device() => EntryKind::Foreign(Foreign::DeviceNode),
                    _ => EntryKind::Foreign(Foreign::Unknown),
                }
            }
            // Replaced by a file or a folder since it was listed: gone from where it was.
            _ => return Ok(None),
        };
        let last_modified: DateTime<Utc> = meta.modified().map_err(|e| GcError::storage(&key, e))?.into();
        let kind = staged(kind);
        Ok(Some(InventoryEntry { key, size: meta.len(), last_modified, kind }))
    }
}

/// object_store's `LocalFileSystem` stages uploads as `name#<digits>` (and lists no such file):
/// true for a key or name whose last segment is one.
fn is_staged_upload(name: &str) -> bool {
    let name = name.rsplit('/').next().unwrap_or(name);
    match name.split_once('#') {
        Some((_, suffix)) => !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(frame: &mut Frame) -> Vec<Child> {
        let mut children = Vec::new();
        while let Some(child) = frame.next_child().unwrap() {
            children.push(child);
        }
        children
    }

    #[test]
    fn a_folder_past_the_window_is_sorted_through_run_files() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("objects");
        std::fs::create_dir_all(folder.join("f1")).unwrap();
        let mut want = vec!["f1/".to_string()];
        for i in 0..50 {
            let name = format!("f{}", i * 37 % 50 + 10);
            std::fs::write(folder.join(&name), b"x").unwrap();
            want.push(name);
        }
        want.push("f1.x".into());
        std::fs::write(folder.join("f1.x"), b"x").unwrap();
        want.sort();
        assert_eq!(want[..3], ["f1.x", "f1/", "f10"]);
        // Read by the walk: in memory up to the window.
        for window in [1, 4, 51, 52] {
            let mut frame = Frame::new("objects".into(), None);
            frame.read(dir.path(), window).unwrap();
            assert_eq!(frame.rest.is_some(), window < 52, "window {window}");
            let got: Vec<String> = drain(&mut frame).into_iter().map(|c| c.name).collect();
            assert_eq!(got, want, "window {window}");
            assert!(frame.rest.is_none(), "run files removed once merged");
        }
        // Read by a reader: small with the files' metadata up to its size, else handed back and
        // finished by the walk.
        for small in [4, 52, 53] {
            let mut frame = Frame::new("objects".into(), None);
            frame.read_from(read_small(dir.path(), "objects", small).unwrap(), 8).unwrap();
            assert_eq!(frame.rest.is_some(), small <= 52, "small {small}");
            let got = drain(&mut frame);
            assert_eq!(got.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), want, "small {small}");
            let read = got.iter().filter(|c| c.meta.is_some_and(|m| m.size == 1)).count();
            assert_eq!(read, if small > 52 { 51 } else { 0 }, "small {small}");
        }
    }
}
