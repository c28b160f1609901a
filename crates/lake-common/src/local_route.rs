//! Routes to a local lake root that do not spell its path: symbolic links and bind mounts.
//!
//! The one place this crate reads the file system. A `file:` reference that is not textually
//! under a local root can still name a file inside it: through a symbolic link
//! (`/mnt/lake -> /data/lake`), or a bind mount of the root or of its `objects/` folder. Its
//! object must then normalise to the key it has inside the root, or GC would take the object
//! for an orphan. [`resolve_local_route`] resolves the longest existing prefix of the path
//! (`std::fs::canonicalize`: every symbolic link followed), then compares the identity
//! (device, inode) of that folder and of each of its parents with the root folder's and with
//! its `objects/` folder's (a bind mount shows the same identity under another path). Only
//! references that are not textually under the root pay for this.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A local root folder: its resolved path and its identity on the file system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalFolderId {
    path: PathBuf,
    device: u64,
    inode: u64,
}

impl LocalFolderId {
    /// The identity of the folder at `path` (resolved).
    pub(crate) fn of(path: &Path) -> std::io::Result<Self> {
        let path = std::fs::canonicalize(path)?;
        let meta = std::fs::metadata(&path)?;
        Ok(Self { path, device: meta.dev(), inode: meta.ino() })
    }
}

fn identity(path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some((m.dev(), m.ino()))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The key inside `root` that the absolute path of decoded `segments` reaches, or `None` when
/// its route does not reach the root (or names the root folder itself).
///
/// # Errors
/// A file-system error other than a missing path (a permission error, a loop of symbolic
/// links), or a resolved path that is not UTF-8: the caller refuses the reference.
pub(crate) fn resolve_local_route(root: &LocalFolderId, segments: &[String]) -> std::io::Result<Option<String>> {
    // The longest existing prefix, resolved; the rest are plain names (no `.` or `..`: refused
    // before this is called).
    let mut existing: PathBuf = std::iter::once("/").chain(segments.iter().map(String::as_str)).collect();
    let mut rest: Vec<OsString> = Vec::new();
    let mut resolved = loop {
        match std::fs::canonicalize(&existing) {
            Ok(path) => break path,
            Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
                let Some(name) = existing.file_name().map(ToOwned::to_owned) else { return Ok(None) };
                rest.push(name);
                existing.pop();
            }
            Err(e) => return Err(e),
        }
    };
    let objects = identity(&root.path.join(crate::MANAGED_PREFIX))?;
    // Walk up from the resolved path: a textual match after resolution (a symbolic link), or a
    // folder with the root's or `objects/`'s identity (a bind mount).
    loop {
        let tail = || -> std::io::Result<Vec<String>> {
            rest.iter()
                .rev()
                .map(|n| {
                    n.to_str().map(str::to_string).ok_or_else(|| std::io::Error::other("a path that is not UTF-8"))
                })
                .collect()
        };
        if let Ok(below) = resolved.strip_prefix(&root.path) {
            let mut key: Vec<String> = below
                .iter()
                .map(|c| {
                    c.to_str().map(str::to_string).ok_or_else(|| std::io::Error::other("a path that is not UTF-8"))
                })
                .collect::<std::io::Result<_>>()?;
            key.extend(tail()?);
            return Ok((!key.is_empty()).then(|| key.join("/")));
        }
        let here = identity(&resolved)?;
        if here.is_some() && here == Some((root.device, root.inode)) {
            let key = tail()?;
            return Ok((!key.is_empty()).then(|| key.join("/")));
        }
        if here.is_some() && here == objects {
            let key: Vec<String> = std::iter::once(crate::MANAGED_PREFIX.to_string()).chain(tail()?).collect();
            return Ok(Some(key.join("/")));
        }
        let Some(name) = resolved.file_name().map(ToOwned::to_owned) else { return Ok(None) };
        rest.push(name);
        resolved.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments(path: &Path) -> Vec<String> {
        path.iter().skip(1).map(|c| c.to_str().unwrap().to_string()).collect()
    }

    #[test]
    fn symbolic_links_to_the_root_or_its_objects_reach_keys() {
        let dir = tempfile_dir();
        let root = dir.join("lake");
        std::fs::create_dir_all(root.join("objects/U")).unwrap();
        std::fs::write(root.join("objects/U/a.bin"), b"a").unwrap();
        std::os::unix::fs::symlink(&root, dir.join("alias")).unwrap();
        std::os::unix::fs::symlink(root.join("objects"), dir.join("objs")).unwrap();
        let id = LocalFolderId::of(&root).unwrap();
        let key = |p: PathBuf| resolve_local_route(&id, &segments(&p)).unwrap();
        assert_eq!(key(dir.join("alias/objects/U/a.bin")), Some("objects/U/a.bin".into()));
        assert_eq!(key(dir.join("objs/U/a.bin")), Some("objects/U/a.bin".into()));
        // A file that does not exist (yet) under an existing route is still the same key.
        assert_eq!(key(dir.join("alias/objects/V/b.bin")), Some("objects/V/b.bin".into()));
        assert_eq!(key(dir.join("elsewhere/x.bin")), None);
        assert_eq!(key(dir.join("alias")), None, "the root folder itself is no object");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("lake-route-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
