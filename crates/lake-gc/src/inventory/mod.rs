//! Inventories: listings of the managed prefix in ascending key order, as a stream of pages.
//!
//! One small trait, [`ObjectInventory`], and one module per backend, plus [`report`]: the
//! managed prefix of an S3 lake read from an S3 Inventory report. Key order is what lets the
//! planner merge the inventory against the sorted live set and stop at the first key younger
//! than the cutoff. Keys are relative to the lake root and compared as UTF-8 bytes (the order of
//! S3 ListObjectsV2).
//!
//! A listing is a stream from a start key, like object_store's `list_with_offset`: the stream
//! owns its position (a local root's folder walk, an S3 listing's next `start-after` key) and
//! the inventory keeps none, so two streams of one inventory never meet and a new stream always
//! starts a new listing.

pub mod local;
mod own;
pub mod parallel;
pub mod report;
pub mod s3;

use crate::error::GcError;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// An object (a regular file on a local root): a candidate when it is an old orphan.
    Object,
    /// An empty folder of a local root, its key ending with `/` (left by deleted objects or
    /// aborted uploads): GC's own garbage when it is old.
    EmptyFolder,
    /// A local staging file of an upload that never finished (`<key>#<digits>`: object_store's
    /// `LocalFileSystem` writes every upload there and renames it when it finishes, so a
    /// process killed mid-upload leaves it), or an incomplete S3 multipart upload
    /// (`<key>#upload=<id>`, from [`ObjectInventory::own_garbage`]). GC's own garbage when its
    /// key is a managed key minted before the cutoff ([`lake_store::keys::parse_staged_object`]).
    Staged,
    /// Something that is no object and is never listed through, planned or deleted: a symbolic
    /// link, named pipe, socket or device node on a local root, or an S3 key ending with `/`
    /// (a folder marker, made by the S3 console, Hadoop s3a or sync tools). Named in the plan
    /// as foreign.
    Foreign(Foreign),
}

/// What a foreign entry ([`EntryKind::Foreign`]) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// A symbolic link on a local root (never listed through: a live object may lie behind it,
    /// so the planner checks the live keys it could alias).
    SymbolicLink,
    /// A named pipe on a local root.
    NamedPipe,
    /// A socket on a local root.
    Socket,
    /// A character or block device node on a local root.
    DeviceNode,
    /// A file of a type the file system did not say.
    Unknown,
    /// An S3 key ending with `/` (a folder marker).
    FolderMarker,
}

impl Foreign {
    /// What the plan's `foreign` list says of it (`key: symbolic link`).
    pub fn as_str(self) -> &'static str {
        match self {
            Foreign::SymbolicLink => "symbolic link",
            Foreign::NamedPipe => "named pipe",
            Foreign::Socket => "socket",
            Foreign::DeviceNode => "device node",
            Foreign::Unknown => "file of unknown type",
            Foreign::FolderMarker => "folder marker",
        }
    }
}

/// One listed entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryEntry {
    /// Key relative to the lake root (ending with `/` for a folder or a folder marker).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// The store's `last_modified`, UTC.
    pub last_modified: DateTime<Utc>,
    /// Object, empty folder, or foreign.
    pub kind: EntryKind,
}

impl InventoryEntry {
    /// An object entry.
    pub fn object(key: String, size: u64, last_modified: DateTime<Utc>) -> Self {
        Self { key, size, last_modified, kind: EntryKind::Object }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InventoryPage {
    /// At most `page_size` entries, keys strictly ascending and greater than the keys of the
    /// stream's earlier pages and than its start key.
    pub entries: Vec<InventoryEntry>,
    /// The key of the page's last entry when more may follow: the stream's next page lists the
    /// keys after it (and a new stream started from it lists them too); `None` on the last page.
    pub next: Option<String>,
    /// Keys of symbolic links the listing found while reading this page, including ones past
    /// its entries (a local walk reads a folder's entry types whole: `objects/` on its first
    /// page): a live reference through one may name another object. Empty on S3.
    pub links: Vec<String>,
}

/// A key-ordered listing of the managed prefix, in pages.
pub trait ObjectInventory: Send + Sync {
    /// The entries under the managed prefix whose keys are strictly greater than `after` (all of
    /// them when `None`), in ascending byte order of key, as a stream of pages of up to
    /// `page_size` (>= 1; 0 counts as 1) entries. Nothing is read before the stream is polled;
    /// each page is read when it is asked for, continuing the stream's own listing.
    ///
    /// The stream ends after the page whose `next` is `None`, or after its first error, and
    /// yields nothing when polled again.
    ///
    /// # Errors
    /// A [`StoreError::Storage`](lake_store::StoreError::Storage) item (or [`StoreError::Root`](lake_store::StoreError::Root) for a root of the wrong
    /// kind) when listing fails; GC then aborts: it never treats a failed listing as an empty
    /// one.
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>>;

    /// GC's own garbage that the store holds outside the listing of `objects/`, for the planner
    /// to merge into its sweep in key order: store-clock probes left under `_lake/clock/` (and
    /// their local staging files, [`lake_store::keys::parse_clock_probe`]), and on S3 the incomplete
    /// multipart uploads of managed objects (`objects/<ULID>/<name>#upload=<id>`, kind
    /// [`EntryKind::Staged`], size 0, `last_modified` the time S3 says it was initiated). Only
    /// entries minted before `cutoff` (by their key's ULID), sorted by key; memory: one entry
    /// per such probe or upload (each is a left-over of a killed or failed run). The default
    /// (an inventory of no store, such as a test double) has none.
    ///
    /// # Errors
    /// [`StoreError::Storage`](lake_store::StoreError::Storage) when the store cannot be read; GC then aborts.
    fn own_garbage(&self, cutoff: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        let _ = cutoff;
        Box::pin(futures::future::ready(Ok(Vec::new())))
    }

    /// The entry of the one key `key` as the store shows it now, without listing: what an
    /// incremental plan asks of a key it does not list (a key that lost its last reference, or
    /// that the last run left unfinished). `None` when nothing is there. On a local root nothing
    /// is followed: a symbolic link on the key's path is returned as itself, foreign, under its
    /// own key (`objects/<ULID>` or the key); a folder key (`objects/<ULID>/`) is an empty
    /// folder when it is one, `None` when it holds anything; a folder where a file is expected is
    /// `None` (the listing would list what it holds). On S3 one HEAD request, whose whole-second
    /// `Last-Modified` is returned as the last millisecond of its second (never older than a
    /// listing shows the key); a local file's time is its own, to the nanosecond.
    ///
    /// The default (an inventory that cannot look up one key, such as an S3 Inventory report)
    /// refuses: an incremental plan is never made from it.
    ///
    /// # Errors
    /// [`StoreError::Storage`](lake_store::StoreError::Storage) when the store cannot be read.
    fn head(&self, key: &str) -> BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        let message = format!("this inventory cannot look up the key {key} alone; make a full plan");
        Box::pin(futures::future::ready(Err(GcError::storage(key, message))))
    }

    /// The symbolic links on the paths of `keys`, each as [`ObjectInventory::head`] names it
    /// (the first link component, under its own key), in the order of the keys that meet them:
    /// what an incremental plan on a local root asks of the live keys it does not list. The
    /// default looks each key up; a local root's inventory opens each key's path once without
    /// following links and looks up only those that meet something, over blocking threads.
    ///
    /// # Errors
    /// The first error of a look-up.
    fn links_among(&self, keys: Vec<String>) -> BoxFuture<'_, Result<Vec<String>, GcError>> {
        Box::pin(async move {
            let mut links = Vec::new();
            for key in &keys {
                if let Some(entry) = self.head(key).await? {
                    if entry.kind == EntryKind::Foreign(Foreign::SymbolicLink) {
                        links.push(entry.key);
                    }
                }
            }
            Ok(links)
        })
    }
}

/// A reference to an inventory lists as the inventory does.
impl<T: ObjectInventory + ?Sized> ObjectInventory for &T {
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        (**self).list_from(after, page_size)
    }

    fn own_garbage(&self, cutoff: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        (**self).own_garbage(cutoff)
    }

    fn head(&self, key: &str) -> BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        (**self).head(key)
    }

    fn links_among(&self, keys: Vec<String>) -> BoxFuture<'_, Result<Vec<String>, GcError>> {
        (**self).links_among(keys)
    }
}

/// A boxed inventory lists as the inventory does.
impl<T: ObjectInventory + ?Sized> ObjectInventory for Box<T> {
    fn list_from(&self, after: Option<String>, page_size: usize) -> BoxStream<'_, Result<InventoryPage, GcError>> {
        (**self).list_from(after, page_size)
    }

    fn own_garbage(&self, cutoff: DateTime<Utc>) -> BoxFuture<'_, Result<Vec<InventoryEntry>, GcError>> {
        (**self).own_garbage(cutoff)
    }

    fn head(&self, key: &str) -> BoxFuture<'_, Result<Option<InventoryEntry>, GcError>> {
        (**self).head(key)
    }

    fn links_among(&self, keys: Vec<String>) -> BoxFuture<'_, Result<Vec<String>, GcError>> {
        (**self).links_among(keys)
    }
}

/// The inventory of `store`'s managed prefix: S3 ListObjectsV2 pages for `s3://` roots, a sorted
/// folder walk for local roots.
pub fn for_store(store: &lake_store::LakeStore) -> Box<dyn ObjectInventory> {
    match store.s3() {
        Some(_) => Box::new(s3::S3Inventory::new(store.clone())),
        None => Box::new(local::LocalInventory::new(store.clone())),
    }
}
