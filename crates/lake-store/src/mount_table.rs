//! Where a local path lies on its file system, read from the kernel's mount table
//! (`/proc/self/mountinfo`, Linux `proc(5)`): the mounted file system's device and the path
//! from that file system's own root. Two paths that are one folder (a bind mount shows a folder
//! of the lake under another path, at any depth) have the same place, so [`crate::output`] asks
//! here whether a destination lies inside a lake root by any route ([`crate::outside`]).
//!
//! A line of `mountinfo` is `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [OPTIONAL...] -
//! FSTYPE SOURCE SUPER_OPTIONS`, with space, tab, newline and backslash in paths written as
//! octal escapes (`\040`). `ROOT` is the folder of the file system mounted at `MOUNT_POINT`
//! (`/` for a whole file system, the bound folder for a bind mount).

use std::path::{Path, PathBuf};

/// One mount: its ID, the file system's device (`MAJOR:MINOR`), the folder of it that is
/// mounted, where, and what kind of file system it is (with the super options of an overlay).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    id: u64,
    device: String,
    root: PathBuf,
    point: PathBuf,
    fs_type: String,
    super_options: String,
}

/// A place on a file system: its device and the path from the file system's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    device: String,
    path: PathBuf,
}

impl Mount {
    /// The folders of this overlay's layers at `below` (a path below its mount point): the
    /// upper layer's (`None` when the super options name none in a form read here: an escaped
    /// comma, `\,`, in its path is not) and the lower layers'.
    fn layers(&self, below: &Path) -> (Option<PathBuf>, Vec<PathBuf>) {
        let inner = self.root.strip_prefix("/").unwrap_or(&self.root).join(below);
        let (mut upper, mut lower) = (None, Vec::new());
        for option in self.super_options.split(',') {
            match option.split_once('=') {
                Some(("upperdir", v)) if v.starts_with('/') && !v.ends_with('\\') => {
                    upper = Some(PathBuf::from(unescape(v)).join(&inner));
                }
                Some(("lowerdir", v)) => lower.extend(
                    v.split(':').filter(|f| f.starts_with('/')).map(|f| PathBuf::from(unescape(f)).join(&inner)),
                ),
                _ => {}
            }
        }
        (upper, lower)
    }
}

impl Place {
    /// Whether `other` lies in this place (same file system, at or below its path).
    pub(crate) fn holds(&self, other: &Place) -> bool {
        self.device == other.device && other.path.starts_with(&self.path)
    }
}

/// Where a write into a folder of an overlay file system lands (`overlayfs(5)`, "upper"): the
/// upper layer's folder at the same path below the overlay's root. Lower layers are never
/// written (a changed file is copied up first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OverlayUpper {
    /// The folder is not on an overlay.
    NotOverlay,
    /// The upper layer's folder a write here lands in.
    At(PathBuf),
    /// An overlay whose upper layer the mount table does not name in a form read here: the
    /// caller cannot tell where writes land, and refuses.
    Unknown,
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
                let (head, tail) = line.split_once(" - ")?;
                let mut fields = head.split(' ');
                let id = fields.next()?.parse().ok()?;
                let device = fields.nth(1)?.to_string();
                let root = PathBuf::from(unescape(fields.next()?));
                let point = PathBuf::from(unescape(fields.next()?));
                let mut tail = tail.split(' ');
                let fs_type = tail.next()?.to_string();
                let super_options = tail.nth(1).unwrap_or_default().to_string();
                Some(Mount { id, device, root, point, fs_type, super_options })
            })
            .collect();
        Self { mounts }
    }

    /// The place of the absolute, resolved `path`: by the mount whose point is the longest
    /// prefix of it (the last such line when one point is mounted over: the visible mount).
    pub(crate) fn place(&self, path: &Path) -> Option<Place> {
        let mount = self.visible(path)?;
        let below = path.strip_prefix(&mount.point).ok()?;
        Some(Place { device: mount.device.clone(), path: mount.root.join(below) })
    }

    /// The mount the absolute `path` is seen on: the one whose point is the longest prefix of
    /// it (the last such line when one point is mounted over).
    fn visible(&self, path: &Path) -> Option<&Mount> {
        let mut best: Option<(&Mount, usize)> = None;
        for mount in &self.mounts {
            if path.starts_with(&mount.point) {
                let depth = mount.point.components().count();
                if best.is_none_or(|(_, d)| depth >= d) {
                    best = Some((mount, depth));
                }
            }
        }
        best.map(|(mount, _)| mount)
    }

    /// The place of the absolute `path` on the mount `id` (the kernel's `mnt_id` of an open
    /// file, `proc(5)` `fdinfo`): exact where the longest-prefix rule of [`MountTable::place`]
    /// could pick a mount the file is not on. `None` for an unknown mount or a path outside it.
    pub(crate) fn place_on(&self, id: u64, path: &Path) -> Option<Place> {
        let mount = self.mounts.iter().rev().find(|m| m.id == id)?;
        let below = path.strip_prefix(&mount.point).ok()?;
        Some(Place { device: mount.device.clone(), path: mount.root.join(below) })
    }

    /// Where a write into the folder `path` of the mount `id` lands when that mount is an
    /// overlay ([`OverlayUpper`]); `None` for an unknown mount.
    pub(crate) fn overlay_upper(&self, id: u64, path: &Path) -> Option<OverlayUpper> {
        let mount = self.mounts.iter().rev().find(|m| m.id == id)?;
        if mount.fs_type != "overlay" {
            return Some(OverlayUpper::NotOverlay);
        }
        let Ok(below) = path.strip_prefix(&mount.point) else { return Some(OverlayUpper::Unknown) };
        Some(match mount.layers(below).0 {
            Some(upper) => OverlayUpper::At(upper),
            None => OverlayUpper::Unknown,
        })
    }

    /// Where the absolute `path` lies in the layers of the overlay file system it is on (the
    /// visible mount, [`MountTable::place`]): each lower layer's folder and the upper layer's,
    /// at the same path below the overlay's root; nothing when it is not on an overlay.
    pub(crate) fn overlay_layers(&self, path: &Path) -> Vec<PathBuf> {
        let Some(mount) = self.visible(path).filter(|m| m.fs_type == "overlay") else { return Vec::new() };
        let Ok(below) = path.strip_prefix(&mount.point) else { return Vec::new() };
        let (upper, lower) = mount.layers(below);
        lower.into_iter().chain(upper).collect()
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
        places.iter().any(|p| p.holds(&here))
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
22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l,upperdir=/data/up,workdir=/data/work
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

    #[test]
    fn a_mount_is_found_by_its_id_and_an_overlay_names_its_upper_layer() {
        let table = MountTable::parse(TABLE);
        assert_eq!(table.place_on(31, Path::new("/mnt/deep/x")).unwrap().path, PathBuf::from("/lake/objects/01J0/x"));
        assert_eq!(table.place_on(30, Path::new("/mnt/deep/x")), None, "not on that mount");
        assert_eq!(table.place_on(99, Path::new("/x")), None);
        assert_eq!(
            table.overlay_upper(22, Path::new("/etc/x")),
            Some(OverlayUpper::At(PathBuf::from("/data/up/etc/x")))
        );
        assert_eq!(table.overlay_upper(30, Path::new("/data/x")), Some(OverlayUpper::NotOverlay));
        assert_eq!(
            table.overlay_layers(Path::new("/etc/x")),
            [PathBuf::from("/l/etc/x"), PathBuf::from("/data/up/etc/x")]
        );
        assert!(table.overlay_layers(Path::new("/data/x")).is_empty());
        let odd = MountTable::parse("5 1 0:9 / /o rw - overlay overlay rw,lowerdir=/l\n");
        assert_eq!(odd.overlay_upper(5, Path::new("/o/a")), Some(OverlayUpper::Unknown));
    }
}
