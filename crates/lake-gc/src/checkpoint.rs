//! The apply checkpoint: a small versioned document bound to one plan by its digest, with that
//! plan persisted once beside it.
//!
//! Format 3 (the one this build writes and reads, [`CHECKPOINT_FORMAT_VERSION`]): `PATH` holds
//! the progress (counters, and the keys that failed or were revived) and `PATH.plan.json` the
//! plan document (`{"digest", "plan"}`, as `lake gc --out` writes it). The plan is written once,
//! before the first checkpoint; the checkpoint is rewritten after every group of pages, so a save
//! costs O(failed + revived keys), not O(candidates). Checkpoints of formats 1 and 2 (earlier
//! builds) are refused: their plans do not record the lineage apply must check.
//!
//! Both documents live in local files (rewritten atomically: temporary file, fsync, rename, fsync
//! of the folder) or in an object store (`s3://bucket/key`: a PUT, or a completed multipart
//! upload, replaces an object atomically). Either way a crash leaves the previous or the next
//! document, never a torn one. Loading a plan document streams it: a long candidate list spills to
//! a local temporary file ([`crate::candidates::LOADED_LIST_BUDGET_BYTES`]).

use crate::error::GcError;
use crate::plan::GcPlan;
use lake_store::keys::ObjectKey;
use lake_store::outside::{DocumentFolder, FolderLock};
use lake_store::store::LakeStore;
use lake_store::StoreError;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where a checkpoint is kept.
#[derive(Debug, Clone)]
pub enum CheckpointLocation {
    /// A local file.
    Local(PathBuf),
    /// An object in a store (`s3://bucket/prefix/name`).
    Store {
        /// The store of the object's folder.
        store: Box<LakeStore>,
        /// The object's key in that store.
        key: String,
        /// The location as the operator wrote it.
        shown: String,
    },
}

impl CheckpointLocation {
    /// Parses `--checkpoint`: `s3://bucket/key` (`s3a://`, `s3n://` alike), a local file path,
    /// or a `file:` URL of one. A local path must name a file in a folder that exists: a typo
    /// must not create folders (nothing is created until apply writes the checkpoint).
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) for an empty location, an `s3://` location without a key, a local
    /// path that ends with `/` or is a folder, or whose folder does not exist;
    /// [`GcError::Output`] for a URL of another scheme.
    pub fn parse(text: &str) -> Result<Self, GcError> {
        Self::parse_with(text, |url| Ok(LakeStore::open(url)?))
    }

    /// As [`CheckpointLocation::parse`], for an apply of `lake`: an `s3://` checkpoint is opened
    /// with the lake's S3 settings ([`LakeStore::open_related`]: the endpoint, region and
    /// credentials the lake was opened with, storage options included), not the environment.
    ///
    /// # Errors
    /// As [`CheckpointLocation::parse`].
    pub fn parse_for(text: &str, lake: &LakeStore) -> Result<Self, GcError> {
        Self::parse_with(text, |folder| Ok(lake.open_related(folder)?))
    }

    fn parse_with(text: &str, open: impl FnOnce(&str) -> Result<LakeStore, GcError>) -> Result<Self, GcError> {
        let refuse =
            |m: &str| GcError::from(StoreError::Root { root: format!("checkpoint `{text}`"), message: m.to_string() });
        if text.trim().is_empty() {
            return Err(refuse("is empty: give the checkpoint a file path (say gc.ckpt) or s3://bucket/key"));
        }
        if text.ends_with(LOCK_SUFFIX) || text.ends_with(PLAN_SUFFIX) {
            return Err(refuse(&format!(
                "ends with `{LOCK_SUFFIX}` or `{PLAN_SUFFIX}`, the names of the files apply keeps beside a checkpoint (its lock, its plan); give the checkpoint another name (say gc.ckpt)"
            )));
        }
        let scheme = text.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if matches!(scheme.as_deref(), Some("s3" | "s3a" | "s3n")) {
            let (folder, name) =
                text.rsplit_once('/').filter(|(f, n)| !n.is_empty() && f.len() > "s3://".len()).ok_or_else(|| {
                    GcError::from(StoreError::Root {
                        root: text.into(),
                        message: "an S3 checkpoint is s3://bucket/[prefix/]name".into(),
                    })
                })?;
            let store = open(folder)?;
            return Ok(Self::Store { store: Box::new(store), key: name.to_string(), shown: text.to_string() });
        }
        let path = crate::output::parse_local("checkpoint", text)?;
        if text.ends_with('/') || path.is_dir() {
            return Err(refuse("names a folder; the checkpoint is a file: give a file name inside it (say gc.ckpt)"));
        }
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !folder.is_dir() {
            return Err(refuse(&format!(
                "its folder {} does not exist; create it first (lake does not create folders from a checkpoint path, so that a typo cannot)",
                folder.display()
            )));
        }
        Ok(Self::Local(path))
    }

    /// Checks that this checkpoint and the plan document saved beside it lie outside the lake
    /// `store`'s root, by any spelling or route ([`lake_store::outside`]: `..`, symbolic links,
    /// bind mounts, overlays, `file:` URLs, S3 spellings of the root's bucket and prefix), and
    /// holds the checkpoint's folder open for the apply: every later read, write and removal
    /// happens relative to that handle, judged again at every write, so that a link re-pointed
    /// during the apply cannot send a checkpoint into the lake.
    ///
    /// # Errors
    /// [`StoreError::Root`](lake_store::StoreError::Root) naming the location;
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a local checkpoint's folder cannot be
    /// opened.
    pub fn hold(&self, store: &LakeStore) -> Result<HeldCheckpoint, GcError> {
        use lake_store::outside::{check_outside, Destination};
        for at in [self.clone(), self.plan_location()] {
            let shown = format!("checkpoint `{}`", at.display());
            match &at {
                Self::Local(path) => check_outside(&shown, Destination::Local(path), store.root())?,
                // A store location on a local store (built by hand): where its file lands.
                Self::Store { store: on, key, .. } => match on.local_dir() {
                    Some(dir) => check_outside(&shown, Destination::Local(&dir.join(key)), store.root())?,
                    None => check_outside(&shown, Destination::Url(&on.root().join(key)), store.root())?,
                },
            }
        }
        self.held(|folder| Ok(DocumentFolder::open(folder, store.root())?))
    }

    /// This location held to read only (no lake to judge it against): a local checkpoint's
    /// folder opened once.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) when a local checkpoint's folder cannot be opened.
    pub fn to_read(&self) -> Result<HeldCheckpoint, GcError> {
        self.held(|folder| Ok(DocumentFolder::open_to_read(folder)?))
    }

    fn held(&self, open: impl FnOnce(&Path) -> Result<DocumentFolder, GcError>) -> Result<HeldCheckpoint, GcError> {
        let shown = self.display();
        let (progress, plan) = match self {
            Self::Local(path) => {
                let name = path.file_name().ok_or_else(|| GcError::Checkpoint {
                    path: shown.clone(),
                    message: "names a folder; the checkpoint is a file: give a file name inside it (say gc.ckpt)"
                        .into(),
                })?;
                let folder = open(crate::output::folder_of(path))?;
                let mut plan_name = name.to_owned();
                plan_name.push(PLAN_SUFFIX);
                (Held::Local { folder: folder.clone(), name: name.to_owned() }, Held::Local { folder, name: plan_name })
            }
            Self::Store { store, key, shown } => (
                Held::Store { store: store.clone(), key: key.clone(), shown: shown.clone() },
                Held::Store {
                    store: store.clone(),
                    key: format!("{key}{PLAN_SUFFIX}"),
                    shown: format!("{shown}{PLAN_SUFFIX}"),
                },
            ),
        };
        Ok(HeldCheckpoint { progress, plan, shown, owned: None })
    }

    /// Where the plan of the checkpoint at this location is persisted: the same name plus
    /// [`PLAN_SUFFIX`], in the same folder or store.
    pub fn plan_location(&self) -> Self {
        match self {
            Self::Local(path) => {
                let mut name = path.as_os_str().to_os_string();
                name.push(PLAN_SUFFIX);
                Self::Local(PathBuf::from(name))
            }
            Self::Store { store, key, shown } => Self::Store {
                store: store.clone(),
                key: format!("{key}{PLAN_SUFFIX}"),
                shown: format!("{shown}{PLAN_SUFFIX}"),
            },
        }
    }

    /// The location as shown to the operator.
    pub fn display(&self) -> String {
        match self {
            Self::Local(p) => p.display().to_string(),
            Self::Store { shown, .. } => shown.clone(),
        }
    }
}

/// A checkpoint location held for one apply ([`CheckpointLocation::hold`]): a local
/// checkpoint's folder open, every file in it reached relative to that handle.
#[derive(Debug, Clone)]
pub struct HeldCheckpoint {
    progress: Held,
    plan: Held,
    shown: String,
    /// The lock that makes this apply the checkpoint's only writer ([`HeldCheckpoint::own`]).
    owned: Option<Arc<FolderLock>>,
}

/// One document of a held checkpoint.
#[derive(Debug, Clone)]
enum Held {
    Local { folder: DocumentFolder, name: OsString },
    Store { store: Box<LakeStore>, key: String, shown: String },
}

/// Appended to a local checkpoint's name to name the file whose lock an apply holds
/// ([`HeldCheckpoint::own`]).
pub const LOCK_SUFFIX: &str = ".lock";

impl HeldCheckpoint {
    /// Makes this apply the only one writing the checkpoint until it ends: a local checkpoint's
    /// `PATH.lock` file is locked (`flock(2)`, exclusive; the kernel releases it when the
    /// process ends, so a crashed apply leaves nothing to clean up). Two applies sharing one
    /// checkpoint would each count the other's deletes and overwrite each other's progress.
    /// An S3 checkpoint takes no lock (S3 has no lock a crashed process releases): run one
    /// apply per S3 checkpoint at a time.
    ///
    /// # Errors
    /// [`GcError::Checkpoint`] when another apply (in this process or another) holds the
    /// checkpoint; [`StoreError::Io`](lake_store::StoreError::Io) when the lock file cannot be
    /// opened or locked.
    pub fn own(mut self) -> Result<Self, GcError> {
        if let Held::Local { folder, name } = &self.progress {
            let mut lock_name = name.clone();
            lock_name.push(LOCK_SUFFIX);
            match folder.lock(&lock_name)? {
                Some(lock) => self.owned = Some(Arc::new(lock)),
                None => {
                    return Err(GcError::Checkpoint {
                        path: self.shown.clone(),
                        message: format!(
                            "another apply is running with this checkpoint now (it holds the lock of {}); two applies of one checkpoint would miscount and overwrite each other's progress. Wait for it to end (or stop it), then run again; nothing was deleted",
                            folder.shown(&lock_name).display()
                        ),
                    })
                }
            }
        }
        Ok(self)
    }

    /// The checkpoint's location as shown to the operator.
    pub fn display(&self) -> String {
        self.shown.clone()
    }

    /// The plan document's location as shown to the operator.
    pub fn plan_display(&self) -> String {
        self.plan.display()
    }

    /// Removes the checkpoint (not its plan document); nothing there is no error. Apply removes
    /// a finished checkpoint this way before a new plan replaces it.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) or [`StoreError::Storage`](lake_store::StoreError::Storage).
    pub(crate) async fn remove(&self) -> Result<(), GcError> {
        match &self.progress {
            Held::Local { folder, name } => Ok(folder.remove(name)?),
            Held::Store { store, key, .. } => Ok(store.delete(key).await?),
        }
    }
}

impl Held {
    fn display(&self) -> String {
        match self {
            Self::Local { folder, name } => folder.shown(name).display().to_string(),
            Self::Store { shown, .. } => shown.clone(),
        }
    }

    /// The whole document; `None` when there is none.
    async fn read(&self) -> Result<Option<Vec<u8>>, GcError> {
        match self {
            Self::Local { folder, name } => {
                let Some(mut file) = folder.open_file(name)? else { return Ok(None) };
                let mut bytes = Vec::new();
                file.read_to_end(&mut bytes)
                    .map_err(|source| GcError::from(StoreError::Io { path: self.display(), source }))?;
                Ok(Some(bytes))
            }
            // One GET into memory: a checkpoint is a few KiB (the plan is beside it).
            Self::Store { store, key, .. } => Ok(store.get(key).await?.map(|b| b.to_vec())),
        }
    }

    async fn write(&self, bytes: Vec<u8>) -> Result<(), GcError> {
        match self {
            Self::Local { folder, name } => Ok(folder.write_atomically(name, |out| out.write_all(&bytes))?),
            Self::Store { store, key, .. } => Ok(store.put(key, bytes).await?),
        }
    }

    /// Writes what `produce` streams, atomically: a temporary file in the held folder renamed
    /// into place, or a temporary file uploaded whole.
    async fn write_streamed(&self, produce: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<(), GcError> {
        match self {
            Self::Local { folder, name } => Ok(folder.write_atomically(name, produce)?),
            Self::Store { store, key, shown } => {
                let tmp_dir = std::env::temp_dir().display().to_string();
                let io = |source| GcError::from(StoreError::Io { path: tmp_dir.clone(), source });
                let file = tempfile::Builder::new().prefix("lake-upload-").tempfile().map_err(io)?;
                let mut out = std::io::BufWriter::new(file.reopen().map_err(io)?);
                produce(&mut out)
                    .and_then(|()| out.flush())
                    .map_err(|source| GcError::from(StoreError::Io { path: shown.clone(), source }))?;
                Ok(store.put_file(key, file.path()).await?)
            }
        }
    }

    /// Opens the document for reading (an object is downloaded to a local temporary file
    /// first); `None` when there is none.
    async fn open(&self) -> Result<Option<Box<dyn std::io::Read + Send>>, GcError> {
        let file = match self {
            Self::Local { folder, name } => match folder.open_file(name)? {
                Some(f) => f,
                None => return Ok(None),
            },
            Self::Store { store, key, shown } => match store.get_to_file(key).await? {
                // The file stays readable after its name is removed.
                Some(tmp) => {
                    tmp.reopen().map_err(|source| GcError::from(StoreError::Io { path: shown.clone(), source }))?
                }
                None => return Ok(None),
            },
        };
        Ok(Some(Box::new(std::io::BufReader::new(file))))
    }
}

impl From<&Path> for CheckpointLocation {
    fn from(p: &Path) -> Self {
        Self::Local(p.to_path_buf())
    }
}

/// The checkpoint format this build writes and reads. Formats 1 and 2 (earlier builds) apply
/// plans of format 1, which this build refuses (see [`crate::plan::PLAN_FORMAT_VERSION`]).
pub const CHECKPOINT_FORMAT_VERSION: u64 = 3;

/// Appended to a checkpoint's name (or key) to name its plan document.
pub const PLAN_SUFFIX: &str = ".plan.json";

/// Progress of applying one plan (format [`CHECKPOINT_FORMAT_VERSION`]). The plan itself is in the plan document beside
/// the checkpoint ([`CheckpointLocation::plan_location`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyCheckpoint {
    /// Always [`CHECKPOINT_FORMAT_VERSION`].
    pub format_version: u64,
    /// Digest of the plan being applied; the plan document beside must hash to it.
    pub plan_digest: String,
    /// Candidates in that plan.
    pub candidates: u64,
    /// Candidates before this index have been attempted.
    pub next_index: u64,
    /// Objects this apply removed: a local removal; on S3 a key DeleteObjects removed (exactly,
    /// where the store honours conditional deletes; else a key confirmed deleted on its first
    /// request: the plan listed it, so it existed when planned). `docs/gc.md`, "What apply
    /// reports".
    pub deleted: u64,
    /// Objects known to have been gone before their delete (a local file not found; on S3 a key
    /// a conditional delete found missing).
    pub already_gone: u64,
    /// S3 stores that ignore conditional deletes only: keys confirmed gone on a request that may
    /// repeat an earlier one of this apply (a retry of a failed key, the first group after a
    /// resume), so that whether this request or the earlier one removed them is unknown (such a
    /// store reports a missing key as deleted).
    pub absent: u64,
    /// Keys left alone and not retried (no longer a regular file, a folder no longer empty),
    /// each with the reason.
    pub skipped: Vec<SkippedKey>,
    /// Keys whose delete failed; retried first on the next run.
    pub failed: Vec<String>,
    /// Candidates dropped because a version newer than the plan's basis references them.
    pub revived: Vec<String>,
    /// True when every candidate was deleted, found gone, skipped or revived.
    pub complete: bool,
}

/// A key apply left alone and does not retry, and why. Its wire form in a checkpoint is one
/// string, `key: reason` (as earlier builds wrote it: a collectable key has no `: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedKey {
    /// The key, relative to the lake root.
    pub key: ObjectKey,
    /// Why it was left alone (the deleter's sentence).
    pub reason: String,
}

impl std::fmt::Display for SkippedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

impl Serialize for SkippedKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SkippedKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.split_once(": ") {
            Some((key, reason)) => Ok(Self { key: key.into(), reason: reason.to_string() }),
            None => Err(serde::de::Error::custom(format!("skipped entry `{text}` is not `key: reason`"))),
        }
    }
}

/// A checkpoint read back, with the plan it applies.
#[derive(Debug, Clone)]
pub struct LoadedCheckpoint {
    /// The progress.
    pub checkpoint: ApplyCheckpoint,
    /// The plan, checked against the checkpoint's digest.
    pub plan: GcPlan,
    /// Whether the plan is of another lake than the one being collected (set by the collector;
    /// `false` as loaded).
    pub other_lake: bool,
}

impl ApplyCheckpoint {
    /// A fresh checkpoint for `plan`.
    ///
    /// # Errors
    /// As [`GcPlan::digest`].
    pub fn new(plan: &GcPlan) -> Result<Self, GcError> {
        Ok(Self {
            format_version: CHECKPOINT_FORMAT_VERSION,
            plan_digest: plan.digest()?,
            candidates: plan.candidates.len() as u64,
            next_index: 0,
            deleted: 0,
            already_gone: 0,
            absent: 0,
            skipped: Vec::new(),
            failed: Vec::new(),
            revived: Vec::new(),
            complete: false,
        })
    }

    /// Loads the checkpoint at `location` and its plan; `None` when there is no checkpoint.
    ///
    /// # Errors
    /// [`GcError::Checkpoint`] when the checkpoint is unreadable or of another format
    /// version, when its plan document is missing or malformed, or when the plan does not hash
    /// to the checkpoint's digest (either was edited); storage and local file errors.
    pub async fn load(location: &CheckpointLocation) -> Result<Option<LoadedCheckpoint>, GcError> {
        Self::load_held(&location.to_read()?).await
    }

    /// [`ApplyCheckpoint::load`] from a held location ([`CheckpointLocation::hold`]).
    ///
    /// # Errors
    /// As [`ApplyCheckpoint::load`].
    pub async fn load_held(location: &HeldCheckpoint) -> Result<Option<LoadedCheckpoint>, GcError> {
        let shown = location.display();
        let Some(bytes) = location.progress.read().await? else {
            return Ok(None);
        };
        let err = |m: String| GcError::Checkpoint { path: shown.clone(), message: m };
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| err(format!("not valid JSON: {e}")))?
            .get("format_version")
            .and_then(|v| v.as_u64());
        // Each arm gives the checkpoint, its plan and the plan's digest (hashed once).
        let (loaded, actual) = match version {
            Some(old @ (1 | 2)) => {
                return Err(err(format!(
                    "format version {old} was written by an earlier lake build for a plan that does not record the lineage apply must check; nothing more is deleted from it. Make a new plan and apply it with another checkpoint path"
                )))
            }
            Some(CHECKPOINT_FORMAT_VERSION) => {
                let checkpoint: Self =
                    serde_json::from_slice(&bytes).map_err(|e| err(format!("not a valid checkpoint: {e}")))?;
                let plan_at = &location.plan;
                let reader = plan_at.open().await?.ok_or_else(|| {
                    err(format!(
                        "its plan document {} is missing; it is written before the checkpoint and must stay beside it. Nothing was deleted from it; plan again with a new checkpoint path",
                        plan_at.display()
                    ))
                })?;
                // The document's own digest is checked against its plan as it is read.
                let (plan, digest) = GcPlan::read_document_and_digest(reader, &plan_at.display())
                    .map_err(|e| err(format!("its plan document is not valid: {e}")))?;
                (LoadedCheckpoint { checkpoint, plan, other_lake: false }, digest)
            }
            _ => {
                return Err(err(format!(
                    "format version {version:?} is not supported (this build reads {CHECKPOINT_FORMAT_VERSION}); finish it with the lake version that wrote it, or start a new apply with another checkpoint path"
                )))
            }
        };
        if actual != loaded.checkpoint.plan_digest {
            return Err(err(format!(
                "its plan hashes to {actual} but it is bound to {}; the checkpoint or its plan document was edited. Nothing was deleted",
                loaded.checkpoint.plan_digest
            )));
        }
        if loaded.checkpoint.candidates != loaded.plan.candidates.len() as u64 {
            return Err(err(format!(
                "it records {} candidates but its plan has {}; it was edited. Nothing was deleted",
                loaded.checkpoint.candidates,
                loaded.plan.candidates.len()
            )));
        }
        loaded.plan.check_format().map_err(err)?;
        Ok(Some(loaded))
    }

    /// Writes the checkpoint atomically and durably.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) or [`StoreError::Storage`](lake_store::StoreError::Storage).
    pub async fn save(&self, location: &HeldCheckpoint) -> Result<(), GcError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| GcError::storage(location.display(), e))?;
        location.progress.write(bytes).await
    }

    /// Writes `plan`'s document beside the checkpoint at `location`
    /// ([`CheckpointLocation::plan_location`]), atomically and durably, streaming a spilled
    /// candidate list. Apply calls it once, before the checkpoint is first saved.
    ///
    /// # Errors
    /// [`StoreError::Io`](lake_store::StoreError::Io) or [`StoreError::Storage`](lake_store::StoreError::Storage).
    pub async fn persist_plan(plan: &GcPlan, location: &HeldCheckpoint) -> Result<(), GcError> {
        let at = &location.plan;
        // Something already there is replaced only if it is a plan document (one left by a crash
        // before its checkpoint was written): never another file that happens to have the name.
        if let Some(existing) = at.open().await? {
            if GcPlan::read_document(existing, &at.display()).is_err() {
                return Err(GcError::Checkpoint {
                    path: location.display(),
                    message: format!(
                        "{} already exists and is not a plan document; refusing to overwrite it. Choose another checkpoint path",
                        at.display()
                    ),
                });
            }
        }
        at.write_streamed(|out| plan.write_document(out)).await
    }
}

#[cfg(test)]
mod tests {
    use super::SkippedKey;

    /// A skipped key's wire form is the one string earlier builds wrote, read back whole; a
    /// string without `: ` is refused.
    #[test]
    fn skipped_keys_keep_their_wire_form() {
        let skipped = SkippedKey {
            key: "objects/01J00000000000000000000000/a.bin".into(),
            reason: "not a regular file: a symbolic link".into(),
        };
        let text = serde_json::to_string(&skipped).unwrap();
        assert_eq!(text, "\"objects/01J00000000000000000000000/a.bin: not a regular file: a symbolic link\"");
        assert_eq!(serde_json::from_str::<SkippedKey>(&text).unwrap(), skipped);
        assert!(serde_json::from_str::<SkippedKey>("\"objects/01J00000000000000000000000/a.bin\"").is_err());
    }
}
