//! Where a local path lies on its file system, read from the kernel's mount table
//! (`/proc/self/mountinfo`, Linux `proc(5)`): the mounted file system's device and the path
//! from that file system's own root. Two paths that are one folder (a bind mount shows a folder
//! of the lake under another path, at any depth) have the same place, so [`crate::output`] asks
//! here whether a destination lies inside a lake root by any route.
//!
//! A line of `mountinfo` is `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] -
//! FSTYPE SOURCE SUPER_OPTIONS`, with space, tab, newline and backslash in paths written as
//! octal escapes (`\040`). `ROOT` is the folder of the file system mounted at `MOUNT_POINT`
//! (`/` for a whole file system, the bound folder for a bind mount).

use std::path::{Path, PathBuf};

/// One mount: the file system's device (`MAJOR:MINOR`), the folder of it that is mounted, and
/// where.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    device: String,
    root: PathBuf,
    point: PathBuf,
}

/// A place on a file system: its device and the path from the file system's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    device: String,
    path: PathBuf,
}

/// The mount table of this process.
#[derive(Debug, Clone, Default)]
pub(crate) struct MountTable {
    mounts: Vec<Mount>,
}

impl MountTable {
    /// This process's mount table; `None` where the kernel offers none (not Linux, no `/proc`):
    /// the caller then relies on its other checks.
    pub(crate) fn read() -> Option<Self> {
        let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        let table = Self::parse(&text);
        (!table.mounts.is_empty()).then_some(table)
    }

    /// The table of `mountinfo` text; lines it cannot read are skipped.
    fn parse(text: &str) -> Self {
        let mounts = text
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                let device = fields.nth(2)?.to_string();
                let root = PathBuf::from(unescape(fields.next()?));
                let point = PathBuf::from(unescape(fields.next()?));
                Some(Mount { device, root, point })
            })
            .collect();
        Self { mounts }
    }

    /// The place of the absolute, resolved `path`: by the mount whose point is the longest
    /// prefix of it (the last such line when one point is mounted over: the visible mount).
    pub(crate) fn place(&self, path: &Path) -> Option<Place> {
        let mut best: Option<(&Mount, usize)> = None;
        for mount in &self.mounts {
            if path.starts_with(&mount.point) {
                let depth = mount.point.components().count();
                if best.is_none_or(|(_, d)| depth >= d) {
                    best = Some((mount, depth));
                }
            }
        }
        let (mount, _) = best?;
        let below = path.strip_prefix(&mount.point).ok()?;
        Some(Place { device: mount.device.clone(), path: mount.root.join(below) })
    }

    /// The places whose contents lie inside the resolved folder `root`: its own, and the
    /// folder mounted at every mount point below it (a file system or bind mount inside the
    /// root is inside it too).
    pub(crate) fn places_inside(&self, root: &Path) -> Vec<Place> {
        let mut places: Vec<Place> = self.place(root).into_iter().collect();
        for mount in &self.mounts {
            if mount.point != root && mount.point.starts_with(root) {
                places.push(Place { device: mount.device.clone(), path: mount.root.clone() });
            }
        }
        places
    }

    /// Whether the resolved `path` lies in one of `places` ([`MountTable::places_inside`]).
    pub(crate) fn lies_in(&self, path: &Path, places: &[Place]) -> bool {
        let Some(here) = self.place(path) else { return false };
        places.iter().any(|p| p.device == here.device && here.path.starts_with(&p.path))
    }
}

/// A `mountinfo` path field with its octal escapes (`\040` and the like) decoded.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape =
            bytes.get(i + 1..i + 4).filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match escape {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 8:1 / /data rw,relatime - ext4 /dev/sda1 rw
31 22 8:1 /lake/objects/01J0 /mnt/deep rw,relatime - ext4 /dev/sda1 rw
32 30 8:2 / /data/lake/tables rw,relatime - ext4 /dev/sdb1 rw
33 22 8:2 /t.lance /elsewhere rw,relatime - ext4 /dev/sdb1 rw
34 22 8:1 /with\\040space /mnt/sp\\134ace rw - ext4 /dev/sda1 rw
";

    #[test]
    fn a_bind_mount_of_a_deep_folder_is_inside_the_root() {
        let table = MountTable::parse(TABLE);
        let inside = table.places_inside(Path::new("/data/lake"));
        assert!(table.lies_in(Path::new("/data/lake/objects/01J0/a.bin"), &inside));
        assert!(table.lies_in(Path::new("/mnt/deep/a.bin"), &inside), "the bind mount of objects/01J0");
        assert!(table.lies_in(Path::new("/mnt/deep"), &inside));
        assert!(
            table.lies_in(Path::new("/elsewhere/x"), &inside),
            "a file system mounted inside the root, seen elsewhere"
        );
        assert!(!table.lies_in(Path::new("/data/lake2/x"), &inside), "a sibling sharing the root's first letters");
        assert!(!table.lies_in(Path::new("/data/plans/x"), &inside));
        assert!(!table.lies_in(Path::new("/tmp/x"), &inside), "another file system");
    }

    #[test]
    fn escapes_are_decoded_and_the_visible_mount_wins() {
        let table = MountTable::parse(TABLE);
        assert_eq!(table.place(Path::new("/mnt/sp\\ace/f")).unwrap().path, PathBuf::from("/with space/f"));
        let over = format!("{TABLE}40 22 0:50 / /data rw - tmpfs tmpfs rw\n");
        assert_eq!(MountTable::parse(&over).place(Path::new("/data/x")).unwrap().device, "0:50");
        assert_eq!(unescape("a\\040b\\0"), "a b\\0");
    }
}
