//! File-system access under a local lake root that never goes through a symbolic link.
//!
//! A symbolic link anywhere under the root (`objects/<ULID>` pointing at a table's data folder,
//! say) must never be listed through or deleted through, nor a mount point below `objects/` (a
//! bind mount of a table's data, or of a folder outside the root), and nothing outside the root
//! may ever be touched. Folders are opened with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV)`
//! (Linux 5.6+: the kernel refuses a link or a mount crossing in any component, atomically), or
//! on older kernels component by component with `O_NOFOLLOW` and a device check; a file is removed with `unlinkat` relative to its folder's descriptor
//! after an `lstat` shows a regular file (`unlinkat` itself never follows a link: at worst a
//! link swapped in at the last moment is removed, never its target). The root's own path is
//! resolved when the lake is opened (`LakeStore::open`), so it holds no link either.

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::path::Path;

const FOLDER: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Opens the folder `key` (relative to the root, `/`-separated) without following a symbolic
/// link in any of its components, and without crossing a mount point below its first
/// component (`objects/` or `tables/` may be a volume of its own; nothing under them may be a
/// mount, such as a bind mount of a table's data or of a folder outside the root): `ELOOP` or
/// `ENOTDIR` when a component is a link, `EXDEV` when it crosses a mount, `ENOENT` when one is
/// missing.
pub(crate) fn open_folder(root: &Path, key: &str) -> Result<OwnedFd, Errno> {
    let key = key.trim_matches('/');
    let root_fd = rustix::fs::openat(rustix::fs::CWD, root, FOLDER, Mode::empty())?;
    let (first, rest) = key.split_once('/').unwrap_or((key, ""));
    if first.is_empty() {
        return Ok(root_fd);
    }
    let base = rustix::fs::openat(&root_fd, first, FOLDER | OFlags::NOFOLLOW, Mode::empty())?;
    if rest.is_empty() {
        return Ok(base);
    }
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV | ResolveFlags::BENEATH;
    match rustix::fs::openat2(&base, rest, FOLDER, Mode::empty(), resolve) {
        Err(Errno::NOSYS) | Err(Errno::PERM) => {}
        other => return other,
    }
    // A kernel without openat2 (or a sandbox that forbids it): one component at a time, on the
    // base's device (a bind mount from the same device goes unseen here).
    let device = rustix::fs::fstat(&base)?.st_dev;
    let mut fd = base;
    for part in rest.split('/').filter(|p| !p.is_empty()) {
        fd = rustix::fs::openat(&fd, part, FOLDER | OFlags::NOFOLLOW, Mode::empty())?;
        if rustix::fs::fstat(&fd)?.st_dev != device {
            return Err(Errno::XDEV);
        }
    }
    Ok(fd)
}

/// Whether `rest` (`/`-separated, relative to the open folder `base`) resolves without a
/// symbolic link (the last component included), a mount crossing or a file where a folder is
/// expected: `Ok(true)` when it does, `Ok(false)` when it meets one of them, `Err(ENOENT)` when
/// a component is missing (resolution stops at the first link, so none lies before it), and
/// `Err(ENOSYS | EPERM)` on a kernel without `openat2`. One
/// `openat2(O_PATH, RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_BENEATH)`: without
/// `O_NOFOLLOW` a link as the last component is refused too (openat2(2)).
pub(crate) fn resolves_plainly(base: &OwnedFd, rest: &str) -> Result<bool, Errno> {
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_XDEV | ResolveFlags::BENEATH;
    match rustix::fs::openat2(base, rest, OFlags::PATH | OFlags::CLOEXEC, Mode::empty(), resolve) {
        Ok(_fd) => Ok(true),
        Err(Errno::LOOP | Errno::NOTDIR | Errno::XDEV) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What [`remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Removal {
    /// Removed.
    Removed,
    /// Not there (or a folder on its path is missing).
    Missing,
    /// Left alone: not a regular file (or, for a folder key, not an empty folder), or reached
    /// through a symbolic link. The reason.
    Refused(&'static str),
}

/// Removes the regular file `key`, or the empty folder `key` when it ends with `/`, without
/// following a symbolic link anywhere; then removes the folders it leaves empty, up to (not
/// including) `stop` (`objects`).
///
/// # Errors
/// Other file-system errors (permissions, I/O).
pub(crate) fn remove(root: &Path, key: &str, stop: &str) -> Result<Removal, Errno> {
    let folder_key = key.ends_with('/');
    let trimmed = key.trim_end_matches('/');
    let (parent, name) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    let dir = match open_folder(root, parent) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Removal::Missing),
        Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
            return Ok(Removal::Refused("a folder on its path is a symbolic link"))
        }
        Err(e) => return Err(e),
    };
    let kind = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => FileType::from_raw_mode(st.st_mode),
        Err(Errno::NOENT) => return Ok(Removal::Missing),
        Err(e) => return Err(e),
    };
    let removed = match (folder_key, kind) {
        (false, FileType::RegularFile) => rustix::fs::unlinkat(&dir, name, AtFlags::empty()),
        (true, FileType::Directory) => rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR),
        (false, FileType::Symlink) | (true, FileType::Symlink) => return Ok(Removal::Refused("a symbolic link")),
        (false, _) => return Ok(Removal::Refused("not a regular file")),
        (true, _) => return Ok(Removal::Refused("not a folder")),
    };
    match removed {
        Ok(()) => {}
        Err(Errno::NOENT) => return Ok(Removal::Missing),
        Err(Errno::NOTEMPTY) | Err(Errno::EXIST) => return Ok(Removal::Refused("the folder is not empty")),
        Err(e) => return Err(e),
    }
    drop(dir);
    remove_empty_parents(root, parent, stop);
    Ok(Removal::Removed)
}

/// Removes `folder` and then its parents while they are empty, up to (not including) `stop`.
/// Best effort: a folder that is not empty, or anything unexpected, ends it.
fn remove_empty_parents(root: &Path, folder: &str, stop: &str) {
    let below = format!("{stop}/");
    let mut folder = folder;
    while folder.starts_with(&below) {
        let Some((parent, name)) = folder.rsplit_once('/') else { return };
        let Ok(dir) = open_folder(root, parent) else { return };
        if rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR).is_err() {
            return;
        }
        folder = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_removed_through_a_symbolic_link() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("objects/A")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("data.bin"), b"precious").unwrap();
        std::fs::write(root.join("objects/A/x"), b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("objects/L")).unwrap();
        std::os::unix::fs::symlink(outside.join("data.bin"), root.join("objects/A/link")).unwrap();
        assert!(matches!(remove(&root, "objects/L/data.bin", "objects").unwrap(), Removal::Refused(_)));
        assert!(matches!(remove(&root, "objects/L/", "objects").unwrap(), Removal::Refused(_)));
        assert!(matches!(remove(&root, "objects/A/link", "objects").unwrap(), Removal::Refused(_)));
        assert!(open_folder(&root, "objects/L").is_err());
        assert_eq!(std::fs::read(outside.join("data.bin")).unwrap(), b"precious");
        // A regular file goes, and the folder it emptied with it; `objects/` stays.
        std::fs::remove_file(root.join("objects/A/link")).unwrap();
        assert_eq!(remove(&root, "objects/A/x", "objects").unwrap(), Removal::Removed);
        assert!(!root.join("objects/A").exists());
        assert!(root.join("objects").is_dir());
        assert_eq!(remove(&root, "objects/A/x", "objects").unwrap(), Removal::Missing);
        std::fs::create_dir_all(root.join("objects/B/c")).unwrap();
        assert_eq!(remove(&root, "objects/B/c/", "objects").unwrap(), Removal::Removed);
        assert!(!root.join("objects/B").exists(), "emptied parents go too");
        std::fs::create_dir_all(root.join("objects/C")).unwrap();
        std::fs::write(root.join("objects/C/y"), b"y").unwrap();
        assert_eq!(remove(&root, "objects/C/", "objects").unwrap(), Removal::Refused("the folder is not empty"));
    }
}
