//! Documents lake writes for an operator, and where they may go: plan documents (`lake gc --out
//! FILE`, [`crate::plan::GcPlan::save`]), sharded plans' folders (`--shards N --out DIR`,
//! [`crate::shards::ShardedPlan::save`]), metrics files (`--metrics-file`), apply checkpoints
//! and the plan saved beside them ([`crate::checkpoint`]).
//!
//! The rule, enforced here for every writer of such files (the CLI, the Python package, a Ray
//! task), so that a dry run can never change the lake:
//! - **Outside the lake root, by any route.** A local destination is resolved before it is
//!   judged: relative paths against the working folder, `file:` URLs to their path, `..` and
//!   symbolic links by the file system (the longest existing prefix is canonicalised; a final
//!   link is followed too). It is inside when the resolved path is under the root's resolved
//!   folder, or when the kernel's mount table places it on the root's file system below the
//!   root's folder (or in a file system mounted inside the root): a bind mount of any folder of
//!   the root, at any depth ([`crate::mount_table`]); where no mount table can be read, when one
//!   of its folders has the identity (device, inode) of the root folder or of one of the root's
//!   folders three levels down (`objects/`, `tables/<t>.lance/data`, `_lake/...`). An object destination
//!   (`s3://bucket/key`) is judged by [`lake_common::normalize_reference`], the one function
//!   that decides whether a spelling names a key of the root (`s3a://`, percent-encoding,
//!   letter case, `.`/`..` segments); a spelling it cannot tell is refused too.
//! - **Only over a document of the same kind.** An existing regular file is replaced only when
//!   it is empty or a document of the kind being written ([`DocumentKind`], recognised from its
//!   first bytes), unless the caller forces it (`--force`); a folder, device, pipe or socket
//!   never is (an atomic write would replace the node itself). A sharded plan's folder is
//!   written into only when it is empty or holds nothing but a manifest and shard documents.
//! - **Atomically.** A temporary file in the destination's folder, fsynced, renamed over the
//!   destination, then the folder fsynced: a crash leaves the old document or the new one, never
//!   a torn one ([`write_atomically`]).
//!
//! Size: about 650 lines; resolving a destination against the root (mount table, folder
//! identities, existing prefixes) and recognising documents by their first bytes take most of it,
//! with 60 lines of unit tests. One file: the three rules above are one check every writer calls.

use crate::error::GcError;
use crate::mount_table::{MountTable, Place};
pub use lake_common::LakeRootUri;
use lake_common::{normalize_reference, NormalizedReference};
use lake_store::StoreError;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Bytes of an existing file read to recognise its kind.
const HEAD_BYTES: usize = 4096;
/// A metrics file larger than this is not one lake wrote (a few KiB).
const METRICS_MAX_BYTES: u64 = 1 << 20;
/// Folders of a local root whose identities are collected to recognise a bind mount: more are
/// not read (a lake has a few tables; `objects/` is not descended into).
const ROOT_FOLDERS_READ: usize = 10_000;

/// The kind of a document lake writes outside a lake. An existing file is replaced only by a
/// document of its own kind (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// A GC plan document, `{"digest": ..., "plan": {"format_version": ..., ...}}`
    /// ([`crate::plan::GcPlan::write_document`]; a shard of a sharded plan too).
    Plan,
    /// A sharded plan's manifest document, `{"digest": ..., "manifest": {"format_version": ...}}`.
    ShardManifest,
    /// An apply checkpoint, `{"format_version": ..., "plan_digest": ...}`.
    Checkpoint,
    /// Prometheus text metrics of `lake gc`: every line a `lake_...` sample or its `# HELP` or
    /// `# TYPE` line.
    Metrics,
}

impl DocumentKind {
    /// What the kind is called in messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Plan => "GC plan document",
            Self::ShardManifest => "shard manifest document",
            Self::Checkpoint => "apply checkpoint",
            Self::Metrics => "lake metrics file",
        }
    }

    /// Whether `head`, the first bytes of a file (all of it when `whole`), begins a document of
    /// this kind. JSON documents are recognised by their first members, whitespace-insensitive
    /// (pretty-printed as lake writes them, or compact); a metrics file must be read whole.
    pub fn recognises(self, head: &[u8], whole: bool) -> bool {
        match self {
            Self::Plan => {
                json_head_is(head, &["{", "\"digest\"", ":", "\"", ",", "\"plan\"", ":", "{", "\"format_version\""])
            }
            Self::ShardManifest => {
                json_head_is(head, &["{", "\"digest\"", ":", "\"", ",", "\"manifest\"", ":", "{", "\"format_version\""])
            }
            Self::Checkpoint => json_head_is(head, &["{", "\"format_version\"", ":", "0", ",", "\"plan_digest\""]),
            Self::Metrics => {
                whole
                    && std::str::from_utf8(head).is_ok_and(|text| {
                        text.lines().any(|l| !l.is_empty())
                            && text.lines().filter(|l| !l.is_empty()).all(|l| {
                                l.starts_with("# HELP lake_") || l.starts_with("# TYPE lake_") || l.starts_with("lake_")
                            })
                    })
            }
        }
    }
}

/// One token of a JSON document's head: a punctuation character, a string with its quotes, or
/// `0` for a number.
fn json_tokens(head: &[u8], count: usize) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < head.len() && tokens.len() < count {
        let b = head[i];
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => i += 1,
            b'{' | b'}' | b'[' | b']' | b':' | b',' => {
                tokens.push((b as char).to_string());
                i += 1;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < head.len() && head[i] != b'"' {
                    i += if head[i] == b'\\' { 2 } else { 1 };
                }
                if i >= head.len() {
                    break;
                }
                i += 1;
                tokens.push(String::from_utf8_lossy(&head[start..i]).into_owned());
            }
            b'-' | b'0'..=b'9' => {
                while i < head.len() && matches!(head[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                    i += 1;
                }
                tokens.push("0".into());
            }
            _ => break,
        }
    }
    tokens
}

/// Whether `head` starts with `pattern`'s tokens; `"` in the pattern matches any string.
fn json_head_is(head: &[u8], pattern: &[&str]) -> bool {
    let tokens = json_tokens(head, pattern.len());
    tokens.len() == pattern.len()
        && tokens.iter().zip(pattern).all(|(t, p)| if *p == "\"" { t.starts_with('"') } else { t == p })
}

/// Where a document is written: a local file, or an object (`s3://bucket/key`, any spelling
/// [`lake_common::normalize_reference`] reads).
#[derive(Debug, Clone, Copy)]
pub enum Destination<'a> {
    /// A local path (relative to the working folder, or absolute).
    Local(&'a Path),
    /// An object URL.
    Url(&'a str),
}

/// Refuses a destination inside the lake `root`, by any spelling or route (see the module
/// documentation). `shown` is how the operator wrote it (`--out plan.json`).
///
/// # Errors
/// [`StoreError::Root`](lake_store::StoreError::Root) naming the destination, also when it cannot be resolved (a link
/// loop, a `..` after a folder that does not exist) or its spelling cannot be told apart from
/// one inside the root.
pub fn check_outside(shown: &str, destination: Destination<'_>, root: &LakeRootUri) -> Result<(), GcError> {
    let refuse =
        |why: String| GcError::from(StoreError::Root { root: root.to_string(), message: format!("{shown} {why}") });
    let inside = || {
        refuse("is inside the lake root; lake never writes its documents among the lake's files (a plan, metrics file or checkpoint written there could replace an object, a journal entry or the lake descriptor). Write it outside the lake; nothing was written or deleted".into())
    };
    match destination {
        Destination::Url(url) => match normalize_reference(root, url) {
            Ok(NormalizedReference::InRoot(_)) => Err(inside()),
            Ok(NormalizedReference::External(_)) => Ok(()),
            Err(e) => Err(refuse(format!(
                "cannot be told apart from a location inside the lake root ({e}); write it as s3://bucket/key, outside the lake; nothing was written or deleted"
            ))),
        },
        Destination::Local(path) => {
            if root.scheme() != "file" {
                // A local file is never an object of an S3 root.
                return Ok(());
            }
            let folders = RootFolders::of(Path::new(&format!("/{}", root.path())));
            // A path written as a `file:` URL is judged as the URL's path too (a caller that
            // did not parse it may still hand it to a parser that does).
            let url_path = path.to_str().and_then(|text| parse_local("", text).ok()).filter(|p| p != path);
            for candidate in std::iter::once(path.to_path_buf()).chain(url_path) {
                for landed in landing(&candidate).map_err(|e| {
                    refuse(format!("cannot be resolved on this machine ({e}); give a plain path outside the lake"))
                })? {
                    if folders.contains(&landed) {
                        return Err(inside());
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
    fn of(root: &Path) -> Self {
        let Ok(path) = std::fs::canonicalize(root) else {
            return Self { path: None, routes: Routes::Identities(HashSet::new()) };
        };
        let routes = match MountTable::read() {
            Some(table) => {
                let inside = table.places_inside(&path);
                Routes::Mounts(table, inside)
            }
            None => Routes::Identities(folder_identities(&path)),
        };
        Self { path: Some(path), routes }
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
        let below_objects =
            folder.strip_prefix(root).is_ok_and(|rel| rel.starts_with(lake_store::layout::OBJECTS_PREFIX));
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
/// A message when the path cannot be resolved: not UTF-8 is fine, but a `..` after a folder that
/// does not exist, a link loop or a permission error is not.
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
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
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

/// The lake root a document names (its `root` field: `file:///abs/path` or `s3://bucket/prefix`),
/// to judge where the document may be written.
///
/// # Errors
/// [`GcError::Output`] when it is not a lake root.
pub fn document_root(root: &str) -> Result<LakeRootUri, GcError> {
    LakeRootUri::parse(root).map_err(|e| GcError::Output {
        path: root.to_string(),
        message: format!("the document's lake root cannot be read ({e}); it is no document lake wrote"),
    })
}

/// Parses a local destination written by an operator: a path, or a `file:` URL
/// (`file:///abs/path`, `file:/abs/path`). Any other URL is refused: these documents are local
/// files.
///
/// # Errors
/// [`GcError::Output`] for an empty value, another URL scheme, or a `file:` URL that names
/// no local path.
pub fn parse_local(flag: &str, text: &str) -> Result<PathBuf, GcError> {
    let refuse = |m: String| GcError::Output { path: format!("{flag} `{text}`"), message: m };
    if text.trim().is_empty() {
        return Err(refuse("is empty; give a file path outside the lake".into()));
    }
    let scheme = text.split_once(':').map(|(s, _)| s).filter(|s| {
        s.len() > 1
            && s.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.')
    });
    match scheme {
        None => Ok(PathBuf::from(text)),
        Some(s) if s.eq_ignore_ascii_case("file") => url::Url::parse(text)
            .ok()
            .filter(|u| u.query().is_none() && u.fragment().is_none())
            .and_then(|u| u.to_file_path().ok())
            .ok_or_else(|| refuse("is a file: URL that names no local path (write file:///abs/path)".into())),
        Some(s) => Err(refuse(format!(
            "is a {s}: URL; {flag} is a local file (a path, or file:///abs/path). Nothing was written"
        ))),
    }
}

/// A local path lake writes to, outside the lake (see the module documentation): a file that
/// receives a document of one kind ([`OutputPath::write`]), or the folder of a sharded plan
/// ([`OutputPath::prepare_folder`], [`OutputPath::file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPath {
    path: PathBuf,
    force: bool,
}

impl OutputPath {
    /// The path `path` (relative to the working folder, or absolute); an existing file is
    /// replaced only by a document of the same kind.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), force: false }
    }

    /// Parses an operator's value of `flag` (see [`parse_local`]).
    ///
    /// # Errors
    /// As [`parse_local`].
    pub fn parse(flag: &str, text: &str) -> Result<Self, GcError> {
        parse_local(flag, text).map(Self::new)
    }

    /// The same path, replacing an existing regular file of any kind (or, as a sharded plan's
    /// folder, writing into a folder holding anything) when `force`; never a folder, device,
    /// pipe or socket as a file, and never inside the lake.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Checks that a document of `kind` may be written here for the lake `root`: the file is
    /// outside the root by any route, its folder exists, and what is there is nothing, an empty
    /// file or a document of `kind` (anything regular with [`OutputPath::force`]).
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a file inside the lake (or one whose route cannot be
    /// resolved); [`GcError::Output`] naming the file and what to do otherwise.
    pub fn check(&self, root: &LakeRootUri, kind: DocumentKind) -> Result<(), GcError> {
        let shown = self.path.display().to_string();
        let refuse = |m: String| GcError::Output { path: shown.clone(), message: m };
        if self.path.as_os_str().is_empty() || self.path.to_string_lossy().ends_with('/') {
            return Err(refuse("names a folder; give a file path".into()));
        }
        check_outside(&shown, Destination::Local(&self.path), root)?;
        let folder = folder_of(&self.path);
        if !folder.is_dir() {
            return Err(refuse(format!(
                "its folder {} does not exist; create it first (lake creates no folders from a file path, so that a typo cannot)",
                folder.display()
            )));
        }
        check_replaceable(&self.path, kind, self.force).map_err(refuse)
    }

    /// Writes a document of `kind`, what `produce` streams, after [`OutputPath::check`],
    /// atomically ([`write_atomically`]).
    ///
    /// # Errors
    /// As [`OutputPath::check`]; [`StoreError::Io`](lake_store::StoreError::Io) when writing fails (the destination is
    /// then unchanged).
    pub fn write(
        &self,
        root: &LakeRootUri,
        kind: DocumentKind,
        produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), GcError> {
        self.check(root, kind)?;
        write_atomically(&self.path, produce)
    }

    /// The file `name` in this folder, with this path's `force`.
    pub fn file(&self, name: &str) -> OutputPath {
        OutputPath::new(self.path.join(name)).force(self.force)
    }

    /// Checks this path as the folder of a sharded plan for the lake `root` and creates it when
    /// it does not exist (its parent must: only the last folder is created, so that a typo
    /// cannot create a tree). The folder and every file a sharded plan writes in it must be
    /// outside the root by any route; an existing folder must be empty or hold only a manifest
    /// and shard documents (anything with [`OutputPath::force`]).
    ///
    /// # Errors
    /// [`GcError::Output`] naming the folder and what to do; [`StoreError::Io`](lake_store::StoreError::Io) when it
    /// cannot be created or read.
    pub fn prepare_folder(&self, root: &LakeRootUri) -> Result<(), GcError> {
        let shown = self.path.display().to_string();
        let refuse = |m: String| GcError::Output { path: shown.clone(), message: m };
        let io = |source| GcError::from(StoreError::Io { path: shown.clone(), source });
        // The folder itself and a file in it: a folder that is the root, or inside it.
        check_outside(&shown, Destination::Local(&self.path), root)?;
        check_outside(&shown, Destination::Local(&self.path.join(crate::shards::MANIFEST_FILE)), root)?;
        match std::fs::metadata(&self.path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(refuse(
                    "is a file; a sharded plan is written to a folder (manifest.json and one plan document per shard)"
                        .into(),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = folder_of(&self.path);
                if !parent.is_dir() {
                    return Err(refuse(format!(
                        "its parent folder {} does not exist; create it first (lake creates only the last folder, so that a typo cannot create a tree)",
                        parent.display()
                    )));
                }
                return std::fs::create_dir(&self.path).map_err(io);
            }
            Err(e) => return Err(io(e)),
        }
        if self.force {
            return Ok(());
        }
        for entry in std::fs::read_dir(&self.path).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = if name == crate::shards::MANIFEST_FILE {
                Some(DocumentKind::ShardManifest)
            } else if crate::shards::parse_shard_file_name(&name).is_some() {
                Some(DocumentKind::Plan)
            } else {
                None
            };
            let fits = kind.is_some_and(|k| check_replaceable(&entry.path(), k, false).is_ok());
            if !fits {
                return Err(refuse(format!(
                    "holds `{name}`, which is not part of a sharded plan; lake writes a sharded plan only into an empty folder or over another sharded plan. Choose another folder, or pass --force to write into it; nothing was written"
                )));
            }
        }
        Ok(())
    }
}

/// Whether an existing `path` may be replaced by a document of `kind`; a message saying why
/// not.
fn check_replaceable(path: &Path, kind: DocumentKind, force: bool) -> Result<(), String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot be inspected before it is replaced ({e}); nothing was written")),
    };
    if meta.is_dir() {
        return Err("is a folder; give a file path".into());
    }
    if !meta.is_file() {
        return Err("is not a regular file (a device, pipe or socket): lake writes its documents through a temporary file renamed over the destination, which would replace it. Give a regular file path; nothing was written".into());
    }
    if meta.len() == 0 || force {
        return Ok(());
    }
    let limit = if kind == DocumentKind::Metrics { METRICS_MAX_BYTES } else { HEAD_BYTES as u64 };
    let mut head = Vec::new();
    if let Err(e) = std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut head)) {
        return Err(format!("cannot be read to tell what it is ({e}); nothing was written"));
    }
    if kind.recognises(&head, head.len() as u64 == meta.len()) {
        return Ok(());
    }
    Err(format!(
        "already exists and is not a {} (the kind being written); refusing to replace it. Choose another path, remove it, or pass --force to replace it; nothing was written",
        kind.describe()
    ))
}

/// Writes what `produce` streams to the local file `path` atomically and durably: a temporary
/// file in the same folder, fsynced, renamed over `path`, then the folder fsynced. A crash
/// leaves the previous file or the new one, never a torn one. No check: callers check the
/// destination first ([`OutputPath::check`], [`crate::checkpoint::CheckpointLocation`]).
///
/// # Errors
/// [`StoreError::Io`](lake_store::StoreError::Io); the destination is then unchanged.
pub fn write_atomically(
    path: &Path,
    produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), GcError> {
    let io = |e: std::io::Error| GcError::from(StoreError::Io { path: path.display().to_string(), source: e });
    let dir = folder_of(path);
    // A new file gets the usual mode (0666 less the umask), a replaced one keeps its own (a
    // metrics file read by another user's exporter, say); tempfile's default would be 0600.
    use std::os::unix::fs::PermissionsExt;
    let existing = std::fs::metadata(path).ok().filter(|m| m.is_file()).map(|m| m.permissions());
    let tmp = tempfile::Builder::new()
        .prefix(".lake-")
        .suffix(".tmp")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(io)?;
    if let Some(permissions) = existing {
        tmp.as_file().set_permissions(permissions).map_err(io)?;
    }
    let mut out = std::io::BufWriter::new(tmp.as_file());
    produce(&mut out).and_then(|()| out.flush()).map_err(io)?;
    drop(out);
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The folder `path` lies in (`.` for a bare name).
pub(crate) fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where no mount table can be read, a bind mount of the root or of `_lake/` is recognised
    /// by folder identities (tried only where this machine allows mounts).
    #[test]
    fn without_a_mount_table_bind_mounts_are_recognised_by_folder_identities() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake");
        std::fs::create_dir_all(root.join("_lake")).unwrap();
        let root = root.canonicalize().unwrap();
        let folders = RootFolders { path: Some(root.clone()), routes: Routes::Identities(folder_identities(&root)) };
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

    #[test]
    fn documents_are_recognised_by_their_first_members() {
        let plan = b"{\n  \"digest\": \"ab\",\n  \"plan\": {\n    \"format_version\": 2,";
        assert!(DocumentKind::Plan.recognises(plan, false));
        assert!(DocumentKind::Plan.recognises(br#"{"digest":"x","plan":{"format_version":2}}"#, true));
        assert!(!DocumentKind::ShardManifest.recognises(plan, false));
        assert!(DocumentKind::ShardManifest.recognises(br#"{"digest":"x","manifest":{"format_version":1"#, false));
        assert!(DocumentKind::Checkpoint.recognises(br#"{"format_version": 3, "plan_digest": "x"}"#, true));
        for other in [&b"{\"format_version\": 1, \"min_age_seconds\": 4}"[..], b"", b"plan", b"{\"digest\": 3"] {
            assert!(!DocumentKind::Plan.recognises(other, true), "{}", String::from_utf8_lossy(other));
        }
        let metrics = "# HELP lake_gc_x X.\n# TYPE lake_gc_x gauge\nlake_gc_x{root=\"r\"} 1\n";
        assert!(DocumentKind::Metrics.recognises(metrics.as_bytes(), true));
        assert!(!DocumentKind::Metrics.recognises(metrics.as_bytes(), false), "a metrics file is read whole");
        assert!(!DocumentKind::Metrics.recognises(b"# HELP node_x\n", true));
        assert!(!DocumentKind::Metrics.recognises(b"", true));
    }

    #[test]
    fn local_values_are_paths_or_file_urls() {
        assert_eq!(parse_local("--out", "plan.json").unwrap(), PathBuf::from("plan.json"));
        assert_eq!(parse_local("--out", "file:///tmp/p.json").unwrap(), PathBuf::from("/tmp/p.json"));
        assert_eq!(parse_local("--out", "FILE:/tmp/p.json").unwrap(), PathBuf::from("/tmp/p.json"));
        for bad in ["", " ", "s3://b/k", "https://h/p", "file://otherhost/p", "file:///p?x=1"] {
            assert!(parse_local("--out", bad).is_err(), "{bad}");
        }
    }
}
