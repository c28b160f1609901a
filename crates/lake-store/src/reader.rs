//! The verified object reader: how the objects rows reference are read back.
//!
//! An [`ObjectReader`] opens the object a reference names ([`ObjectIdentity`]: `uri`, SHA-256,
//! size in bytes) through the lake's own [`LakeStore`] (the same root, settings and
//! credentials as the writes; never others):
//! - a managed key relative to the lake root (`objects/<ULID>/<name>`, never the lake's own
//!   files; on a local root, not through a symbolic link), or any URI that normalises to one
//!   ([`lake_common::normalize_reference`]: `file:///root/objects/...`,
//!   `s3://bucket/prefix/objects/...`, the endpoint's spellings of an S3-compatible server);
//! - on an `s3://` root, an external `s3://` URI in the root's bucket (outside the root's prefix),
//!   which the store's client reaches with the lake's settings.
//!
//! Any other reference ([`StoreError::ObjectUnreachable`]: another bucket, an `http(s)://` URL
//! that is not an S3 spelling of the root's bucket, a local path outside a local root's folder,
//! or a `uri` that is not a valid reference) is refused by name, before any request.
//!
//! Verified reads ([`ObjectReader::read_verified`], [`ObjectReader::open_verified`]) count and
//! hash the bytes as they arrive and fail with [`StoreError::ObjectMismatch`] when the size or the
//! SHA-256 differs from the reference's. Ranged reads ([`ObjectReader::read_range`]) and
//! [`ObjectReader::size`] are NOT verified: they return what the store holds now. A missing
//! object is [`StoreError::ObjectMissing`], naming its key.
//!
//! Every request holds a permit of one semaphore shared by the reader and its clones, so at most
//! [`ObjectReader::concurrency`] GETs or HEADs are in flight at once (a verified stream holds its
//! permit until it ends or is dropped).
//!
//! Many objects: [`ObjectReader::read_many`] (and [`ObjectReader::read_many_with`], into buffers
//! the caller allocates) reads and verifies them concurrently and hands them out in input order,
//! with at most a byte budget of objects read or being read but not yet handed out.
//!
//! SHA-256 runs on the CPU's instructions where it has them (`sha2` detects SHA-NI on x86_64 and
//! the ARMv8 SHA2 extension on aarch64 at run time; lake-common enables the `asm` feature the
//! latter needs), at the speed of OpenSSL's (`sha256_vs_hardware`, docs/benchmarks.md). A whole
//! read of a local file reads it straight into the object's buffer, hashing each piece while it
//! is in the cache, in one blocking task (not one per 8 KiB, as a streamed local read is).
//!
//! On a local root, whole reads skip object_store: one `openat2(RESOLVE_NO_SYMLINKS)` relative
//! to the root folder opens the object and refuses a link in any part of its key (the kernel
//! checks every part while it resolves them, so no link swapped in between a check and the
//! open is followed), an `fstat` gives its size (checked before the buffer is allocated), and
//! plain reads fill the buffer, hashed as they land. A batch ([`ObjectReader::read_many`]) reads
//! its small objects (up to [`SMALL_OBJECT_BYTES`]) several to a blocking task, in input order.
//! Kernels without `openat2` (before Linux 5.6, or a sandbox refusing it) check the parts with
//! `lstat` and open with `O_NOFOLLOW`. S3 reads are unchanged by this.

use crate::error::StoreError;
use crate::store::LakeStore;
use bytes::Bytes;
use futures::stream::{BoxStream, Stream, StreamExt};
use lake_common::{normalize_reference, NormalizedReference, ObjectIdentity};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, GetResultPayload, ObjectStore, ObjectStoreExt};
use rustix::fd::OwnedFd;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::future::Future;
use std::io::Read;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// The default bound on the requests an [`ObjectReader`] (with its clones) has in flight: 16.
pub const DEFAULT_CONCURRENCY: usize = 16;

/// The largest object, in bytes, that a batch read ([`ObjectReader::read_many`]) on a local root
/// reads together with its neighbours in one blocking task (1 MiB); a larger one gets a task of
/// its own.
pub const SMALL_OBJECT_BYTES: u64 = 1 << 20;

/// The most objects one blocking task of a batch read on a local root reads.
const BATCH_OBJECTS: usize = 32;

/// The most bytes of objects one blocking task of a batch read on a local root reads (2 MiB):
/// a few tasks' worth per core for a thousand objects of 64 KiB.
const BATCH_BYTES: u64 = 2 << 20;

/// Reads the objects references name, verified against their size and SHA-256 (see the module
/// documentation). Cheap to clone; clones share the bound on requests in flight.
#[derive(Debug, Clone)]
pub struct ObjectReader {
    store: LakeStore,
    permits: Arc<Semaphore>,
    concurrency: usize,
}

/// Where a reference's object is in the store.
#[derive(Debug, Clone)]
struct Target {
    /// The store path (from the bucket or the local root folder).
    path: Path,
    /// How errors name it: the key relative to the lake root, or the external URI.
    shown: String,
    /// Whether `shown` is a key relative to the lake root.
    in_root: bool,
}

impl ObjectReader {
    /// A reader of `store`'s objects with at most [`DEFAULT_CONCURRENCY`] requests in flight.
    pub fn new(store: LakeStore) -> Self {
        Self::with_concurrency(store, DEFAULT_CONCURRENCY)
    }

    /// A reader of `store`'s objects with at most `limit` requests in flight across it and its
    /// clones (a `limit` of 0 is taken as 1).
    pub fn with_concurrency(store: LakeStore, limit: usize) -> Self {
        let limit = limit.clamp(1, Semaphore::MAX_PERMITS);
        Self { store, permits: Arc::new(Semaphore::new(limit)), concurrency: limit }
    }

    /// The lake's store the reader reads from.
    pub fn store(&self) -> &LakeStore {
        &self.store
    }

    /// The bound on requests in flight (GETs and HEADs, a verified stream's GET until it ends).
    pub fn concurrency(&self) -> usize {
        self.concurrency
    }

    /// The key relative to the lake root that `uri` names, or `None` for an external object the
    /// store reaches (on an `s3://` root, a URI in the root's bucket outside its prefix).
    ///
    /// # Errors
    /// [`StoreError::ObjectUnreachable`] when the store cannot read `uri` (see the module
    /// documentation).
    pub fn key_of(&self, uri: &str) -> Result<Option<String>, StoreError> {
        let target = self.target(uri)?;
        Ok(target.in_root.then_some(target.shown))
    }

    /// The whole object `reference` names, verified: its bytes, once their count equals
    /// `reference.size` and their SHA-256 equals `reference.sha256`. Holds the object once in
    /// memory (`reference.size` bytes, allocated only after the store's reported size matched);
    /// use [`ObjectReader::open_verified`] for large objects.
    ///
    /// # Errors
    /// - [`StoreError::ObjectMissing`] when the object does not exist;
    /// - [`StoreError::ObjectMismatch`] when its size or SHA-256 differs from the reference's;
    /// - [`StoreError::ObjectUnreachable`] when the store cannot read `reference.uri`;
    /// - [`StoreError::Storage`] when a request or the response's body fails, or when
    ///   `reference.size` exceeds the address space.
    pub async fn read_verified(&self, reference: &ObjectIdentity) -> Result<Bytes, StoreError> {
        self.read_verified_into(reference, zeroed).await.map(Bytes::from)
    }

    /// The whole object `reference` names, verified, in a buffer of `reference.size` bytes that
    /// `alloc(reference.size)` returns (called only once the store's reported size equals the
    /// reference's, so a reference claiming more bytes than its object has allocates nothing).
    /// The buffer comes back only when every byte was written and verified: the object's bytes
    /// land in it directly (a local file is read into it; a response's chunks are copied in as
    /// they arrive), never in another buffer of the whole object. On an error the buffer is
    /// dropped, partly written.
    ///
    /// On a local root the whole read (open, size check, `alloc`, reads and hashing) runs in one
    /// blocking task of the runtime (see the module documentation).
    ///
    /// # Errors
    /// As [`ObjectReader::read_verified`]; also what `alloc` returns, and
    /// [`StoreError::Storage`] when the buffer `alloc` returns is not `reference.size` bytes.
    pub async fn read_verified_into<B, F>(&self, reference: &ObjectIdentity, alloc: F) -> Result<B, StoreError>
    where
        B: AsMut<[u8]> + Send + 'static,
        F: FnOnce(usize) -> Result<B, StoreError> + Send + 'static,
    {
        if let Some(dir) = self.store.local_dir() {
            let target = self.resolve(&reference.uri)?;
            let permit = self.permit(&target.shown).await?;
            let dir = dir.to_path_buf();
            let reference = reference.clone();
            let key = target.shown.clone();
            let read = tokio::task::spawn_blocking(move || {
                let _permit = permit;
                LocalRoot::open(&dir, &target.shown)?.read(&target.shown, &reference, alloc)
            });
            return match read.await {
                Ok(done) => done,
                Err(e) => Err(StoreError::storage(key, e)),
            };
        }
        let (target, permit, result) = self.get_whole(reference).await?;
        let key = target.shown;
        let check = Check { key, expected_size: reference.size, expected_sha256: reference.sha256 };
        let mut buf = check.buffer(result.meta.size, alloc)?;
        match result.payload {
            // A local root's whole reads are `LocalRoot`'s, above: only object_store's local
            // file system answers with a file.
            GetResultPayload::File(..) => Err(StoreError::storage(
                &check.key,
                "the store answered a whole read of a remote root with a local file",
            )),
            GetResultPayload::Stream(body) => {
                let mut stream = VerifiedStream::new(check, Some(body), Some(permit));
                let mut filled = 0usize;
                let out = buf.as_mut();
                while let Some(chunk) = stream.next().await {
                    let chunk = chunk?;
                    // The stream fails before it hands out more than the reference's size.
                    let Some(into) = out.get_mut(filled..filled + chunk.len()) else {
                        return Err(stream.check.mismatch((filled + chunk.len()) as u64, None));
                    };
                    into.copy_from_slice(&chunk);
                    filled += chunk.len();
                }
                Ok(buf)
            }
        }
    }

    /// On a local root, the whole object `reference` names, verified, read on the calling thread
    /// with plain file I/O (it blocks: call it from a thread that may block, not from a task of
    /// an async runtime): what [`ObjectReader::read_verified_into`] returns, without a task. Holds
    /// one of the reader's permits while it reads (waiting for one when all are taken).
    ///
    /// # Errors
    /// As [`ObjectReader::read_verified_into`]; [`StoreError::Storage`] when the root is not a
    /// local folder (read S3 objects with the async reads).
    pub fn read_verified_blocking<B, F>(&self, reference: &ObjectIdentity, alloc: F) -> Result<B, StoreError>
    where
        B: AsMut<[u8]>,
        F: FnOnce(usize) -> Result<B, StoreError>,
    {
        let Some(dir) = self.store.local_dir() else {
            return Err(StoreError::storage(
                &reference.uri,
                "a blocking read reads a local root only; this lake's root is not a local folder",
            ));
        };
        let target = self.resolve(&reference.uri)?;
        let _permit = self.blocking_permit(&target.shown)?;
        LocalRoot::open(dir, &target.shown)?.read(&target.shown, reference, alloc)
    }

    /// Whether the reader's root is a local folder, which [`ObjectReader::read_verified_blocking`]
    /// reads.
    pub fn is_local(&self) -> bool {
        self.store.local_dir().is_some()
    }

    /// The whole objects `references` name, verified (as [`ObjectReader::read_verified`]),
    /// read concurrently and handed out in input order: a stream of one item per reference,
    /// each the object's bytes or its own error (a failed object never hides the others).
    /// Bounds: at most [`ObjectReader::concurrency`] requests in flight (shared with the
    /// reader's other reads), at most twice as many objects started, and at most
    /// `budget_bytes` bytes of objects started but not yet handed out (an object larger than
    /// the budget is read alone). The stream must be polled inside a Tokio runtime (each object
    /// is read by a task of the runtime, so objects hash on several cores); dropping it stops
    /// the reads in flight.
    pub fn read_many(&self, references: Vec<ObjectIdentity>, budget_bytes: u64) -> ReadMany<Vec<u8>> {
        self.read_many_with(references, budget_bytes, zeroed)
    }

    /// [`ObjectReader::read_many`] into buffers from `alloc` (called with each object's size,
    /// once the store's reported size matched, on a task or a blocking thread of the runtime),
    /// as [`ObjectReader::read_verified_into`] fills one. On a local root, runs of consecutive
    /// objects of at most [`SMALL_OBJECT_BYTES`] are read by one blocking task each (up to 32
    /// objects or 2 MiB, holding one permit), one after the other.
    pub fn read_many_with<B, F>(&self, references: Vec<ObjectIdentity>, budget_bytes: u64, alloc: F) -> ReadMany<B>
    where
        B: AsMut<[u8]> + Send + 'static,
        F: Fn(usize) -> Result<B, StoreError> + Send + Sync + 'static,
    {
        ReadMany {
            reader: self.clone(),
            alloc: Arc::new(alloc),
            pending: references.into(),
            started: VecDeque::new(),
            started_bytes: 0,
            budget_bytes,
            window: self.concurrency.saturating_mul(2),
            local: self.store.local_dir().is_some(),
        }
    }

    /// Opens the object `reference` names as a stream of its bytes, verified as they flow (see
    /// [`VerifiedStream`]): the stream ends (`None`) only after exactly `reference.size` bytes
    /// whose SHA-256 is `reference.sha256`; otherwise its last item is
    /// [`StoreError::ObjectMismatch`]. Memory: one chunk of the response at a time. The stream
    /// holds one of the reader's permits until it ends or is dropped.
    ///
    /// # Errors
    /// [`StoreError::ObjectMissing`] when the object does not exist,
    /// [`StoreError::ObjectUnreachable`] when the store cannot read `reference.uri`,
    /// [`StoreError::Storage`] when the request fails.
    pub async fn open_verified(&self, reference: &ObjectIdentity) -> Result<VerifiedStream, StoreError> {
        let (target, permit, result) = self.get_whole(reference).await?;
        let check = Check { key: target.shown, expected_size: reference.size, expected_sha256: reference.sha256 };
        let reported = result.meta.size;
        if reported != reference.size {
            // The store already says the size differs: fail before handing out any byte.
            let mismatch = check.mismatch(reported, None);
            let mut stream = VerifiedStream::new(check, None, None);
            stream.pending = Some(mismatch);
            return Ok(stream);
        }
        Ok(VerifiedStream::new(check, Some(result.into_stream()), Some(permit)))
    }

    /// The GET of the whole object `reference` names, with the permit it holds.
    async fn get_whole(
        &self,
        reference: &ObjectIdentity,
    ) -> Result<(Target, OwnedSemaphorePermit, GetResult), StoreError> {
        let target = self.target(&reference.uri)?;
        let permit = self.permit(&target.shown).await?;
        match self.store.object_store().get_opts(&target.path, GetOptions::default()).await {
            Ok(result) => Ok((target, permit, result)),
            Err(e) => Err(store_error(&target.shown, e)),
        }
    }

    /// The bytes `range` (offsets in bytes from the object's start, end exclusive) of the
    /// object `uri` names (a reference's `uri`: a key or a URI, as for the verified reads). NOT
    /// verified: ranged reads cannot check the object's SHA-256, so the bytes are what the store
    /// holds now, whatever the reference records. An `end` past the object's end is cut at the
    /// end (fewer bytes come back); an empty range reads nothing and asks the store nothing.
    ///
    /// # Errors
    /// - [`StoreError::ObjectMissing`] when the object does not exist;
    /// - [`StoreError::ObjectUnreachable`] when the store cannot read `uri`;
    /// - [`StoreError::Storage`] when `range.start > range.end`, when `range.start` is at or past
    ///   the object's end, or when the request fails.
    pub async fn read_range(&self, uri: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let target = self.target(uri)?;
        if range.start > range.end {
            return Err(StoreError::storage(
                &target.shown,
                format!("the byte range {}..{} ends before it starts", range.start, range.end),
            ));
        }
        if range.start == range.end {
            return Ok(Bytes::new());
        }
        let _permit = self.permit(&target.shown).await?;
        let options = GetOptions::default().with_range(Some(GetRange::Bounded(range)));
        match self.store.object_store().get_opts(&target.path, options).await {
            Ok(result) => result.bytes().await.map_err(|e| store_error(&target.shown, e)),
            Err(e) => Err(store_error(&target.shown, e)),
        }
    }

    /// The size in bytes of the object `uri` names, as the store reports it now (a HEAD request).
    /// NOT verified against any reference: for seeking and ranged reads.
    ///
    /// # Errors
    /// [`StoreError::ObjectMissing`] when the object does not exist,
    /// [`StoreError::ObjectUnreachable`] when the store cannot read `uri`,
    /// [`StoreError::Storage`] when the request fails.
    pub async fn size(&self, uri: &str) -> Result<u64, StoreError> {
        let target = self.target(uri)?;
        let _permit = self.permit(&target.shown).await?;
        match ObjectStoreExt::head(self.store.object_store().as_ref(), &target.path).await {
            Ok(meta) => Ok(meta.size),
            Err(e) => Err(store_error(&target.shown, e)),
        }
    }

    /// One permit for a request about `shown`.
    async fn permit(&self, shown: &str) -> Result<OwnedSemaphorePermit, StoreError> {
        // The semaphore is never closed; the error cannot happen.
        self.permits.clone().acquire_owned().await.map_err(|e| StoreError::storage(shown, e))
    }

    /// One permit for a request about `shown`, waited for on the calling thread (which must be
    /// allowed to block).
    fn blocking_permit(&self, shown: &str) -> Result<OwnedSemaphorePermit, StoreError> {
        match self.permits.clone().try_acquire_owned() {
            Ok(permit) => Ok(permit),
            Err(_) => futures::executor::block_on(self.permit(shown)),
        }
    }

    /// Reads the small objects `references` of a local root one after the other, on the calling
    /// (blocking) thread, holding one permit: one item per reference, in order.
    fn read_local_batch<B>(&self, references: &[ObjectIdentity], alloc: &Alloc<B>) -> Vec<Result<B, StoreError>>
    where
        B: AsMut<[u8]>,
    {
        let Some(dir) = self.store.local_dir() else {
            return references
                .iter()
                .map(|r| Err(StoreError::storage(&r.uri, "a batch of local reads on a root that is not local")))
                .collect();
        };
        let mut root: Option<LocalRoot> = None;
        let mut permit = None;
        let mut out = Vec::with_capacity(references.len());
        for reference in references {
            let read = (|| {
                let target = self.resolve(&reference.uri)?;
                if permit.is_none() {
                    permit = Some(self.blocking_permit(&target.shown)?);
                }
                let opened = match root.take() {
                    Some(opened) => opened,
                    None => LocalRoot::open(dir, &target.shown)?,
                };
                let read = opened.read(&target.shown, reference, |len| alloc(len));
                root = Some(opened);
                read
            })();
            out.push(read);
        }
        out
    }

    /// Where the object `uri` names is in the store, or why the store cannot read it; on a local
    /// root, refused when a part of its key is a symbolic link.
    fn target(&self, uri: &str) -> Result<Target, StoreError> {
        let target = self.resolve(uri)?;
        if let Some(dir) = self.store.local_dir().filter(|_| target.in_root) {
            no_links(dir, &target.shown)
                .map_err(|reason| StoreError::ObjectUnreachable { uri: uri.to_string(), reason })?;
        }
        Ok(target)
    }

    /// Where the object `uri` names is in the store, or why the store cannot read it, without
    /// looking at the file system (a local root's links are [`ObjectReader::target`]'s and
    /// [`LocalRoot::open_object`]'s to refuse).
    fn resolve(&self, uri: &str) -> Result<Target, StoreError> {
        let root = self.store.root();
        let unreachable = |reason: String| StoreError::ObjectUnreachable { uri: uri.to_string(), reason };
        let external = match normalize_reference(root, uri) {
            Ok(NormalizedReference::InRoot(key)) => {
                // Rows reference objects, never the lake's own files (tables, journal, registry):
                // inside the root only a managed key is an object.
                if crate::keys::parse_managed_key(&key).is_none() {
                    return Err(unreachable(format!(
                        "`{key}` is inside the lake root but not a managed object key (objects/<ULID>/<name>)"
                    )));
                }
                return Ok(Target { path: self.store.path(&key), shown: key, in_root: true });
            }
            Ok(NormalizedReference::External(external)) => external,
            Err(e) => return Err(unreachable(format!("it is not a valid reference: {e}"))),
        };
        if root.scheme() == "s3" {
            let bucket = format!("s3://{}/", root.authority());
            if let Some(path) = external.strip_prefix(&bucket) {
                // The key as it is (`Path::from` would percent-encode characters such as `~`,
                // naming another object).
                let path = Path::parse(path)
                    .map_err(|e| unreachable(format!("its key is not one the store can name: {e}")))?;
                return Ok(Target { path, shown: external, in_root: false });
            }
            return Err(unreachable(format!(
                "it is outside the lake root `{root}` and its bucket; the lake's store reads only the bucket `{}`",
                root.authority()
            )));
        }
        Err(unreachable(format!(
            "it is outside the lake root `{}`; the lake's store reads only below its root folder",
            self.store.display_root()
        )))
    }
}

/// Refuses a key of a local root that goes through a symbolic link (`objects`, its ULID folder,
/// or the object itself): the file system would follow it out of the root folder. A part that
/// does not exist is left to the read, which reports the object missing. (A link swapped in
/// after this check is read through; a verified read still refuses bytes that differ from the
/// reference's.)
fn no_links(dir: &std::path::Path, key: &str) -> Result<(), String> {
    let mut at = dir.to_path_buf();
    for part in key.split('/') {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!("`{}` is a symbolic link; lake reads no object through a link", at.display()))
            }
            Ok(_) => {}
            Err(_) => return Ok(()),
        }
    }
    Ok(())
}

/// A local root's folder, opened (`O_PATH`) for the whole reads of one task.
struct LocalRoot<'a> {
    dir: &'a std::path::Path,
    fd: OwnedFd,
}

impl<'a> LocalRoot<'a> {
    /// Opens the root folder `dir` (`shown`: the key being read, for the error).
    fn open(dir: &'a std::path::Path, shown: &str) -> Result<Self, StoreError> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        match rustix::fs::openat(rustix::fs::CWD, dir, flags, Mode::empty()) {
            Ok(fd) => Ok(Self { dir, fd }),
            Err(e) => Err(StoreError::storage(
                shown,
                format!("cannot open the lake's folder {}: {}", dir.display(), std::io::Error::from(e)),
            )),
        }
    }

    /// Opens the regular file of the managed `key` for reading, refusing a symbolic link in any
    /// part of the key ([`StoreError::ObjectUnreachable`] naming `uri`, as [`no_links`] words it):
    /// one `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`, or on a kernel without it, [`no_links`]
    /// and an `openat(O_NOFOLLOW)`. Opened non-blocking (a FIFO put in an object's place is never
    /// waited on), then made blocking once `fstat` shows a regular file. Returns the file and its
    /// size in bytes.
    fn open_object(&self, key: &str, uri: &str) -> Result<(std::fs::File, u64), StoreError> {
        const READ: OFlags = OFlags::RDONLY.union(OFlags::CLOEXEC).union(OFlags::NONBLOCK);
        let io = |e: Errno| StoreError::storage(key, std::io::Error::from(e));
        let unreachable = |reason: String| StoreError::ObjectUnreachable { uri: uri.to_string(), reason };
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH;
        let opened = match rustix::fs::openat2(&self.fd, key, READ, Mode::empty(), resolve) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => {
                no_links(self.dir, key).map_err(unreachable)?;
                rustix::fs::openat(&self.fd, key, READ | OFlags::NOFOLLOW, Mode::empty())
            }
            other => other,
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Err(StoreError::ObjectMissing { key: key.to_string() }),
            Err(Errno::LOOP) => {
                // Name the link as the part-by-part check does (it may be gone already).
                let reason = no_links(self.dir, key).err().unwrap_or_else(|| {
                    format!(
                        "`{}` goes through a symbolic link; lake reads no object through a link",
                        self.dir.join(key).display()
                    )
                });
                return Err(unreachable(reason));
            }
            Err(e) => return Err(io(e)),
        };
        let stat = rustix::fs::fstat(&fd).map_err(io)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            // As object_store reports a folder in an object's place.
            FileType::Directory => return Err(StoreError::ObjectMissing { key: key.to_string() }),
            other => return Err(StoreError::storage(key, format!("the object is not a regular file ({other:?})"))),
        }
        rustix::fs::fcntl_setfl(&fd, OFlags::empty()).map_err(io)?;
        let size =
            u64::try_from(stat.st_size).map_err(|_| StoreError::storage(key, "the file reports a negative size"))?;
        Ok((std::fs::File::from(fd), size))
    }

    /// The whole object of the managed `key` (`reference` names it), verified, in the buffer
    /// `alloc(reference.size)` returns (called once the file's size matched): as
    /// [`ObjectReader::read_verified_into`].
    fn read<B, F>(&self, key: &str, reference: &ObjectIdentity, alloc: F) -> Result<B, StoreError>
    where
        B: AsMut<[u8]>,
        F: FnOnce(usize) -> Result<B, StoreError>,
    {
        let (file, size) = self.open_object(key, &reference.uri)?;
        let check = Check { key: key.to_string(), expected_size: reference.size, expected_sha256: reference.sha256 };
        let mut buf = check.buffer(size, alloc)?;
        let digest = fill_from_file(file, buf.as_mut(), &check)?;
        check.verify(size, digest)?;
        Ok(buf)
    }
}

/// The store's error for `shown`: a missing object is [`StoreError::ObjectMissing`].
fn store_error(shown: &str, e: object_store::Error) -> StoreError {
    match e {
        object_store::Error::NotFound { .. } => StoreError::ObjectMissing { key: shown.to_string() },
        e => StoreError::storage(shown, e),
    }
}

/// The bytes of one object as they arrive, counted and hashed (SHA-256) against its reference
/// (from [`ObjectReader::open_verified`]). A stream of chunks (`Result<Bytes, StoreError>`):
/// - when the store reports a size other than the reference's, the first item is
///   [`StoreError::ObjectMismatch`] and no byte is handed out;
/// - as soon as more bytes arrive than the reference's size, the chunk that crosses it is
///   withheld and the item is [`StoreError::ObjectMismatch`] (`actual_size`: the bytes received
///   so far, a lower bound; no `actual_sha256`);
/// - at the object's end, a count or SHA-256 other than the reference's is
///   [`StoreError::ObjectMismatch`] in place of the end;
/// - a failed response body is [`StoreError::Storage`].
///
/// After an error the stream ends. The bytes handed out are verified only once the stream has
/// ended with `None`: a consumer that acts on them earlier must undo what it did on an error.
pub struct VerifiedStream {
    check: Check,
    /// The response's body; `None` once the stream has ended (or when it never started).
    inner: Option<BoxStream<'static, object_store::Result<Bytes>>>,
    hasher: Sha256,
    received: u64,
    /// An error to hand out before anything else.
    pending: Option<StoreError>,
    /// The reader's permit, released when the stream ends.
    permit: Option<OwnedSemaphorePermit>,
}

/// What a verified read checks its bytes against: the reference's size and SHA-256, and how
/// errors name the object.
#[derive(Debug, Clone)]
struct Check {
    /// The key relative to the lake root, or the external URI, being read.
    key: String,
    expected_size: u64,
    expected_sha256: [u8; 32],
}

impl Check {
    fn mismatch(&self, actual_size: u64, actual_sha256: Option<[u8; 32]>) -> StoreError {
        StoreError::ObjectMismatch {
            key: self.key.clone(),
            expected_size: self.expected_size,
            actual_size,
            expected_sha256: self.expected_sha256,
            actual_sha256,
        }
    }

    /// The buffer `alloc` returns for the whole object, whose size the store reports as `size`
    /// bytes: a mismatch when that is not the reference's size (then nothing is allocated), and
    /// [`StoreError::Storage`] for a size that does not fit in memory or a buffer `alloc` made
    /// of another length.
    fn buffer<B: AsMut<[u8]>>(
        &self,
        size: u64,
        alloc: impl FnOnce(usize) -> Result<B, StoreError>,
    ) -> Result<B, StoreError> {
        if size != self.expected_size {
            return Err(self.mismatch(size, None));
        }
        let len = usize::try_from(size)
            .map_err(|_| StoreError::storage(&self.key, format!("{size} bytes do not fit in this machine's memory")))?;
        let mut buf = alloc(len)?;
        if buf.as_mut().len() != len {
            return Err(StoreError::storage(
                &self.key,
                format!("the buffer for the object has {} bytes, not its {len}", buf.as_mut().len()),
            ));
        }
        Ok(buf)
    }

    /// The end of a whole read of `received` bytes whose SHA-256 is `digest`.
    fn verify(&self, received: u64, digest: [u8; 32]) -> Result<(), StoreError> {
        if received != self.expected_size || digest != self.expected_sha256 {
            return Err(self.mismatch(received, Some(digest)));
        }
        Ok(())
    }
}

impl std::fmt::Debug for VerifiedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedStream")
            .field("key", &self.check.key)
            .field("expected_size", &self.check.expected_size)
            .field("expected_sha256", &hex::encode(self.check.expected_sha256))
            .field("received", &self.received)
            .field("ended", &(self.inner.is_none() && self.pending.is_none()))
            .finish()
    }
}

impl VerifiedStream {
    fn new(
        check: Check,
        inner: Option<BoxStream<'static, object_store::Result<Bytes>>>,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Self {
        Self { check, inner, hasher: Sha256::new(), received: 0, pending: None, permit }
    }

    /// The key relative to the lake root, or the external URI, being read.
    pub fn key(&self) -> &str {
        &self.check.key
    }

    /// The size in bytes the reference records (the stream's length when it verifies).
    pub fn expected_size(&self) -> u64 {
        self.check.expected_size
    }

    /// The bytes handed out so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The mismatch the store's response already showed, before any byte was read: the size it
    /// reports differs from the reference's (the stream's first item would be that error). Taken
    /// once; a caller that allocates the reference's size checks it first, so that a reference
    /// claiming a larger size than the object's allocates nothing.
    pub fn take_early_mismatch(&mut self) -> Option<StoreError> {
        if self.inner.is_none() && self.received == 0 {
            self.pending.take()
        } else {
            None
        }
    }

    fn mismatch(&self, actual_size: u64, actual_sha256: Option<[u8; 32]>) -> StoreError {
        self.check.mismatch(actual_size, actual_sha256)
    }

    /// Ends the stream: drops the body and releases the permit.
    fn end(&mut self) {
        self.inner = None;
        self.permit = None;
    }
}

impl Stream for VerifiedStream {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(e) = this.pending.take() {
            this.end();
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            let Some(inner) = this.inner.as_mut() else { return Poll::Ready(None) };
            match inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    if chunk.is_empty() {
                        continue;
                    }
                    let received = this.received.saturating_add(chunk.len() as u64);
                    if received > this.check.expected_size {
                        this.end();
                        return Poll::Ready(Some(Err(this.mismatch(received, None))));
                    }
                    this.hasher.update(&chunk);
                    this.received = received;
                    return Poll::Ready(Some(Ok(chunk)));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.end();
                    return Poll::Ready(Some(Err(store_error(&this.check.key, e))));
                }
                Poll::Ready(None) => {
                    this.end();
                    let digest: [u8; 32] = std::mem::take(&mut this.hasher).finalize().into();
                    if let Err(e) = this.check.verify(this.received, digest) {
                        return Poll::Ready(Some(Err(e)));
                    }
                    return Poll::Ready(None);
                }
            }
        }
    }
}

/// A zeroed buffer of `len` bytes (large ones come from the allocator as fresh zero pages).
fn zeroed(len: usize) -> Result<Vec<u8>, StoreError> {
    Ok(vec![0; len])
}

/// How many bytes a whole read of a local file reads, then hashes, at a time: small enough to
/// stay in the CPU's cache between the read and the hash.
const FILE_PIECE: usize = 256 << 10;

/// Reads the local `file` from its start into `buf` (the reference's size), hashing each piece as
/// it lands; the SHA-256 of the bytes read. A file shorter than `buf` leaves its tail unwritten
/// (the caller's check of the count fails); a file with a byte more than `buf` is
/// [`StoreError::ObjectMismatch`] at once (`actual_size` a lower bound, no SHA-256).
fn fill_from_file(mut file: std::fs::File, buf: &mut [u8], check: &Check) -> Result<[u8; 32], StoreError> {
    let io = |e: std::io::Error| StoreError::storage(&check.key, e);
    let mut hasher = Sha256::new();
    let mut filled = 0usize;
    while filled < buf.len() {
        let end = buf.len().min(filled + FILE_PIECE);
        let Some(piece) = buf.get_mut(filled..end) else { break };
        let n = match file.read(piece) {
            Ok(0) => {
                let digest: [u8; 32] = hasher.finalize().into();
                return Err(check.mismatch(filled as u64, Some(digest)));
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        hasher.update(&piece[..n]);
        filled += n;
    }
    let mut probe = [0u8; 1];
    loop {
        match file.read(&mut probe) {
            Ok(0) => break,
            Ok(n) => return Err(check.mismatch((filled + n) as u64, None)),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    }
    Ok(hasher.finalize().into())
}

/// The allocator of a [`ReadMany`]'s buffers.
type Alloc<B> = Arc<dyn Fn(usize) -> Result<B, StoreError> + Send + Sync>;

/// The verified whole objects of many references, in input order (from
/// [`ObjectReader::read_many`] and [`ObjectReader::read_many_with`]): a stream of
/// `Result<B, StoreError>`, one item per reference, each the object's buffer holding exactly its
/// reference's bytes, or that object's error ([`ObjectReader::read_verified`]'s errors;
/// [`StoreError::Storage`] when the stream is polled outside a Tokio runtime). Dropping it stops
/// the reads it started.
pub struct ReadMany<B> {
    reader: ObjectReader,
    alloc: Alloc<B>,
    /// References not started yet, in input order.
    pending: VecDeque<ObjectIdentity>,
    /// Reads started and not yet handed out, in input order, with the bytes of their objects.
    started: VecDeque<(u64, Started<B>)>,
    /// The sum of the sizes in `started`.
    started_bytes: u64,
    budget_bytes: u64,
    /// The most reads (tasks) started at once.
    window: usize,
    /// Whether the root is a local folder (small objects are read in batches).
    local: bool,
}

/// A read of a [`ReadMany`]: its task, a batch's task, or an outcome ready to hand out.
enum Started<B> {
    /// One object's task, and its `uri` (for the error of a task that failed).
    Task(JoinHandle<Result<B, StoreError>>, String),
    /// A local batch's blocking task, and the size and `uri` of each of its objects, in order.
    Batch(JoinHandle<Vec<Result<B, StoreError>>>, Vec<(u64, String)>),
    /// An outcome (`None` once handed out).
    Ready(Option<Result<B, StoreError>>),
}

// The stream never pins what it holds (its tasks' handles are `Unpin`; the buffers of finished
// reads are only moved out), so it is `Unpin` whatever `B` is.
impl<B> Unpin for ReadMany<B> {}

impl<B> std::fmt::Debug for ReadMany<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadMany")
            .field("pending", &self.pending.len())
            .field("started", &self.started.len())
            .field("started_bytes", &self.started_bytes)
            .field("budget_bytes", &self.budget_bytes)
            .finish()
    }
}

impl<B: AsMut<[u8]> + Send + 'static> ReadMany<B> {
    /// Starts the next reads while the window and the byte budget allow (always one when none
    /// is started).
    fn start_more(&mut self) {
        while self.started.len() < self.window {
            let Some(size) = self.pending.front().map(|r| r.size) else { return };
            if !self.started.is_empty() && self.started_bytes.saturating_add(size) > self.budget_bytes {
                return;
            }
            let runtime = match tokio::runtime::Handle::try_current() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let Some(reference) = self.pending.pop_front() else { return };
                    self.started_bytes = self.started_bytes.saturating_add(size);
                    self.started.push_back((size, Started::Ready(Some(Err(StoreError::storage(reference.uri, e))))));
                    continue;
                }
            };
            if self.local && size <= SMALL_OBJECT_BYTES {
                self.start_batch(&runtime);
                continue;
            }
            let Some(reference) = self.pending.pop_front() else { return };
            let reader = self.reader.clone();
            let alloc = self.alloc.clone();
            let uri = reference.uri.clone();
            let task = runtime.spawn(async move { reader.read_verified_into(&reference, move |len| alloc(len)).await });
            self.started_bytes = self.started_bytes.saturating_add(size);
            self.started.push_back((size, Started::Task(task, uri)));
        }
    }

    /// Starts one blocking task reading the next run of small objects (the first one always,
    /// then while they are small and fit the batch's bounds and the byte budget).
    fn start_batch(&mut self, runtime: &tokio::runtime::Handle) {
        let mut batch: Vec<ObjectIdentity> = Vec::new();
        let mut bytes = 0u64;
        while let Some(next) = self.pending.front() {
            let with = bytes.saturating_add(next.size);
            let fits = next.size <= SMALL_OBJECT_BYTES
                && with <= BATCH_BYTES
                && batch.len() < BATCH_OBJECTS
                && (self.started.is_empty() && batch.is_empty()
                    || self.started_bytes.saturating_add(with) <= self.budget_bytes);
            if !fits && !batch.is_empty() {
                break;
            }
            let Some(reference) = self.pending.pop_front() else { break };
            bytes = with;
            batch.push(reference);
        }
        let items: Vec<(u64, String)> = batch.iter().map(|r| (r.size, r.uri.clone())).collect();
        let reader = self.reader.clone();
        let alloc = self.alloc.clone();
        let task = runtime.spawn_blocking(move || reader.read_local_batch(&batch, &alloc));
        self.started_bytes = self.started_bytes.saturating_add(bytes);
        self.started.push_back((bytes, Started::Batch(task, items)));
    }
}

impl<B: AsMut<[u8]> + Send + 'static> Stream for ReadMany<B> {
    type Item = Result<B, StoreError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        this.start_more();
        loop {
            let Some((size, front)) = this.started.front_mut() else { return Poll::Ready(None) };
            let size = *size;
            let item = match front {
                Started::Task(task, uri) => match Pin::new(task).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(result)) => result,
                    Poll::Ready(Err(e)) => Err(StoreError::storage(uri.clone(), e)),
                },
                Started::Batch(task, items) => {
                    let outcomes = match Pin::new(task).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(outcomes)) if outcomes.len() == items.len() => outcomes,
                        Poll::Ready(Ok(_)) => items
                            .iter()
                            .map(|(_, uri)| Err(StoreError::storage(uri.clone(), "a batch read lost an object")))
                            .collect(),
                        Poll::Ready(Err(e)) => {
                            items.iter().map(|(_, uri)| Err(StoreError::storage(uri.clone(), e.to_string()))).collect()
                        }
                    };
                    // The batch's objects take its place, each with its own size (their sum is the
                    // batch's, so `started_bytes` stays).
                    let sizes: Vec<u64> = items.iter().map(|(size, _)| *size).collect();
                    this.started.pop_front();
                    for (size, outcome) in sizes.into_iter().zip(outcomes).rev() {
                        this.started.push_front((size, Started::Ready(Some(outcome))));
                    }
                    continue;
                }
                Started::Ready(outcome) => match outcome.take() {
                    Some(outcome) => outcome,
                    None => Err(StoreError::storage("read_many", "a read was handed out twice")),
                },
            };
            this.started.pop_front();
            this.started_bytes = this.started_bytes.saturating_sub(size);
            this.start_more();
            return Poll::Ready(Some(item));
        }
    }
}

impl<B> Drop for ReadMany<B> {
    fn drop(&mut self) {
        for (_, read) in &self.started {
            match read {
                Started::Task(task, _) => task.abort(),
                Started::Batch(task, _) => task.abort(),
                Started::Ready(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verified stream over `chunks` (as a response body would deliver them) against a
    /// reference of `expected`, holding a permit of `permits`.
    fn stream_of(
        chunks: Vec<object_store::Result<Bytes>>,
        expected: &[u8],
        permits: &Arc<Semaphore>,
    ) -> VerifiedStream {
        let check = Check {
            key: "objects/k".into(),
            expected_size: expected.len() as u64,
            expected_sha256: Sha256::digest(expected).into(),
        };
        VerifiedStream::new(
            check,
            Some(futures::stream::iter(chunks).boxed()),
            Some(permits.clone().try_acquire_owned().unwrap()),
        )
    }

    fn ok(bytes: &'static [u8]) -> object_store::Result<Bytes> {
        Ok(Bytes::from_static(bytes))
    }

    async fn items(mut stream: VerifiedStream) -> Vec<Result<Bytes, StoreError>> {
        let mut out = Vec::new();
        while let Some(item) = stream.next().await {
            out.push(item);
        }
        assert!(stream.next().await.is_none(), "an ended stream stays ended");
        out
    }

    #[tokio::test]
    async fn exact_bytes_end_the_stream_and_release_the_permit() {
        let permits = Arc::new(Semaphore::new(1));
        let stream = stream_of(vec![ok(b"ab"), ok(b""), ok(b"cd")], b"abcd", &permits);
        assert_eq!(permits.available_permits(), 0);
        let got = items(stream).await;
        assert_eq!(got.len(), 2, "empty chunks are skipped");
        assert!(got.iter().all(Result::is_ok));
        assert_eq!(permits.available_permits(), 1);
    }

    #[tokio::test]
    async fn more_bytes_than_expected_fail_at_once_and_withhold_the_chunk() {
        let permits = Arc::new(Semaphore::new(1));
        let got = items(stream_of(vec![ok(b"ab"), ok(b"cde"), ok(b"never read")], b"abcd", &permits)).await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap().as_ref(), b"ab");
        match &got[1] {
            Err(StoreError::ObjectMismatch { expected_size: 4, actual_size: 5, actual_sha256: None, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(permits.available_permits(), 1, "an error ends the stream");
    }

    #[tokio::test]
    async fn short_or_different_bytes_fail_at_the_end() {
        let permits = Arc::new(Semaphore::new(1));
        let got = items(stream_of(vec![ok(b"abc")], b"abcd", &permits)).await;
        let digest: [u8; 32] = Sha256::digest(b"abc").into();
        match got.last() {
            Some(Err(StoreError::ObjectMismatch { actual_size: 3, actual_sha256: Some(d), .. })) if *d == digest => {}
            other => panic!("{other:?}"),
        }
        let got = items(stream_of(vec![ok(b"abcX")], b"abcd", &permits)).await;
        assert!(matches!(got.as_slice(), [Ok(_), Err(StoreError::ObjectMismatch { actual_size: 4, .. })]));
        let e = got.into_iter().last().unwrap().unwrap_err();
        assert!(e.to_string().starts_with("object `objects/k` does not match its reference: expected 4 bytes"), "{e}");
    }

    #[tokio::test]
    async fn a_failed_body_is_a_storage_error() {
        let permits = Arc::new(Semaphore::new(1));
        let failure = object_store::Error::Generic { store: "S3", source: "connection reset".into() };
        let got = items(stream_of(vec![ok(b"ab"), Err(failure), ok(b"cd")], b"abcd", &permits)).await;
        assert!(matches!(got.as_slice(), [Ok(_), Err(StoreError::Storage { .. })]), "{got:?}");
        assert_eq!(permits.available_permits(), 1);
    }
}
