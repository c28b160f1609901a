//! The apply checkpoint: a versioned document bound to one plan by its digest.
//!
//! The checkpoint embeds the plan it applies, so resuming needs nothing else. It lives in a
//! local file (rewritten atomically: temporary file, fsync, rename, fsync of the folder) or in an
//! object store (`s3://bucket/key`: a PUT replaces an object atomically). Either way a crash
//! leaves the previous or the next checkpoint, never a torn one.

use crate::error::ObjectsError;
use crate::plan::GcPlan;
use crate::store::LakeStore;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

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
    /// Parses `--checkpoint`: `s3://bucket/key` or a local path.
    ///
    /// # Errors
    /// [`ObjectsError::Root`] for an `s3://` location without a key.
    pub fn parse(text: &str) -> Result<Self, ObjectsError> {
        if text.starts_with("s3://") || text.starts_with("s3a://") {
            let (folder, name) = text
                .rsplit_once('/')
                .filter(|(f, n)| !n.is_empty() && f.len() > "s3://".len())
                .ok_or_else(|| ObjectsError::Root {
                    root: text.into(),
                    message: "an S3 checkpoint is s3://bucket/[prefix/]name".into(),
                })?;
            let store = LakeStore::open(folder)?;
            return Ok(Self::Store { store: Box::new(store), key: name.to_string(), shown: text.to_string() });
        }
        Ok(Self::Local(PathBuf::from(text)))
    }

    /// The location as shown to the operator.
    pub fn display(&self) -> String {
        match self {
            Self::Local(p) => p.display().to_string(),
            Self::Store { shown, .. } => shown.clone(),
        }
    }

    async fn read(&self) -> Result<Option<Vec<u8>>, ObjectsError> {
        match self {
            Self::Local(path) => match std::fs::read(path) {
                Ok(b) => Ok(Some(b)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(ObjectsError::Io { path: path.display().to_string(), source: e }),
            },
            Self::Store { store, key, .. } => Ok(store.get(key).await?.map(|b| b.to_vec())),
        }
    }

    async fn write(&self, bytes: Vec<u8>) -> Result<(), ObjectsError> {
        match self {
            Self::Local(path) => write_local(path, &bytes),
            Self::Store { store, key, .. } => store.put(key, bytes).await,
        }
    }
}

impl From<&Path> for CheckpointLocation {
    fn from(p: &Path) -> Self {
        Self::Local(p.to_path_buf())
    }
}

fn write_local(path: &Path, bytes: &[u8]) -> Result<(), ObjectsError> {
    let io = |e: std::io::Error| ObjectsError::Io { path: path.display().to_string(), source: e };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The checkpoint format this build writes and reads.
pub const CHECKPOINT_FORMAT_VERSION: u64 = 1;

/// Progress of applying one plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyCheckpoint {
    /// Always [`CHECKPOINT_FORMAT_VERSION`].
    pub format_version: u64,
    /// Digest of `plan`; checked on every load.
    pub plan_digest: String,
    /// The plan being applied.
    pub plan: GcPlan,
    /// Candidates before this index have been attempted.
    pub next_index: u64,
    /// Objects deleted so far.
    pub deleted: u64,
    /// Objects that were already gone.
    pub already_gone: u64,
    /// Keys whose delete failed; retried first on the next run.
    pub failed: Vec<String>,
    /// Candidates dropped because a version newer than the plan's basis references them.
    pub revived: Vec<String>,
    /// True when every candidate was deleted, found gone or revived.
    pub complete: bool,
}

impl ApplyCheckpoint {
    /// A fresh checkpoint for `plan`.
    pub fn new(plan: GcPlan) -> Self {
        Self {
            format_version: CHECKPOINT_FORMAT_VERSION,
            plan_digest: plan.digest(),
            plan,
            next_index: 0,
            deleted: 0,
            already_gone: 0,
            failed: Vec::new(),
            revived: Vec::new(),
            complete: false,
        }
    }

    /// Loads the checkpoint at `location`; `None` when there is none.
    ///
    /// # Errors
    /// [`ObjectsError::Checkpoint`] when it is unreadable, of another format version, or its plan
    /// does not match its digest (edited).
    pub async fn load(location: &CheckpointLocation) -> Result<Option<Self>, ObjectsError> {
        let shown = location.display();
        let Some(bytes) = location.read().await? else {
            return Ok(None);
        };
        let err = |m: String| ObjectsError::Checkpoint { path: shown.clone(), message: m };
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| err(format!("not valid JSON: {e}")))?
            .get("format_version")
            .and_then(|v| v.as_u64());
        if version != Some(CHECKPOINT_FORMAT_VERSION) {
            return Err(err(format!(
                "format version {version:?} is not supported (expected {CHECKPOINT_FORMAT_VERSION}); finish it with the lake version that wrote it, or start a new apply with another checkpoint path"
            )));
        }
        let cp: Self = serde_json::from_slice(&bytes).map_err(|e| err(format!("not a valid checkpoint: {e}")))?;
        let actual = cp.plan.digest();
        if actual != cp.plan_digest {
            return Err(err(format!(
                "its plan hashes to {actual} but it is bound to {}; the checkpoint was edited. Nothing was deleted",
                cp.plan_digest
            )));
        }
        cp.plan.check_format().map_err(err)?;
        Ok(Some(cp))
    }

    /// Writes the checkpoint atomically and durably.
    ///
    /// # Errors
    /// [`ObjectsError::Io`] or [`ObjectsError::Storage`].
    pub async fn save(&self, location: &CheckpointLocation) -> Result<(), ObjectsError> {
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ObjectsError::storage(location.display(), e))?;
        location.write(bytes).await
    }
}
