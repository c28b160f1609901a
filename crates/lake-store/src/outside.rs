//! Where lake writes files that are not the lake's own (GC plans, sharded plans' folders,
//! metrics files, apply checkpoints, the objects `lake get` copies out): outside the lake root,
//! by any route, judged where the write happens.
//!
//! The rules, for every writer (the CLI, the Python package, a Ray task):
//! - **Outside the lake root, by any route** ([`check_outside`]). A local destination is
//!   resolved before it is judged: relative paths against the working folder, `file:` URLs to
//!   their path, `..` and symbolic links by the file system (the longest existing prefix is
//!   canonicalised; a final link is followed too). It is inside when the resolved path is under
//!   the root's resolved folder, or when the kernel's mount table places it on the root's file
//!   system below the root's folder (or in a file system mounted inside the root): a bind mount
//!   of any folder of the root, at any depth ([`crate::mount_table`]); where no mount table can
//!   be read, when one of its folders has the identity (device, inode) of the root folder or of
//!   one of the root's folders three levels down. An object destination (`s3://bucket/key`) is
//!   judged by [`lake_common::normalize_reference`], the one function that decides whether a
//!   spelling names a key of the root; a spelling it cannot tell is refused too.
//! - **Judged where it is written** ([`DocumentFolder`]). A path checked once and written later
//!   is resolved again by the kernel at the write, and a symbolic link re-pointed in between
//!   (`plans -> /lake/objects/01J..`) would send the write into the lake. So the destination's
//!   folder is opened once, judged through the open handle by what the kernel says it is (its
//!   path from `/proc/self/fd`, the mount it is on from `/proc/self/fdinfo`'s `mnt_id`, and for
//!   an overlay file system the upper layer a write lands in), judged again before every
//!   document is written, and every file is created, read, renamed and removed relative to that
//!   handle (`openat`, `renameat`, `unlinkat`), never through a link (`O_NOFOLLOW`): moving or
//!   re-pointing a path after the check changes nothing lake writes.
//! - **Atomically.** A temporary file in the held folder, fsynced, renamed over the name, then
//!   the folder fsynced: a crash leaves the old document or the new one, never a torn one.
//!
//! Source of the kernel facts: `proc(5)` (`/proc/self/fd/N` is a link to the open file's
//! current path, "` (deleted)`" appended when it was removed; `fdinfo` gives `mnt_id`, the
//! mount the file is on, an ID of `mountinfo`), `overlayfs(5)` (writes go to the upper layer,
//! named by the `upperdir=` super option), `openat2(2)` (`RESOLVE_NO_SYMLINKS`,
//! `RESOLVE_NO_XDEV`, `RESOLVE_BENEATH`).

use crate::mount_table::{MountTable, OverlayUpper, Place};
use crate::StoreError;
use lake_common::{normalize_reference, LakeRootUri, NormalizedReference};
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Folders of a local root whose identities are collected to recognise a bind mount where no
/// mount table can be read: more are not read (a lake has a few tables; `objects/` is not
/// descended into).
const ROOT_FOLDERS_READ: usize = 10_000;

const FOLDER: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Where a document is written: a local file, or an object (`s3://bucket/key`, any spelling
/// [`lake_common::normalize_reference`] reads).
#[derive(Debug, Clone, Copy)]
pub enum Destination<'a> {
    /// A local path (relative to the working folder, or absolute).
    Local(&'a Path),
    /// An object URL.
    Url(&'a str),
}

/// The refusal of a destination inside the lake root.
fn inside(root: &LakeRootUri, shown: &str) -> StoreError {
    StoreError::Root {
        root: root.to_string(),
        message: format!(
            "{shown} is inside the lake root; lake never writes its documents among the lake's files (a plan, metrics file, checkpoint or copied object written there could replace an object, a journal entry or the lake descriptor). Write it outside the lake; nothing was written or deleted"
        ),
    }
}

/// Refuses a destination inside the lake `root`, by any spelling or route (see the module
/// documentation), judged by its path now. `shown` is how the operator wrote it (`--out
/// plan.json`). A caller that then writes there holds the folder open instead
/// ([`DocumentFolder::open`]), so that the write lands where this judged.
///
/// # Errors
/// [`StoreError::Root`] naming the destination, also when it cannot be resolved (a link loop,
/// a `..` after a folder that does not exist) or its spelling cannot be told apart from one
/// inside the root.
pub fn check_outside(shown: &str, destination: Destination<'_>, root: &LakeRootUri) -> Result<(), StoreError> {
    let refuse = |why: String| StoreError::Root { root: root.to_string(), message: format!("{shown} {why}") };
    match destination {
        Destination::Url(url) => match normalize_reference(root, url) {
            Ok(NormalizedReference::InRoot(_)) => Err(inside(root, shown)),
            Ok(NormalizedReference::External(_)) => Ok(()),
            Err(e) => Err(refuse(format!(
                "cannot be told apart from a location inside the lake root ({e}); write it as s3://bucket/key, outside the lake; nothing was written or deleted"
            ))),
        },
        Destination::Local(path) => {
            let Some(folders) = RootFolders::of(root) else { return Ok(()) };
            // A path written as a `file:` URL is judged as the URL's path too (a caller that
            // did not parse it may still hand it to a parser that does).
            let url_path = path
                .to_str()
                .filter(|t| t.get(..5).is_some_and(|scheme| scheme.eq_ignore_ascii_case("file:")))
                .and_then(|t| url::Url::parse(t).ok())
                .and_then(|u| u.to_file_path().ok())
                .filter(|p| p != path);
            for candidate in std::iter::once(path.to_path_buf()).chain(url_path) {
                for landed in landing(&candidate).map_err(|e| {
                    refuse(format!("cannot be resolved on this machine ({e}); give a plain path outside the lake"))
                })? {
                    if folders.contains(&landed) {
                        return Err(inside(root, shown));
                    }
                }
            }
            Ok(())
        }
    }
}

/// The resolved folder of a local root and how a path elsewhere is found inside it (see the
/// module documentation).
struct RootFolders {
    /// The root folder, resolved; `None` when it does not exist (nothing can be inside it then).
    path: Option<PathBuf>,
    /// The root folder's identity (device, inode): a folder with it among the ancestors of an
    /// open folder is inside, however its path is spelled (a case-insensitive file system).
    id: Option<(u64, u64)>,
    /// How a path outside the root's folder is found to lie inside it (a bind mount).
    routes: Routes,
}

/// How a bind mount of a folder of the root is recognised.
enum Routes {
    /// By the kernel's mount table: the places of the root's contents on their file systems,
    /// at any depth ([`crate::mount_table`]).
    Mounts(MountTable, Vec<Place>),
    /// Where no mount table can be read: (device, inode) of the root and of its folders down to
    /// three levels (not below `objects/`).
    Identities(HashSet<(u64, u64)>),
}

impl RootFolders {
    /// The folders of a local `root`; `None` for a root on an object store (no local file is
    /// ever one of its objects).
    fn of(root: &LakeRootUri) -> Option<Self> {
        if root.scheme() != "file" {
            return None;
        }
        let root = PathBuf::from(format!("/{}", root.path()));
        let Ok(path) = std::fs::canonicalize(&root) else {
            return Some(Self { path: None, id: None, routes: Routes::Identities(HashSet::new()) });
        };
        let id = std::fs::metadata(&path).ok().map(|m| (m.dev(), m.ino()));
        let routes = match MountTable::read() {
            Some(table) => {
                let inside = inside_places(&table, &path);
                Routes::Mounts(table, inside)
            }
            None => Routes::Identities(folder_identities(&path)),
        };
        Some(Self { path: Some(path), id, routes })
    }

    /// Whether the resolved `path` lies inside the root (see the module documentation).
    fn contains(&self, path: &Path) -> bool {
        let Some(root) = &self.path else { return false };
        if path.starts_with(root) {
            return true;
        }
        match &self.routes {
            Routes::Mounts(table, inside) => table.lies_in(path, inside),
            // A folder with the identity of the root or of one of its folders.
            Routes::Identities(ids) => path
                .ancestors()
                .any(|a| std::fs::metadata(a).is_ok_and(|m| m.is_dir() && ids.contains(&(m.dev(), m.ino())))),
        }
    }

    /// Whether the open folder `fd` lies inside the root, judged by what the kernel says of the
    /// handle: its current path, the mount it is on, and (an overlay) where writes into it land.
    /// A handle the kernel cannot describe (no `/proc`, a removed folder) is judged inside:
    /// the caller refuses rather than guess.
    fn contains_open(&self, fd: &OwnedFd) -> Result<bool, String> {
        let Some(root) = &self.path else { return Ok(false) };
        let path = open_path(fd)?;
        if path.starts_with(root) || self.id.is_some_and(|id| has_ancestor(fd, id)) {
            return Ok(true);
        }
        match &self.routes {
            Routes::Mounts(table, _) => {
                let mount = mount_id(fd)?;
                // The table read now: a mount made since the root was judged counts, on either
                // side (a bind mount of the held folder into the root, or of the root).
                let now = MountTable::read().unwrap_or_else(|| table.clone());
                let inside = inside_places(&now, root);
                let here = now.place_on(mount, &path).ok_or_else(|| {
                    format!("the kernel places it on mount {mount}, which its mount table does not show")
                })?;
                if inside.iter().any(|p| p.holds(&here)) {
                    return Ok(true);
                }
                match now.overlay_upper(mount, &path) {
                    None | Some(OverlayUpper::Unknown) => Err(
                        "it is on an overlay file system whose upper layer (where writes land) cannot be read from the mount table"
                            .into(),
                    ),
                    Some(OverlayUpper::NotOverlay) => Ok(false),
                    Some(OverlayUpper::At(upper)) => {
                        let landed = resolve_existing_prefix(&upper)?;
                        Ok(landed.starts_with(root) || now.lies_in(&landed, &inside))
                    }
                }
            }
            Routes::Identities(ids) => {
                let stat = rustix::fs::fstat(fd).map_err(|e| e.to_string())?;
                Ok(ids.contains(&(stat.st_dev, stat.st_ino)) || self.contains(&path))
            }
        }
    }
}

/// The places whose contents lie inside the resolved folder `root` ([`MountTable::places_inside`]),
/// and where the root lies on an overlay file system, the same folder in each of its layers:
/// a write into the upper layer's folder, or a lower one's, changes what the root holds.
fn inside_places(table: &MountTable, root: &Path) -> Vec<Place> {
    let mut places = table.places_inside(root);
    for layer in table.overlay_layers(root) {
        if let Some(place) = resolve_existing_prefix(&layer).ok().and_then(|l| table.place(&l)) {
            places.push(place);
        }
    }
    places
}

/// Whether a folder with the identity `id` (device, inode) is the open folder `fd` or one of
/// its ancestors (followed by `..`, at most 4096 levels).
fn has_ancestor(fd: &OwnedFd, id: (u64, u64)) -> bool {
    let Ok(mut here) = rustix::fs::openat(fd, ".", FOLDER, Mode::empty()) else { return false };
    for _ in 0..4096 {
        let Ok(stat) = rustix::fs::fstat(&here) else { return false };
        if (stat.st_dev, stat.st_ino) == id {
            return true;
        }
        let Ok(parent) = rustix::fs::openat(&here, "..", FOLDER, Mode::empty()) else { return false };
        match rustix::fs::fstat(&parent) {
            Ok(up) if (up.st_dev, up.st_ino) == (stat.st_dev, stat.st_ino) => return false,
            Ok(_) => here = parent,
            Err(_) => return false,
        }
    }
    false
}

/// The current path of the open file `fd`, as the kernel tells it (`/proc/self/fd/N`).
///
/// # Errors
/// A message when the kernel does not tell (no `/proc`), or the file was removed.
fn open_path(fd: &OwnedFd) -> Result<PathBuf, String> {
    use std::os::fd::AsRawFd;
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let path = std::fs::read_link(&link).map_err(|e| format!("the kernel does not tell where it is ({e})"))?;
    // A removed folder has no links left (the kernel then appends " (deleted)" to its path; a
    // folder may also be named so).
    let removed = rustix::fs::fstat(fd).map_or(true, |s| s.st_nlink == 0);
    if !path.is_absolute() || removed {
        return Err(format!("it is no longer a folder on this machine's file system ({})", path.display()));
    }
    Ok(path)
}

/// The mount the open file `fd` is on (`mnt_id` of `/proc/self/fdinfo/N`).
fn mount_id(fd: &OwnedFd) -> Result<u64, String> {
    use std::os::fd::AsRawFd;
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
        .map_err(|e| format!("the kernel does not tell which mount it is on ({e})"))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "the kernel does not tell which mount it is on (no mnt_id)".into())
}

/// (device, inode) of the resolved folder `root` and of its folders down to three levels, not
/// below `objects/`, at most [`ROOT_FOLDERS_READ`] entries read.
fn folder_identities(root: &Path) -> HashSet<(u64, u64)> {
    let mut ids = HashSet::new();
    let mut read = 0usize;
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((folder, depth)) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&folder) else { continue };
        if !meta.is_dir() {
            continue;
        }
        ids.insert((meta.dev(), meta.ino()));
        let below_objects = folder.strip_prefix(root).is_ok_and(|rel| rel.starts_with(crate::layout::OBJECTS_PREFIX));
        if depth >= 3 || below_objects {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            read += 1;
            if read > ROOT_FOLDERS_READ {
                break;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    ids
}

/// The resolved paths a write at `path` lands on: its folder resolved (the longest existing
/// prefix canonicalised, so `..` and links are resolved by the file system) joined with its
/// name, and the path itself resolved when it exists (a final symbolic link followed).
///
/// # Errors
/// A message when the path cannot be resolved: a `..` after a folder that does not exist, a
/// link loop or a permission error.
fn landing(path: &Path) -> Result<Vec<PathBuf>, String> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| format!("no working folder: {e}"))?.join(path)
    };
    let name = absolute.file_name().ok_or("it names no file")?.to_owned();
    let folder = absolute.parent().ok_or("it names no file")?;
    let mut landed = vec![resolve_existing_prefix(folder)?.join(name)];
    match std::fs::canonicalize(&absolute) {
        Ok(resolved) => landed.push(resolved),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(landed)
}

/// `folder` with its longest existing prefix canonicalised and the rest appended.
fn resolve_existing_prefix(folder: &Path) -> Result<PathBuf, String> {
    let mut existing = folder.to_path_buf();
    let mut rest: Vec<OsString> = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(resolved) => {
                let mut out = resolved;
                for name in rest.iter().rev() {
                    out.push(name);
                }
                return Ok(out);
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
                match existing.components().next_back() {
                    Some(Component::Normal(name)) => rest.push(name.to_owned()),
                    Some(Component::CurDir) => {}
                    _ => {
                        return Err(format!(
                            "`{}` cannot be resolved: a folder before it does not exist",
                            existing.display()
                        ))
                    }
                }
                existing.pop();
            }
            Err(e) => return Err(format!("`{}`: {e}", existing.display())),
        }
    }
}

/// What a name in a [`DocumentFolder`] is, read without following a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    /// Nothing by that name.
    Missing,
    /// A regular file of `len` bytes.
    File {
        /// Its size in bytes.
        len: u64,
    },
    /// A folder.
    Folder,
    /// A symbolic link (never followed).
    Link,
    /// A device, pipe or socket.
    Other,
}

/// A local folder that receives lake's documents, held open for a whole run and judged outside
/// the lake root through its handle (see the module documentation). Cheap to clone (one open
/// handle, shared).
///
/// Every file is named by a single path component (`plan.json`, never `a/b`); a folder below is
/// reached with [`DocumentFolder::subfolder`].
#[derive(Clone)]
pub struct DocumentFolder {
    inner: Arc<Held>,
}

struct Held {
    fd: OwnedFd,
    /// How the folder is shown in messages (the operator's spelling, or a folder below it).
    shown: PathBuf,
    /// The lake root it is judged outside of, and how (shared with the folders below it);
    /// `None` for a folder opened only to read.
    judge: Option<Arc<(LakeRootUri, RootFolders)>>,
}

impl std::fmt::Debug for DocumentFolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocumentFolder").field("shown", &self.inner.shown).finish_non_exhaustive()
    }
}

impl DocumentFolder {
    /// Opens the folder `path` (symbolic links in it followed, once, now) to write documents
    /// for the lake `root`, and judges it outside that root through the open handle.
    ///
    /// # Errors
    /// [`StoreError::Root`] when it lies inside the root by any route, or the kernel cannot
    /// tell where it lies; [`StoreError::Io`] when it cannot be opened (missing, not a folder).
    pub fn open(path: &Path, root: &LakeRootUri) -> Result<Self, StoreError> {
        let fd = open_folder_at(rustix::fs::CWD, path).map_err(|e| io(path, e))?;
        let judge = RootFolders::of(root).map(|folders| Arc::new((root.clone(), folders)));
        Self::held(fd, path.to_path_buf(), judge)
    }

    /// Opens the folder `path` to read documents from it (nothing is written through it).
    ///
    /// # Errors
    /// [`StoreError::Io`] when it cannot be opened.
    pub fn open_to_read(path: &Path) -> Result<Self, StoreError> {
        let fd = open_folder_at(rustix::fs::CWD, path).map_err(|e| io(path, e))?;
        Self::held(fd, path.to_path_buf(), None)
    }

    fn held(fd: OwnedFd, shown: PathBuf, judge: Option<Arc<(LakeRootUri, RootFolders)>>) -> Result<Self, StoreError> {
        let folder = Self { inner: Arc::new(Held { fd, shown, judge }) };
        folder.judge()?;
        Ok(folder)
    }

    /// Judges the held folder outside the lake root again, now (the folder may have been moved
    /// into the root, or a mount made over it, since it was opened). Every write calls it.
    ///
    /// # Errors
    /// [`StoreError::Root`] when it lies inside the root, or the kernel cannot tell where it lies.
    pub fn judge(&self) -> Result<(), StoreError> {
        let Some((root, folders)) = self.inner.judge.as_deref() else { return Ok(()) };
        let shown = self.inner.shown.display().to_string();
        match folders.contains_open(&self.inner.fd) {
            Ok(false) => Ok(()),
            Ok(true) => Err(inside(root, &shown)),
            Err(why) => Err(StoreError::Root {
                root: root.to_string(),
                message: format!(
                    "{shown} cannot be told to lie outside the lake root: {why}. Write to a plain local folder outside the lake; nothing was written or deleted"
                ),
            }),
        }
    }

    /// The refusal to write at `shown` below this folder, for `why` (a link, a mount):
    /// [`StoreError::Root`] when the folder is judged against a lake root, else an I/O error.
    fn refusal(&self, shown: &Path, why: &str) -> StoreError {
        let message = format!(
            "{} cannot be written: {why}. Nothing was written there; remove the link, or choose another folder",
            shown.display()
        );
        match self.inner.judge.as_deref() {
            Some((root, _)) => StoreError::Root { root: root.to_string(), message },
            None => io(shown, std::io::Error::other(message)),
        }
    }

    /// The path of `name` in this folder, as shown in messages.
    pub fn shown(&self, name: &OsStr) -> PathBuf {
        self.inner.shown.join(name)
    }

    /// The folder as shown in messages.
    pub fn path(&self) -> &Path {
        &self.inner.shown
    }

    /// What `name` is, without following a link.
    ///
    /// # Errors
    /// [`StoreError::Io`] when it cannot be inspected.
    pub fn entry(&self, name: &OsStr) -> Result<Entry, StoreError> {
        check_name(name).map_err(|e| io(&self.shown(name), e))?;
        match rustix::fs::statat(&self.inner.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => Entry::File { len: stat.st_size as u64 },
                FileType::Directory => Entry::Folder,
                FileType::Symlink => Entry::Link,
                _ => Entry::Other,
            }),
            Err(Errno::NOENT) => Ok(Entry::Missing),
            Err(e) => Err(io(&self.shown(name), e.into())),
        }
    }

    /// Opens the regular file `name` to read (never through a link); `None` when there is none.
    ///
    /// # Errors
    /// [`StoreError::Io`] when it cannot be opened, or is a link or not a regular file.
    pub fn open_file(&self, name: &OsStr) -> Result<Option<std::fs::File>, StoreError> {
        check_name(name).map_err(|e| io(&self.shown(name), e))?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rustix::fs::openat(&self.inner.fd, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(io(&self.shown(name), e.into())),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| io(&self.shown(name), e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Err(io(&self.shown(name), std::io::Error::other("not a regular file")));
        }
        Ok(Some(std::fs::File::from(fd)))
    }

    /// The names in this folder (`.` and `..` left out).
    ///
    /// # Errors
    /// [`StoreError::Io`] when it cannot be read.
    pub fn names(&self) -> Result<Vec<OsString>, StoreError> {
        let err = |e: Errno| io(&self.inner.shown, e.into());
        let fd = rustix::fs::openat(&self.inner.fd, ".", FOLDER, Mode::empty()).map_err(err)?;
        let dir = rustix::fs::Dir::read_from(&fd).map_err(err)?;
        let mut names = Vec::new();
        for entry in dir {
            let name = entry.map_err(err)?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsStr::from_bytes(&name).to_owned());
            }
        }
        Ok(names)
    }

    /// A new temporary file in this folder (`.lake-<ULID>.tmp`, mode 0666 less the umask),
    /// created after the folder is judged again; it is removed when dropped unless persisted.
    ///
    /// # Errors
    /// As [`DocumentFolder::judge`]; [`StoreError::Io`] when it cannot be created.
    pub fn temporary(&self) -> Result<TemporaryFile, StoreError> {
        self.judge()?;
        let name = OsString::from(format!(".lake-{}.tmp", ulid::Ulid::new()));
        let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.inner.fd, &name, flags, Mode::from_raw_mode(0o666))
            .map_err(|e| io(&self.shown(&name), e.into()))?;
        Ok(TemporaryFile { folder: self.clone(), name, file: Some(std::fs::File::from(fd)) })
    }

    /// Writes what `produce` streams to `name` atomically and durably (see the module
    /// documentation), replacing what is there (a replaced regular file keeps its mode: a
    /// metrics file read by another user's exporter, say). No check of what is replaced:
    /// callers inspect it first ([`DocumentFolder::entry`]).
    ///
    /// # Errors
    /// As [`DocumentFolder::judge`]; [`StoreError::Io`] when writing fails (`name` is then
    /// unchanged).
    pub fn write_atomically(
        &self,
        name: &OsStr,
        produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), StoreError> {
        check_name(name).map_err(|e| io(&self.shown(name), e))?;
        let mut tmp = self.temporary()?;
        if let Ok(stat) = rustix::fs::statat(&self.inner.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile {
                // Permission bits only: never set-user-ID, set-group-ID or sticky.
                let mode = Mode::from_raw_mode(stat.st_mode & 0o777);
                rustix::fs::fchmod(tmp.file()?, mode).map_err(|e| io(&self.shown(name), e.into()))?;
            }
        }
        {
            let mut out = std::io::BufWriter::new(tmp.file()?);
            produce(&mut out).and_then(|()| out.flush()).map_err(|e| io(&self.shown(name), e))?;
        }
        tmp.persist(name, false)?;
        Ok(())
    }

    /// Removes the file `name` (never a folder; a link itself, never its target); nothing there
    /// is no error.
    ///
    /// # Errors
    /// [`StoreError::Io`] when it cannot be removed.
    pub fn remove(&self, name: &OsStr) -> Result<(), StoreError> {
        check_name(name).map_err(|e| io(&self.shown(name), e))?;
        self.judge()?;
        match rustix::fs::unlinkat(&self.inner.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {
                let _ = rustix::fs::fsync(&self.inner.fd);
                Ok(())
            }
            Err(e) => Err(io(&self.shown(name), e.into())),
        }
    }

    /// Takes the advisory lock of the file `name` (created empty when missing, never through a
    /// link): an exclusive `flock(2)`, held until the returned [`FolderLock`] is dropped and
    /// released by the kernel when the process ends, however it ends (so a crash leaves no
    /// stale lock). `None` when another holder has it (another process, or another open of it
    /// in this one).
    ///
    /// # Errors
    /// As [`DocumentFolder::judge`]; [`StoreError::Io`] when the file cannot be opened or
    /// locked, or was replaced under the lock again and again.
    pub fn lock(&self, name: &OsStr) -> Result<Option<FolderLock>, StoreError> {
        check_name(name).map_err(|e| io(&self.shown(name), e))?;
        self.judge()?;
        let err = |e: Errno| io(&self.shown(name), e.into());
        for _ in 0..8 {
            let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let fd = rustix::fs::openat(&self.inner.fd, name, flags, Mode::from_raw_mode(0o666)).map_err(err)?;
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Ok(None),
                Err(e) => return Err(err(e)),
            }
            // The lock is the file the name holds now: one renamed over the name between the
            // open and the lock (whose lock another holder may take) is opened again.
            let held = rustix::fs::fstat(&fd).map_err(err)?;
            match rustix::fs::statat(&self.inner.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(now) if (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) => {
                    return Ok(Some(FolderLock { _fd: fd }))
                }
                Ok(_) | Err(Errno::NOENT) => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(io(&self.shown(name), std::io::Error::other("the lock file was replaced while it was being locked")))
    }

    /// The folder `relative` (`/`-separated names) below this one, created when missing (when
    /// `create`), reached without following a symbolic link or crossing a mount in any part,
    /// and judged outside the root like this one.
    ///
    /// # Errors
    /// [`StoreError::Io`] when a part is a link, a mount, missing (without `create`) or cannot
    /// be created; as [`DocumentFolder::judge`].
    pub fn subfolder(&self, relative: &str, create: bool) -> Result<DocumentFolder, StoreError> {
        // This folder first: nothing is created below a folder that lies in the root by now.
        self.judge()?;
        let shown = self.inner.shown.join(relative);
        let mut fd: Option<OwnedFd> = None;
        for part in relative.split('/').filter(|p| !p.is_empty()) {
            check_name(OsStr::new(part)).map_err(|e| io(&shown, e))?;
            let at = fd.as_ref().map_or(self.inner.fd.as_fd(), |f| f.as_fd());
            if create {
                match rustix::fs::mkdirat(at, part, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(io(&shown, e.into())),
                }
            }
            let next = rustix::fs::openat2(
                at,
                part,
                FOLDER | OFlags::NOFOLLOW,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV | ResolveFlags::BENEATH,
            );
            let next = match next {
                Err(Errno::NOSYS) | Err(Errno::PERM) => {
                    let next = rustix::fs::openat(at, part, FOLDER | OFlags::NOFOLLOW, Mode::empty())
                        .map_err(|e| io(&shown, e.into()))?;
                    let (here, there) = (rustix::fs::fstat(at), rustix::fs::fstat(&next));
                    match (here, there) {
                        (Ok(a), Ok(b)) if a.st_dev == b.st_dev => next,
                        _ => {
                            let why = format!("`{part}` is a mount point; lake does not write across mounts below the folder it checked");
                            return Err(self.refusal(&shown, &why));
                        }
                    }
                }
                other => other.map_err(|e| {
                    let why = match e {
                        Errno::LOOP | Errno::NOTDIR => {
                            format!("`{part}` is a symbolic link or not a folder; lake does not write through links")
                        }
                        Errno::XDEV => format!(
                            "`{part}` is a mount point; lake does not write across mounts below the folder it checked"
                        ),
                        e => return io(&shown, e.into()),
                    };
                    self.refusal(&shown, &why)
                })?,
            };
            fd = Some(next);
        }
        let fd = match fd {
            Some(fd) => fd,
            None => rustix::fs::openat(&self.inner.fd, ".", FOLDER, Mode::empty()).map_err(|e| io(&shown, e.into()))?,
        };
        Self::held(fd, shown, self.inner.judge.clone())
    }
}

/// An advisory lock held on a file of a [`DocumentFolder`] ([`DocumentFolder::lock`]);
/// released when dropped, or when the process ends.
#[derive(Debug)]
pub struct FolderLock {
    _fd: OwnedFd,
}

/// A temporary file in a [`DocumentFolder`] ([`DocumentFolder::temporary`]): write it, then
/// [`TemporaryFile::persist`] it under its name; dropped unpersisted, it is removed.
pub struct TemporaryFile {
    folder: DocumentFolder,
    name: OsString,
    file: Option<std::fs::File>,
}

impl TemporaryFile {
    /// The open file, to write to.
    ///
    /// # Errors
    /// [`StoreError::Io`] after it was persisted.
    pub fn file(&mut self) -> Result<&mut std::fs::File, StoreError> {
        let shown = self.folder.shown(&self.name);
        self.file.as_mut().ok_or_else(|| io(&shown, std::io::Error::other("already persisted")))
    }

    /// Fsyncs the file, renames it to `name` in its folder (after the folder is judged again),
    /// and fsyncs the folder. With `no_replace`, an existing `name` is left as it is and
    /// `Ok(false)` returned (the temporary file is removed); else it is replaced. `Ok(true)`
    /// when the file now has the name.
    ///
    /// # Errors
    /// As [`DocumentFolder::judge`]; [`StoreError::Io`] when a step fails (`name` is then
    /// unchanged).
    pub fn persist(mut self, name: &OsStr, no_replace: bool) -> Result<bool, StoreError> {
        let shown = self.folder.shown(name);
        check_name(name).map_err(|e| io(&shown, e))?;
        let file = self.file.take().ok_or_else(|| io(&shown, std::io::Error::other("already persisted")))?;
        file.sync_all().map_err(|e| io(&shown, e))?;
        drop(file);
        self.folder.judge()?;
        let fd = &self.folder.inner.fd;
        let flags = if no_replace { rustix::fs::RenameFlags::NOREPLACE } else { rustix::fs::RenameFlags::empty() };
        match rustix::fs::renameat_with(fd, &self.name, fd, name, flags) {
            Ok(()) => {}
            Err(Errno::EXIST) if no_replace => return Ok(false),
            Err(e) => return Err(io(&shown, e.into())),
        }
        // Renamed: nothing is left to remove.
        self.name = OsString::new();
        let _ = rustix::fs::fsync(fd);
        Ok(true)
    }
}

impl Drop for TemporaryFile {
    fn drop(&mut self) {
        if !self.name.is_empty() {
            let _ = rustix::fs::unlinkat(&self.folder.inner.fd, &self.name, AtFlags::empty());
        }
    }
}

/// Opens the folder `path` relative to `at` (links followed: the operator's own path).
fn open_folder_at(at: impl AsFd, path: &Path) -> std::io::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
    Ok(rustix::fs::openat(at, path, FOLDER, Mode::empty())?)
}

/// Refuses a name that is not one path component.
fn check_name(name: &OsStr) -> std::io::Result<()> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') || bytes.contains(&0) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file name in the folder"));
    }
    Ok(())
}

fn io(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io { path: path.display().to_string(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_of(path: &Path) -> LakeRootUri {
        LakeRootUri::parse(&format!("file://{}", path.display())).unwrap()
    }

    /// Where no mount table can be read, a bind mount of the root or of `_lake/` is recognised
    /// by folder identities (tried only where this machine allows mounts).
    #[test]
    fn without_a_mount_table_bind_mounts_are_recognised_by_folder_identities() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake");
        std::fs::create_dir_all(root.join("_lake")).unwrap();
        let root = root.canonicalize().unwrap();
        let folders =
            RootFolders { path: Some(root.clone()), id: None, routes: Routes::Identities(folder_identities(&root)) };
        assert!(folders.contains(&root.join("plan.json")));
        assert!(!folders.contains(&dir.path().canonicalize().unwrap().join("plan.json")));
        for (inside, at) in [("", "mnt-root"), ("_lake", "mnt-meta")] {
            let target = dir.path().join(at);
            std::fs::create_dir(&target).unwrap();
            let mounted = std::process::Command::new("mount")
                .arg("--bind")
                .arg(root.join(inside))
                .arg(&target)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !mounted {
                eprintln!("mount --bind is not allowed here: the identity route is not tried");
                return;
            }
            let seen = folders.contains(&target.canonicalize().unwrap().join("x.json"));
            let _ = std::process::Command::new("umount").arg("-l").arg(&target).status();
            assert!(seen, "a bind mount of `{inside}` at {at}");
        }
    }

    /// A held folder keeps receiving writes where it was judged: a link re-pointed at the lake
    /// after the folder was opened changes nothing, and a folder moved into the root is refused
    /// at the next write.
    #[test]
    fn writes_land_in_the_held_folder_whatever_its_path_becomes() {
        let dir = tempfile::tempdir().unwrap();
        let lake = dir.path().join("lake");
        std::fs::create_dir_all(lake.join("objects/01J0")).unwrap();
        std::fs::write(lake.join("objects/01J0/plan.json"), b"live").unwrap();
        let plans = dir.path().join("plans");
        std::fs::create_dir(&plans).unwrap();
        let link = dir.path().join("out");
        std::os::unix::fs::symlink(&plans, &link).unwrap();
        let root = root_of(&lake);
        let folder = DocumentFolder::open(&link, &root).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(lake.join("objects/01J0"), &link).unwrap();
        folder.write_atomically(OsStr::new("plan.json"), |o| o.write_all(b"plan")).unwrap();
        assert_eq!(std::fs::read(lake.join("objects/01J0/plan.json")).unwrap(), b"live");
        assert_eq!(std::fs::read(plans.join("plan.json")).unwrap(), b"plan");
        // Moved into the root: refused at the next write.
        std::fs::rename(&plans, lake.join("objects/01J1")).unwrap();
        let err = folder.write_atomically(OsStr::new("plan.json"), |o| o.write_all(b"again")).unwrap_err();
        assert!(matches!(err, StoreError::Root { .. }), "{err}");
        assert_eq!(std::fs::read(lake.join("objects/01J1/plan.json")).unwrap(), b"plan");
        let leftovers: Vec<_> = std::fs::read_dir(lake.join("objects/01J1")).unwrap().flatten().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file was left in the lake");
        // Opening the root's folder itself, or through a link into it, is refused.
        for at in [lake.join("objects/01J0"), link.clone(), lake.clone()] {
            assert!(matches!(DocumentFolder::open(&at, &root), Err(StoreError::Root { .. })), "{}", at.display());
        }
    }

    /// A path whose fifth byte lies inside a character is judged, not a panic.
    #[test]
    fn a_non_ascii_destination_is_judged() {
        let dir = tempfile::tempdir().unwrap();
        let root = root_of(&dir.path().join("lake"));
        for name in ["计划.json", "plané.ckpt", "fiché", "file:计划"] {
            assert!(check_outside(name, Destination::Local(Path::new(name)), &root).is_ok(), "{name}");
        }
    }

    /// Nothing is created below a held folder that was moved into the root, and a folder bound
    /// into the root after it was opened is refused at its next write (tried only where this
    /// machine allows mounts).
    #[test]
    fn a_folder_that_came_into_the_root_after_it_was_opened_receives_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let lake = dir.path().join("lake");
        std::fs::create_dir_all(lake.join("objects")).unwrap();
        let root = root_of(&lake);
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let folder = DocumentFolder::open(&out, &root).unwrap();
        std::fs::rename(&out, lake.join("objects/01J0")).unwrap();
        assert!(matches!(folder.subfolder("objects/01J1", true), Err(StoreError::Root { .. })));
        assert!(folder.remove(OsStr::new("x")).is_err());
        assert!(!lake.join("objects/01J0/objects").exists(), "nothing created in the root");

        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let folder = DocumentFolder::open(&other, &root).unwrap();
        let target = lake.join("objects/01J2");
        std::fs::create_dir(&target).unwrap();
        let mounted = std::process::Command::new("mount")
            .arg("--bind")
            .arg(&other)
            .arg(&target)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("mount --bind is not allowed here: the bind route is not tried");
            return;
        }
        let refused = folder.write_atomically(OsStr::new("plan.json"), |o| o.write_all(b"p"));
        let _ = std::process::Command::new("umount").arg("-l").arg(&target).status();
        assert!(matches!(refused, Err(StoreError::Root { .. })), "{refused:?}");
        assert!(!other.join("plan.json").exists());
    }

    /// A lake whose root lies on an overlay is inside through the overlay's layers too: a
    /// folder of the root's upper layer (where the root's files really are) is refused (tried
    /// only where this machine allows mounts).
    #[test]
    fn the_layers_of_a_root_on_an_overlay_are_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let (lower, upper, work, merged) =
            (dir.path().join("lower"), dir.path().join("upper"), dir.path().join("work"), dir.path().join("merged"));
        for d in [&lower, &upper, &work, &merged] {
            std::fs::create_dir(d).unwrap();
        }
        let options = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        let mounted = std::process::Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &options])
            .arg(&merged)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("overlay mounts are not allowed here: the overlay route is not tried");
            return;
        }
        std::fs::create_dir_all(merged.join("lake/objects/01J0")).unwrap();
        let root = root_of(&merged.join("lake"));
        let through_upper = DocumentFolder::open(&upper.join("lake/objects/01J0"), &root);
        let path_route = check_outside("x", Destination::Local(&upper.join("lake/objects/01J0/x")), &root);
        let outside = DocumentFolder::open(dir.path(), &root);
        let _ = std::process::Command::new("umount").arg("-l").arg(&merged).status();
        assert!(matches!(through_upper, Err(StoreError::Root { .. })), "{through_upper:?}");
        assert!(matches!(path_route, Err(StoreError::Root { .. })), "{path_route:?}");
        assert!(outside.is_ok(), "{outside:?}");
    }

    /// A folder below a held one is reached without links or mount crossings.
    #[test]
    fn a_subfolder_is_never_reached_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let lake = dir.path().join("lake");
        std::fs::create_dir_all(lake.join("objects")).unwrap();
        let out = dir.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(lake.join("objects"), out.join("objects")).unwrap();
        let folder = DocumentFolder::open(&out, &root_of(&lake)).unwrap();
        let err = folder.subfolder("objects/01J0", true).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!lake.join("objects/01J0").exists());
        let made = folder.subfolder("external/a", true).unwrap();
        made.write_atomically(OsStr::new("f"), |o| o.write_all(b"x")).unwrap();
        assert_eq!(std::fs::read(out.join("external/a/f")).unwrap(), b"x");
        assert_eq!(made.entry(OsStr::new("f")).unwrap(), Entry::File { len: 1 });
        assert_eq!(folder.entry(OsStr::new("objects")).unwrap(), Entry::Link);
        assert!(folder.subfolder("../x", true).is_err());
    }
}
