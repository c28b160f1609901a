//! The apply checkpoint: a versioned local document bound to one plan by its digest.
//!
//! The checkpoint embeds the plan it applies, so resuming needs nothing else, and it is
//! rewritten atomically (temporary file, fsync, rename, fsync of the folder) after every page:
//! a crash leaves either the previous or the next checkpoint, never a torn one.

use crate::error::ObjectsError;
use crate::plan::GcPlan;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

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

    /// Loads the checkpoint at `path`; `None` when there is no file.
    ///
    /// # Errors
    /// [`ObjectsError::Checkpoint`] when the file is unreadable, of another format version, or
    /// its plan does not match its digest (edited).
    pub fn load(path: &Path) -> Result<Option<Self>, ObjectsError> {
        let shown = path.display().to_string();
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(ObjectsError::Io {
                    path: shown,
                    source: e,
                })
            }
        };
        let err = |m: String| ObjectsError::Checkpoint {
            path: shown.clone(),
            message: m,
        };
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| err(format!("not valid JSON: {e}")))?
            .get("format_version")
            .and_then(|v| v.as_u64());
        if version != Some(CHECKPOINT_FORMAT_VERSION) {
            return Err(err(format!(
                "format version {version:?} is not supported (expected {CHECKPOINT_FORMAT_VERSION}); finish it with the lake version that wrote it, or start a new apply with another checkpoint path"
            )));
        }
        let cp: Self = serde_json::from_slice(&bytes)
            .map_err(|e| err(format!("not a valid checkpoint: {e}")))?;
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
    /// [`ObjectsError::Io`].
    pub fn save(&self, path: &Path) -> Result<(), ObjectsError> {
        let io = |e: std::io::Error| ObjectsError::Io {
            path: path.display().to_string(),
            source: e,
        };
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(io)?;
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| io(std::io::Error::other(e)))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(io)?;
        tmp.write_all(&bytes).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(path).map_err(|e| io(e.error))?;
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}
