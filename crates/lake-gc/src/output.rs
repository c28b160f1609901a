//! Documents lake writes for an operator, and where they may go: plan documents (`lake gc --out
//! FILE`, [`crate::plan::GcPlan::save`]), sharded plans' folders (`--shards N --out DIR`,
//! [`crate::shards::ShardedPlan::save`]), metrics files (`--metrics-file`), apply checkpoints
//! and the plan saved beside them ([`crate::checkpoint`]).
//!
//! The rules, enforced here for every writer of such files (the CLI, the Python package, a Ray
//! task), so that a dry run can never change the lake:
//! - **Outside the lake root, by any route, judged where it is written**
//!   ([`lake_store::outside`]): the destination's folder is opened once, judged through the
//!   open handle (by the kernel's account of its path, its mount, an overlay's upper layer), held
//!   for the whole run, judged again before every write, and every file is created and renamed
//!   relative to it. An object destination (`s3://bucket/key`) is judged by
//!   [`lake_common::normalize_reference`].
//! - **Only over a document of the same kind.** An existing regular file is replaced only when
//!   it is empty or a document of the kind being written ([`DocumentKind`], recognised from its
//!   first bytes), unless the caller forces it (`--force`); a folder, symbolic link, device,
//!   pipe or socket never is (an atomic write would replace the node itself). A sharded plan's
//!   folder is written into only when it is empty or holds nothing but a manifest and shard
//!   documents.
//! - **Atomically.** A temporary file in the held folder, fsynced, renamed over the
//!   destination, then the folder fsynced: a crash leaves the old document or the new one, never
//!   a torn one ([`DocumentFolder::write_atomically`]).

use crate::error::GcError;
pub use lake_common::LakeRootUri;
use lake_store::outside::Entry;
pub use lake_store::outside::{check_outside, Destination, DocumentFolder};
use lake_store::StoreError;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes of an existing file read to recognise its kind.
const HEAD_BYTES: usize = 4096;
/// A metrics file larger than this is not one lake wrote (a few KiB).
const METRICS_MAX_BYTES: u64 = 1 << 20;

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
/// ([`OutputPath::prepare_folder`]).
///
/// The folder is opened and judged at the first check, and that handle is held by this value
/// (and its clones) for every later write: a link re-pointed after the check changes nothing
/// it writes ([`lake_store::outside::DocumentFolder`]).
#[derive(Debug, Clone)]
pub struct OutputPath {
    path: PathBuf,
    force: bool,
    /// The folder opened for a root (the file's folder, or for [`OutputPath::prepare_folder`]
    /// the folder itself), held from the first check on.
    held: Arc<Mutex<Option<(LakeRootUri, DocumentFolder)>>>,
}

impl PartialEq for OutputPath {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.force == other.force
    }
}

impl Eq for OutputPath {}

impl OutputPath {
    /// The path `path` (relative to the working folder, or absolute); an existing file is
    /// replaced only by a document of the same kind.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), force: false, held: Arc::default() }
    }

    /// Parses an operator's value of `flag` (see [`parse_local`]).
    ///
    /// # Errors
    /// As [`parse_local`].
    pub fn parse(flag: &str, text: &str) -> Result<Self, GcError> {
        parse_local(flag, text).map(Self::new)
    }

    /// The same path, replacing an existing regular file of any kind (or, as a sharded plan's
    /// folder, writing into a folder holding anything) when `force`; never a folder, link,
    /// device, pipe or socket as a file, and never inside the lake.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether an existing file of any kind is replaced ([`OutputPath::force`]).
    pub fn forced(&self) -> bool {
        self.force
    }

    fn refuse(&self, message: String) -> GcError {
        GcError::Output { path: self.path.display().to_string(), message }
    }

    /// The held folder for `root`, opened by `open` at the first call.
    fn held(
        &self,
        root: &LakeRootUri,
        open: impl FnOnce() -> Result<DocumentFolder, GcError>,
    ) -> Result<DocumentFolder, GcError> {
        let mut held = self.held.lock().map_err(|_| self.refuse("was being written by a task that failed".into()))?;
        if let Some((r, folder)) = held.as_ref() {
            // The same root however it was obtained (a store's root carries its folder's
            // identity, a root parsed from a document does not).
            if r.to_string() == root.to_string() {
                return Ok(folder.clone());
            }
        }
        let folder = open()?;
        *held = Some((root.clone(), folder.clone()));
        Ok(folder)
    }

    /// The file's name in its folder.
    fn name(&self) -> Result<&OsStr, GcError> {
        let text = self.path.as_os_str().as_bytes();
        match self.path.file_name() {
            Some(name) if !text.ends_with(b"/") && !text.ends_with(b"/.") => Ok(name),
            _ => Err(self.refuse("names a folder; give a file path".into())),
        }
    }

    /// Checks that a document of `kind` may be written here for the lake `root`: the file is
    /// outside the root by any route, its folder exists (it is opened and held from now on),
    /// and what is there is nothing, an empty file or a document of `kind` (any regular file
    /// with [`OutputPath::force`]).
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for a file inside the lake (or one whose route cannot be
    /// resolved); [`GcError::Output`] naming the file and what to do otherwise.
    pub fn check(&self, root: &LakeRootUri, kind: DocumentKind) -> Result<DocumentFolder, GcError> {
        let shown = self.path.display().to_string();
        let name = self.name()?;
        // Judged by its path once, as the folder is opened and held; from then on by the held
        // folder's handle (the path may lead elsewhere by now: it is not used again).
        let folder = self.held(root, || {
            check_outside(&shown, Destination::Local(&self.path), root)?;
            let at = folder_of(&self.path);
            if !at.is_dir() {
                return Err(self.refuse(format!(
                    "its folder {} does not exist; create it first (lake creates no folders from a file path, so that a typo cannot)",
                    at.display()
                )));
            }
            Ok(DocumentFolder::open(at, root)?)
        })?;
        check_replaceable(&folder, name, kind, self.force).map_err(|m| self.refuse(m))?;
        Ok(folder)
    }

    /// Writes a document of `kind`, what `produce` streams, after [`OutputPath::check`],
    /// atomically, into the folder held since the first check.
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
        let folder = self.check(root, kind)?;
        Ok(folder.write_atomically(self.name()?, produce)?)
    }

    /// Checks this path as the folder of a sharded plan for the lake `root`, creates it when it
    /// does not exist (its parent must: only the last folder is created, so that a typo cannot
    /// create a tree) and returns it, held. The folder must be outside the root by any route;
    /// an existing folder must be empty or hold only a manifest and shard documents (anything
    /// with [`OutputPath::force`]).
    ///
    /// # Errors
    /// [`GcError::Output`] naming the folder and what to do; [`StoreError::Root`](lake_store::StoreError::Root) for a
    /// folder inside the lake; [`StoreError::Io`](lake_store::StoreError::Io) when it cannot be created or read.
    pub fn prepare_folder(&self, root: &LakeRootUri) -> Result<DocumentFolder, GcError> {
        let shown = self.path.display().to_string();
        let folder = self.held(root, || {
            // The folder itself and a file in it (a folder that is the root, or inside it),
            // judged by path once, as it is opened and held.
            check_outside(&shown, Destination::Local(&self.path), root)?;
            check_outside(&shown, Destination::Local(&self.path.join(crate::shards::MANIFEST_FILE)), root)?;
            self.open_folder(root)
        })?;
        if self.force {
            return Ok(folder);
        }
        for name in folder.names()? {
            let text = name.to_string_lossy();
            let kind = if text == crate::shards::MANIFEST_FILE {
                Some(DocumentKind::ShardManifest)
            } else if crate::shards::parse_shard_file_name(&text).is_some() {
                Some(DocumentKind::Plan)
            } else {
                None
            };
            let fits = kind.is_some_and(|k| check_replaceable(&folder, &name, k, false).is_ok());
            if !fits {
                return Err(self.refuse(format!(
                    "holds `{text}`, which is not part of a sharded plan; lake writes a sharded plan only into an empty folder or over another sharded plan. Choose another folder, or force the write into it; nothing was written"
                )));
            }
        }
        Ok(folder)
    }
}

impl OutputPath {
    /// Opens this path as a sharded plan's folder, creating it when missing (its parent must
    /// exist).
    fn open_folder(&self, root: &LakeRootUri) -> Result<DocumentFolder, GcError> {
        match std::fs::metadata(&self.path) {
            Ok(m) if m.is_dir() => Ok(DocumentFolder::open(&self.path, root)?),
            Ok(_) => Err(self.refuse(
                "is a file; a sharded plan is written to a folder (manifest.json and one plan document per shard)"
                    .into(),
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let name = self.name()?.to_str().ok_or_else(|| self.refuse("is not a UTF-8 name".into()))?;
                let parent = folder_of(&self.path);
                if !parent.is_dir() {
                    return Err(self.refuse(format!(
                        "its parent folder {} does not exist; create it first (lake creates only the last folder, so that a typo cannot create a tree)",
                        parent.display()
                    )));
                }
                Ok(DocumentFolder::open(parent, root)?.subfolder(name, true)?)
            }
            Err(e) => Err(GcError::from(StoreError::Io { path: self.path.display().to_string(), source: e })),
        }
    }
}

/// Writes a document of `kind` named `name` into the held `folder`, over nothing, an empty file
/// or a document of `kind` (any regular file when `force`), atomically.
///
/// # Errors
/// [`GcError::Output`] for something else there; as [`DocumentFolder::write_atomically`].
pub(crate) fn write_in(
    folder: &DocumentFolder,
    name: &str,
    kind: DocumentKind,
    force: bool,
    produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), GcError> {
    let name = OsStr::new(name);
    check_replaceable(folder, name, kind, force)
        .map_err(|message| GcError::Output { path: folder.shown(name).display().to_string(), message })?;
    Ok(folder.write_atomically(name, produce)?)
}

/// Whether an existing `name` in `folder` may be replaced by a document of `kind`; a message
/// saying why not. Read without following a link: a link is never replaced.
pub(crate) fn check_replaceable(
    folder: &DocumentFolder,
    name: &OsStr,
    kind: DocumentKind,
    force: bool,
) -> Result<(), String> {
    let len = match folder.entry(name) {
        Ok(Entry::Missing) => return Ok(()),
        Ok(Entry::File { len }) => len,
        Ok(Entry::Folder) => return Err("is a folder; give a file path".into()),
        Ok(Entry::Link) => return Err("is a symbolic link; lake replaces the file at a path, never a link (the write would not go where the link points). Give the path the link points to, or remove the link; nothing was written".into()),
        Ok(Entry::Other) => return Err("is not a regular file (a device, pipe or socket): lake writes its documents through a temporary file renamed over the destination, which would replace it. Give a regular file path; nothing was written".into()),
        Err(e) => return Err(format!("cannot be inspected before it is replaced ({e}); nothing was written")),
    };
    if len == 0 || force {
        return Ok(());
    }
    let limit = if kind == DocumentKind::Metrics { METRICS_MAX_BYTES } else { HEAD_BYTES as u64 };
    let mut head = Vec::new();
    let read = folder.open_file(name).map_err(|e| e.to_string()).and_then(|f| match f {
        Some(f) => f.take(limit).read_to_end(&mut head).map(|_| ()).map_err(|e| e.to_string()),
        None => Ok(()),
    });
    if let Err(e) = read {
        return Err(format!("cannot be read to tell what it is ({e}); nothing was written"));
    }
    if kind.recognises(&head, head.len() as u64 == len) {
        return Ok(());
    }
    Err(format!(
        "already exists and is not a {} (the kind being written); refusing to replace it. Choose another path, remove it, or force its replacement; nothing was written",
        kind.describe()
    ))
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
