//! The local inventory against object_store's own full listing of the same folder tree and a
//! plain sorted walk of it: streams from any `after`, any page size, any window (the children of
//! a folder held in memory; bigger folders are sorted through run files), with and without
//! readers ahead, streams of one inventory interleaved, folders that change between pages, and
//! names object_store refuses. Unlike object_store, the inventory follows no symbolic link (each
//! is listed as a foreign entry) and lists empty folders.

use futures::stream::{BoxStream, StreamExt};
use lake_gc::inventory::local::{LocalInventory, SMALL_FOLDER, WINDOW};
use lake_gc::inventory::Foreign;
use lake_gc::inventory::{InventoryEntry, InventoryPage, ObjectInventory};
use lake_gc::GcError;
use lake_store::keys::mint_key;
use lake_store::LakeStore;
use proptest::prelude::*;
use std::path::Path;
use std::sync::OnceLock;

/// Writes `key` (a path relative to `root`) with `size` bytes, creating its folders.
fn write(root: &Path, key: &str, size: usize) {
    let path = root.join(key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, vec![b'x'; size]).unwrap();
}

/// Keys whose byte order differs from a per-folder order, and other unusual names.
const TRICKY: [&str; 18] = [
    "objects/a.b",
    "objects/a/x",
    "objects/a/y/z",
    "objects/a-",
    "objects/a0",
    "objects/Z",
    "objects/x y",
    "objects/p%25q",
    "objects/h#a",
    "objects/d#12/f",
    "objects/\u{e9}",
    "objects/\u{65e5}/\u{672c}",
    "objects/0/0/0/0/0",
    "objects/0/0/0/0.0",
    "objects/0/0.0",
    "objects/0/0-0/0",
    "objects/01J00000000000000000000000/a/b.bin",
    "objects/01J00000000000000000000000/a.b",
];

/// A lake with `managed` objects in as many ULID folders, a few folders of several objects,
/// nested and tricky names, empty folders, symbolic links, a staged upload and keys outside
/// `objects/`.
fn build(root: &Path, managed: usize) -> LakeStore {
    for i in 0..managed {
        write(root, &mint_key(&format!("m{i}.bin")).0, i % 7);
    }
    for i in 0..40 {
        write(root, &format!("objects/01J00000000000000000000000/many/{i}"), 1);
    }
    for key in TRICKY {
        write(root, key, key.len());
    }
    write(root, "objects/h#12", 3); // an object_store staged upload: listed as staged
    for key in ["objects-old/01J00000000000000000000000/x", "objectsx", "stray.bin", "objects.bin"] {
        write(root, key, 1);
    }
    for dir in ["objects/empty", "objects/e1/e2/e3", "objects/01J00000000000000000000000/empty"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    std::os::unix::fs::symlink(root.join("objects/a.b"), root.join("objects/link")).unwrap();
    std::os::unix::fs::symlink(root.join("objects/missing"), root.join("objects/broken")).unwrap();
    LakeStore::open(root.to_str().unwrap()).unwrap()
}

/// Every entry under `objects/` by a plain recursive walk that follows no symbolic link, sorted
/// by key: regular files are objects (object_store's staged uploads `name#<digits>` are staged);
/// symbolic links
/// (broken or not), pipes, sockets and devices are foreign; a folder with nothing listed in it
/// is an empty folder, `key/`.
fn oracle(store: &LakeStore) -> Vec<InventoryEntry> {
    use lake_gc::inventory::EntryKind;
    use std::os::unix::fs::FileTypeExt;
    fn entry(key: String, meta: &std::fs::Metadata, kind: EntryKind) -> InventoryEntry {
        InventoryEntry { key, size: meta.len(), last_modified: meta.modified().unwrap().into(), kind }
    }
    fn visit(root: &Path, key: &str, out: &mut Vec<InventoryEntry>) -> bool {
        let mut listed = false;
        for e in std::fs::read_dir(root.join(key)).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            let child = format!("{key}/{name}");
            let meta = std::fs::symlink_metadata(root.join(&child)).unwrap();
            let t = meta.file_type();
            if t.is_dir() {
                if !visit(root, &child, out) {
                    out.push(entry(format!("{child}/"), &meta, EntryKind::EmptyFolder));
                }
                listed = true;
                continue;
            }
            let staged =
                name.split_once('#').is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            let kind = match () {
                _ if t.is_file() && staged => EntryKind::Staged,
                _ if t.is_file() => EntryKind::Object,
                _ if t.is_symlink() => EntryKind::Foreign(Foreign::SymbolicLink),
                _ if t.is_fifo() => EntryKind::Foreign(Foreign::NamedPipe),
                _ if t.is_socket() => EntryKind::Foreign(Foreign::Socket),
                _ => EntryKind::Foreign(Foreign::DeviceNode),
            };
            out.push(entry(child, &meta, kind));
            listed = true;
        }
        listed
    }
    let mut all = Vec::new();
    visit(store.local_dir().unwrap(), "objects", &mut all);
    all.sort_by(|a, b| a.key.cmp(&b.key));
    all
}

type Pages<'a> = BoxStream<'a, Result<InventoryPage, GcError>>;

/// The next page of `pages`, checking its shape (pages of `limit`): `None` when the stream has
/// ended.
async fn next_page(pages: &mut Pages<'_>, limit: usize) -> Option<InventoryPage> {
    let page = pages.next().await?.unwrap();
    assert!(page.entries.len() <= limit.max(1));
    if page.next.is_some() {
        assert_eq!(page.entries.len(), limit.max(1), "a page short of the limit ends the listing");
        assert_eq!(page.next.as_ref(), page.entries.last().map(|e| &e.key));
    } else {
        assert!(pages.next().await.is_none(), "the stream ends after the page whose `next` is `None`");
    }
    Some(page)
}

/// The entries of the rest of `pages` (pages of `limit`), checking each page's shape and that the
/// stream ends with the page whose `next` is `None`.
async fn collect(mut pages: Pages<'_>, limit: usize) -> Vec<InventoryEntry> {
    let mut got = Vec::new();
    loop {
        let page = next_page(&mut pages, limit).await.expect("a page whose `next` is `None` ends the stream");
        got.extend(page.entries);
        if page.next.is_none() {
            assert!(pages.next().await.is_none(), "an ended stream stays ended");
            return got;
        }
    }
}

/// The entries of the first `k` pages of `limit` of a stream from `after` (all of them when the
/// stream has fewer).
async fn first_pages(inv: &LocalInventory, after: Option<String>, limit: usize, k: usize) -> Vec<InventoryEntry> {
    let mut pages = inv.list_from(after, limit);
    let mut got = Vec::new();
    for _ in 0..k {
        let Some(page) = next_page(&mut pages, limit).await else { break };
        got.extend(page.entries);
    }
    got
}

/// Every entry of a stream from the start (the walk on this thread: no Tokio runtime).
fn all_pages(inv: &LocalInventory, limit: usize) -> Vec<InventoryEntry> {
    futures::executor::block_on(collect(inv.list_from(None, limit), limit))
}

/// The expected entries strictly after `after`.
fn after<'a>(all: &'a [InventoryEntry], after: Option<&'a str>) -> impl Iterator<Item = &'a InventoryEntry> {
    all.iter().filter(move |e| after.is_none_or(|a| e.key.as_str() > a))
}

struct Lake {
    _dir: tempfile::TempDir,
    store: LakeStore,
    all: Vec<InventoryEntry>,
}

/// One big lake shared by the tests that only read it.
fn lake() -> &'static Lake {
    static LAKE: OnceLock<Lake> = OnceLock::new();
    LAKE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let store = build(dir.path(), 3000);
        let all = oracle(&store);
        Lake { _dir: dir, store, all }
    })
}

#[test]
fn the_oracle_sees_the_tricky_names() {
    let keys: Vec<&str> = lake().all.iter().map(|e| e.key.as_str()).collect();
    for key in TRICKY.iter().chain(&["objects/link", "objects/broken", "objects/empty/", "objects/e1/e2/e3/"]) {
        assert!(keys.contains(key), "{key}");
    }
    for key in ["objectsx", "objects.bin", "objects/e1/", "objects/e1/e2/"] {
        assert!(!keys.contains(&key), "{key}");
    }
    let staged = lake().all.iter().find(|e| e.key == "objects/h#12").map(|e| e.kind);
    assert_eq!(staged, Some(lake_gc::inventory::EntryKind::Staged));
    assert_eq!(keys.len(), 3000 + 40 + TRICKY.len() + 2 + 3 + 1);
}

#[test]
fn pages_concatenate_to_the_full_sorted_listing() {
    let lake = lake();
    for window in [1, 5, 64, WINDOW] {
        for limit in [1, 7, 1000] {
            for readers in [0, 2] {
                let inv = LocalInventory::with_window(lake.store.clone(), window).with_readers(readers);
                let got = all_pages(&inv, limit);
                assert_eq!(got, lake.all, "window {window}, limit {limit}, readers {readers}");
            }
        }
    }
}

/// `after` values near real keys: the keys, their folders with and without a slash, and small
/// edits of them.
fn probe() -> impl Strategy<Value = String> {
    let keys = &lake().all;
    let near = (0..keys.len(), 0usize..64, prop::sample::select(vec!["", "/", ".", "-", "0", "z", "/a", "\u{e9}"]))
        .prop_map(|(i, cut, tail)| {
            let key = &keys[i].key;
            let cut = key.char_indices().map(|(j, _)| j).chain([key.len()]).rev().nth(cut % 4).unwrap_or(0);
            format!("{}{tail}", &key[..cut])
        });
    prop_oneof![
        4 => near,
        1 => "(objects(/[0-9a-zA-Z./#\\-]{0,4}){0,3})?",
        1 => prop::sample::select(vec![
            String::new(), "objects".into(), "objects/".into(), "objects-".into(), "objects0".into(),
            "objects/..".into(), "objects/../a".into(), "objects//".into(), "objects/a/".into(),
            "objects/a".into(), "objects/a.b/".into(), "objects/link/x".into(), "zzz".into(),
        ]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// From any `after`, the first few pages of any size of a stream are exactly the sorted
    /// listing after it; the inventories are reused across cases, and hold no walk between them.
    #[test]
    fn any_after_any_limit(after_key in probe(), limit in prop_oneof![1usize..9, Just(1000)], window in 0usize..3) {
        static INVENTORIES: OnceLock<Vec<LocalInventory>> = OnceLock::new();
        let inventories = INVENTORIES.get_or_init(|| {
            [(3, 2), (64, 0), (WINDOW, 2)]
                .into_iter()
                .map(|(w, r)| LocalInventory::with_window(lake().store.clone(), w).with_readers(r))
                .collect()
        });
        let expected: Vec<InventoryEntry> = after(&lake().all, Some(&after_key)).take(3 * limit).cloned().collect();
        let got = futures::executor::block_on(first_pages(&inventories[window], Some(after_key.clone()), limit, 3));
        prop_assert_eq!(got, expected);
    }
}

/// A lake whose folders straddle the windows and the read-ahead size: `objects/` with 300
/// objects' folders and the tricky names, `objects/spill/` with 200 children whose byte order
/// differs from a per-folder order, and folders of exactly [`SMALL_FOLDER`] and one more files.
fn straddling(root: &Path) -> LakeStore {
    let store = build(root, 300);
    for i in 0..40 {
        for name in [format!("a{i}"), format!("a{i}.x"), format!("a{i}-"), format!("b{i}/g"), format!("b{i}.x")] {
            write(root, &format!("objects/spill/{name}"), i);
        }
    }
    for (folder, n) in [("full", SMALL_FOLDER), ("over", SMALL_FOLDER + 1)] {
        for i in 0..n {
            write(root, &format!("objects/{folder}/{}", i * 7919 % 1000), 1);
        }
    }
    store
}

#[test]
fn spilled_folders_list_like_a_plain_sorted_walk() {
    let dir = tempfile::tempdir().unwrap();
    let store = straddling(dir.path());
    let all = oracle(&store);
    assert_eq!(all.len(), 300 + 40 + TRICKY.len() + 2 + 3 + 1 + 200 + 2 * SMALL_FOLDER + 1);
    for window in [1, 3, 16, SMALL_FOLDER, SMALL_FOLDER + 1, 200, WINDOW] {
        for readers in [0, 1, 3] {
            for limit in [1, 5, 1000] {
                let inv = LocalInventory::with_window(store.clone(), window).with_readers(readers);
                let got = all_pages(&inv, limit);
                assert_eq!(got, all, "window {window}, readers {readers}, limit {limit}");
            }
        }
    }
}

#[test]
fn pages_resume_after_any_key_across_run_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let store = straddling(dir.path());
    let all = oracle(&store);
    // Every key and every folder of one, each the start of a new stream (a new walk).
    let mut probes: Vec<String> = Vec::new();
    for e in &all {
        probes.push(e.key.clone());
        if let Some((folder, _)) = e.key.rsplit_once('/') {
            probes.extend([folder.to_string(), format!("{folder}/")]);
        }
    }
    probes.dedup();
    let inv = LocalInventory::with_window(store.clone(), 16);
    for after_key in &probes {
        let expected: Vec<InventoryEntry> = after(&all, Some(after_key)).take(6).cloned().collect();
        let got = futures::executor::block_on(first_pages(&inv, Some(after_key.clone()), 3, 2));
        assert_eq!(got, expected, "after {after_key}");
    }
}

#[test]
fn streams_of_one_inventory_keep_their_own_walks() {
    let lake = lake();
    for readers in [0, 2] {
        let inv = LocalInventory::with_window(lake.store.clone(), 5).with_readers(readers);
        // Page by page in turn: a stream from the start, one from a key, and one from the start
        // again, each continuing its own walk whatever the others read in between.
        let starts = [None, Some(lake.all[1000].key.clone()), None];
        let mut streams: Vec<Pages<'_>> = starts.iter().map(|a| inv.list_from(a.clone(), 7)).collect();
        let mut got = vec![Vec::new(); streams.len()];
        let mut open = vec![true; streams.len()];
        while open.contains(&true) {
            for (i, stream) in streams.iter_mut().enumerate() {
                match open[i].then(|| futures::executor::block_on(next_page(stream, 7))).flatten() {
                    Some(page) => got[i].extend(page.entries),
                    None => open[i] = false,
                }
            }
        }
        for (start, got) in starts.iter().zip(&got) {
            let expected: Vec<InventoryEntry> = after(&lake.all, start.as_deref()).cloned().collect();
            assert_eq!(got, &expected, "from {start:?}, readers {readers}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn folders_changing_between_pages() {
    let dir = tempfile::tempdir().unwrap();
    let store = build(dir.path(), 60);
    let before = oracle(&store);
    let inv = LocalInventory::with_window(store.clone(), 4);
    let mut stream = inv.list_from(None, 7);
    let first = next_page(&mut stream, 7).await.unwrap();
    let last = first.next.clone().unwrap();
    // The folder being walked (it holds the read-ahead key), a folder still ahead (read ahead by
    // the first page, which does not keep what it did not return), and the contents of another:
    // all gone; a new file in a folder ahead; and a new folder in `objects/`, which this walk
    // read whole in its first page.
    let folder = |key: &str| key.rsplit_once('/').unwrap().0.to_string();
    let walking = folder(&last);
    let mut ahead: Vec<String> = after(&before, Some(&last)).map(|e| folder(&e.key)).collect();
    ahead.dedup();
    ahead.retain(|f| f != &walking && f != "objects");
    let (gone, emptied) = (&ahead[3], &ahead[6]);
    let remove = |path: std::path::PathBuf| {
        let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        if let Err(e) = removed {
            assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{}", path.display());
        }
    };
    remove(dir.path().join(&walking));
    remove(dir.path().join(gone));
    for entry in std::fs::read_dir(dir.path().join(emptied)).unwrap() {
        remove(entry.unwrap().path());
    }
    write(dir.path(), &format!("{}/new", ahead[5]), 1);
    write(dir.path(), "objects/zz/new", 1);
    let now = oracle(&store);
    // The stream continues its walk: `objects/` as its first page read it.
    let rest = collect(stream, 7).await;
    let expected: Vec<InventoryEntry> =
        after(&now, Some(&last)).filter(|e| e.key != "objects/zz/new").cloned().collect();
    assert_eq!(rest, expected);
    assert!(rest.iter().any(|e| e.key == format!("{}/new", ahead[5])));
    assert_eq!(first.entries, before[..7]);
    // A new stream is a new walk, which reads `objects/` again: from the key the first stream
    // continued after, or from any other.
    for start in [last.as_str(), "objects/x y"] {
        let again = collect(inv.list_from(Some(start.into()), 7), 7).await;
        assert_eq!(again, after(&now, Some(start)).cloned().collect::<Vec<_>>(), "from {start}");
        assert!(again.iter().any(|e| e.key == "objects/zz/new"), "from {start}");
    }

    // The whole prefix gone between pages: the next page is empty and the last, not an error.
    let mut stream = inv.list_from(None, 3);
    let page = next_page(&mut stream, 3).await.unwrap();
    assert!(page.next.is_some());
    std::fs::remove_dir_all(dir.path().join("objects")).unwrap();
    let next = next_page(&mut stream, 3).await.unwrap();
    assert_eq!((next.entries.len(), next.next), (0, None));
    let fresh = LocalInventory::new(store.clone());
    let mut stream = fresh.list_from(None, 3);
    let page = next_page(&mut stream, 3).await.unwrap();
    assert_eq!((page.entries.len(), page.next), (0, None));
}

#[tokio::test(flavor = "multi_thread")]
async fn names_object_store_refuses_fail_the_listing() {
    use std::os::unix::ffi::OsStrExt;
    let bad: [&[u8]; 2] = [b"bad\xffname", b"bad\x01name"];
    for name in bad {
        let dir = tempfile::tempdir().unwrap();
        let store = build(dir.path(), 5);
        let folder = dir.path().join("objects/01J00000000000000000000000");
        std::fs::write(folder.join(std::ffi::OsStr::from_bytes(name)), b"x").unwrap();
        let inv = LocalInventory::new(store.clone());
        let mut stream = inv.list_from(None, 1000);
        let err = stream.next().await.unwrap().unwrap_err();
        assert!(matches!(err, lake_gc::GcError::Store(lake_store::StoreError::Storage { .. })), "{err}");
        assert!(stream.next().await.is_none(), "the stream ends after its error");
        assert!(store.list_dir("objects/01J00000000000000000000000").await.is_err(), "object_store refuses it too");
        // Folders never listed do not matter: keys after the bad folder list fine.
        let page =
            inv.list_from(Some("objects/01J00000000000000000000001".into()), 1000).next().await.unwrap().unwrap();
        assert!(!page.entries.is_empty());

        // In the last folder, which a reader reads when a page reaches that far: the listing
        // fails where it reaches the folder, with or without readers, and pages before it list.
        let dir = tempfile::tempdir().unwrap();
        let store = build(dir.path(), 5);
        std::fs::write(dir.path().join("objects/\u{65e5}").join(std::ffi::OsStr::from_bytes(name)), b"x").unwrap();
        for limit in [3, 1000] {
            let mut listed = Vec::new();
            for readers in [0, 1, 3] {
                let inv = LocalInventory::with_window(store.clone(), 4).with_readers(readers);
                let mut stream = inv.list_from(None, limit);
                let mut keys = Vec::new();
                let err = loop {
                    match stream.next().await.expect("the listing fails before its end") {
                        Ok(page) => {
                            assert!(page.next.is_some(), "the listing fails before its end");
                            keys.extend(page.entries.into_iter().map(|e| e.key));
                        }
                        Err(err) => break err,
                    }
                };
                assert!(stream.next().await.is_none(), "the stream ends after its error");
                assert!(matches!(err, lake_gc::GcError::Store(lake_store::StoreError::Storage { .. })), "{err}");
                assert!(keys.iter().all(|k| k.as_str() < "objects/\u{65e5}/"), "{keys:?}");
                assert_eq!(keys.len() > 20, limit == 3);
                listed.push(keys);
            }
            assert!(listed.windows(2).all(|w| w[0] == w[1]));
        }
    }
}
