//! The verified object reader on both backends: one conformance suite, run on a local-folder
//! root and on LocalStack S3. Objects are uploaded by the managed writer, then overwritten in
//! place (`LakeStore::put`) to corrupt, truncate or lengthen them.

use bytes::Bytes;
use futures::StreamExt;
use lake_common::ObjectIdentity;
use lake_store::writer::ManagedObjectWriter;
use lake_store::{LakeStore, ObjectReader, StoreError, VerifiedStream};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `n` bytes that differ from offset to offset.
fn content(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8 ^ seed).collect()
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Uploads `bytes` with the managed writer; the reference a row would hold.
async fn upload(store: &LakeStore, name: &str, bytes: &[u8]) -> ObjectIdentity {
    let object = ManagedObjectWriter::new(store.clone()).upload(name, bytes).await.expect("upload");
    assert_eq!((object.size, object.sha256), (bytes.len() as u64, sha256(bytes)));
    object.identity()
}

/// Every item of `stream`: the bytes handed out before the first error, and that error.
async fn drain(mut stream: VerifiedStream) -> (Vec<u8>, Option<StoreError>) {
    let mut bytes = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(e) => {
                assert!(stream.next().await.is_none(), "the stream ends after its error");
                return (bytes, Some(e));
            }
        }
    }
    (bytes, None)
}

/// Checks `e` is the mismatch of `reference` against the `actual` bytes the store holds:
/// `whole` when the reader read them all (then the digest is reported).
fn assert_mismatch(e: &StoreError, reference: &ObjectIdentity, actual: &[u8], whole: bool) {
    match e {
        StoreError::ObjectMismatch { key, expected_size, actual_size, expected_sha256, actual_sha256 } => {
            assert_eq!(key, &reference.uri);
            assert_eq!((*expected_size, expected_sha256), (reference.size, &reference.sha256));
            if whole {
                assert_eq!(*actual_size, actual.len() as u64);
                assert_eq!(*actual_sha256, Some(sha256(actual)));
            } else {
                assert!(*actual_size > reference.size || *actual_size == actual.len() as u64, "{e}");
            }
        }
        other => panic!("expected an object mismatch, got {other:?}"),
    }
    assert_eq!(e.kind().as_str(), "object_mismatch");
    assert!(!e.is_transient());
    assert!(e.to_string().contains(&reference.uri), "{e}");
}

fn assert_missing(e: &StoreError, key: &str) {
    assert!(matches!(e, StoreError::ObjectMissing { key: k } if k == key), "{e:?}");
    assert_eq!(e.kind().as_str(), "object_missing");
    assert!(!e.is_transient());
    assert!(e.to_string().contains(key), "{e}");
}

fn assert_unreachable(e: &StoreError, uri: &str) {
    assert!(matches!(e, StoreError::ObjectUnreachable { uri: u, .. } if u == uri), "{e:?}");
    assert_eq!(e.kind().as_str(), "object_unreachable");
    assert!(!e.is_transient());
}

/// The reader's contract on `store` (a fresh, empty root).
async fn conformance(store: LakeStore) {
    let reader = ObjectReader::new(store.clone());
    round_trips(&store, &reader).await;
    mismatches(&store, &reader).await;
    ranges(&store, &reader).await;
    missing(&reader).await;
    unreachable(&store, &reader).await;
    concurrency_bound(&store).await;
    batches(&store).await;
    blocking_reads(&store, &reader).await;
}

/// `read_verified_blocking` reads a local root on the calling thread (as `read_verified` does)
/// and refuses an S3 root; a reference claiming more bytes than its object has allocates nothing.
async fn blocking_reads(store: &LakeStore, reader: &ObjectReader) {
    let bytes = content(70_000, 3);
    let reference = upload(store, "blocking.bin", &bytes).await;
    let (r, id) = (reader.clone(), reference.clone());
    let read = tokio::task::spawn_blocking(move || r.read_verified_blocking(&id, |len| Ok(vec![0u8; len])))
        .await
        .expect("the blocking task");
    match store.local_dir() {
        Some(_) => assert!(read.expect("a local blocking read") == bytes),
        None => assert!(matches!(read, Err(StoreError::Storage { .. })), "{read:?}"),
    }
    assert_eq!(reader.is_local(), store.local_dir().is_some());
    let claims_more = ObjectIdentity::new(reference.uri.clone(), reference.sha256, 1 << 40);
    let refused = |len: usize| -> Result<Vec<u8>, StoreError> {
        Err(StoreError::storage("alloc", format!("asked for {len} bytes")))
    };
    let e = reader.read_verified_into(&claims_more, refused).await.expect_err("claims more");
    assert!(matches!(e, StoreError::ObjectMismatch { actual_size: 70_000, actual_sha256: None, .. }), "{e:?}");
}

/// The bytes put come back, whole or streamed, by key or by any URI spelling of the key.
async fn round_trips(store: &LakeStore, reader: &ObjectReader) {
    for (name, bytes) in
        [("empty.bin", Vec::new()), ("small.txt", b"hello, lake".to_vec()), ("big.bin", content((3 << 20) + 17, 7))]
    {
        let reference = upload(store, name, &bytes).await;
        let read = reader.read_verified(&reference).await.expect("verified read");
        assert_eq!(read.len(), bytes.len(), "{name}");
        assert!(read == bytes, "{name}: the bytes put come back");
        let stream = reader.open_verified(&reference).await.expect("open");
        assert_eq!((stream.key(), stream.expected_size()), (reference.uri.as_str(), reference.size));
        let (streamed, error) = drain(stream).await;
        assert!(error.is_none(), "{name}: {error:?}");
        assert!(streamed == bytes, "{name}: the stream hands out the bytes put");
        assert_eq!(reader.size(&reference.uri).await.expect("size"), bytes.len() as u64);

        // The absolute URI of the key names the same object.
        let uri = store.root().join(&reference.uri);
        assert_eq!(reader.key_of(&uri).expect("in the root"), Some(reference.uri.clone()));
        let by_uri = ObjectIdentity::new(uri, reference.sha256, reference.size);
        assert!(reader.read_verified(&by_uri).await.expect("read by URI") == bytes);
    }
}

/// An object changed in place after its reference was written: corrupted (one byte flipped),
/// truncated, lengthened. Verified reads and drained streams fail with the mismatch.
async fn mismatches(store: &LakeStore, reader: &ObjectReader) {
    let bytes = content(256 << 10, 3);
    let mut corrupted = bytes.clone();
    corrupted[bytes.len() / 2] ^= 0x01;
    let truncated = bytes[..bytes.len() - 1].to_vec();
    let mut longer = bytes.clone();
    longer.extend_from_slice(b"more");
    for (what, replacement) in [("corrupted", corrupted), ("truncated", truncated), ("longer", longer)] {
        let reference = upload(store, &format!("{what}.bin"), &bytes).await;
        store.put(&reference.uri, replacement.clone()).await.expect("overwrite in place");

        let e = reader.read_verified(&reference).await.expect_err(what);
        assert_mismatch(&e, &reference, &replacement, what == "corrupted");

        let (handed_out, e) = drain(reader.open_verified(&reference).await.expect("open")).await;
        let e = e.unwrap_or_else(|| panic!("{what}: the stream must end with the mismatch, not EOF"));
        assert_mismatch(&e, &reference, &replacement, what == "corrupted");
        assert!(handed_out.len() as u64 <= reference.size, "{what}: never more bytes than the reference's size");
        if what == "corrupted" {
            // Same size: the bytes flow, and the end is the error.
            assert!(handed_out == replacement, "{what}");
        } else {
            // The store reports another size: no byte is handed out.
            assert!(handed_out.is_empty(), "{what}: {} bytes handed out", handed_out.len());
        }
    }

    // A reference whose digest is wrong (the store's object is intact): the same error.
    let reference = upload(store, "digest.bin", b"abc").await;
    let wrong = ObjectIdentity::new(reference.uri.clone(), [0; 32], reference.size);
    let e = reader.read_verified(&wrong).await.expect_err("wrong digest");
    assert_mismatch(&e, &wrong, b"abc", true);
}

/// Ranged reads return the bytes asked for and are not verified.
async fn ranges(store: &LakeStore, reader: &ObjectReader) {
    let bytes = content(100_000, 11);
    let reference = upload(store, "ranged.bin", &bytes).await;
    let key = reference.uri.as_str();
    for range in [0..1, 0..10, 4_096..70_000, 99_999..100_000, 0..100_000] {
        let got = reader.read_range(key, range.clone()).await.expect("ranged read");
        assert!(got == bytes[range.start as usize..range.end as usize], "{range:?}");
    }
    // An end past the object's end is cut at the end; an empty range reads nothing.
    let tail = reader.read_range(key, 99_990..200_000).await.expect("past the end");
    assert!(tail == bytes[99_990..], "{} bytes", tail.len());
    assert_eq!(reader.read_range(key, 5..5).await.expect("empty"), Bytes::new());
    // A start at or past the end, or after the range's end, is refused.
    for range in [100_000..100_010, 200_000..200_001] {
        let e = reader.read_range(key, range.clone()).await.expect_err("start past the end");
        assert!(matches!(e, StoreError::Storage { .. }), "{range:?}: {e:?}");
    }
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 10..5;
    assert!(matches!(reader.read_range(key, backwards).await, Err(StoreError::Storage { .. })));

    // Unverified: a corrupted object's bytes come back as the store holds them.
    let mut corrupted = bytes.clone();
    corrupted[50] ^= 0xff;
    store.put(key, corrupted.clone()).await.expect("overwrite");
    assert!(reader.read_range(key, 0..100).await.expect("ranged read") == corrupted[..100]);
    assert!(reader.read_verified(&reference).await.is_err());
}

/// A missing object is `ObjectMissing`, naming its key, for every kind of read.
async fn missing(reader: &ObjectReader) {
    let (key, _) = lake_store::keys::mint_key("never-written.bin");
    let reference = ObjectIdentity::new(key.clone(), [0; 32], 3);
    assert_missing(&reader.read_verified(&reference).await.expect_err("missing"), &key);
    assert_missing(&reader.open_verified(&reference).await.expect_err("missing"), &key);
    assert_missing(&reader.read_range(&key, 0..3).await.expect_err("missing"), &key);
    assert_missing(&reader.size(&key).await.expect_err("missing"), &key);
}

/// References the store cannot reach are refused by name; on S3, a URI in the root's bucket
/// outside its prefix is read with the lake's settings.
async fn unreachable(store: &LakeStore, reader: &ObjectReader) {
    let other_bucket =
        format!("s3://lake-no-such-bucket-{}/objects/x.bin", ulid::Ulid::new().to_string().to_lowercase());
    // The lake's own files are no objects: inside the root only managed keys are read.
    let own = ["_lake/descriptor.json", "tables/t.lance/_versions/1.manifest", "objects/not-a-ulid/x.bin"];
    for uri in [other_bucket.as_str(), "https://example.com/objects/x.bin", "../escape.bin", "/abs/path.bin"]
        .into_iter()
        .chain(own)
    {
        let reference = ObjectIdentity::new(uri, [0; 32], 1);
        assert_unreachable(&reader.read_verified(&reference).await.expect_err(uri), uri);
        assert_unreachable(&reader.read_range(uri, 0..1).await.expect_err(uri), uri);
        assert_unreachable(&reader.size(uri).await.expect_err(uri), uri);
        assert_unreachable(&reader.key_of(uri).expect_err(uri), uri);
    }
    match store.root().scheme() {
        "s3" => {
            let outside = format!("{}-outside/x.bin", store.prefix());
            let bytes = b"outside the root".to_vec();
            store.object_store().put(&Path::from(outside.as_str()), bytes.clone().into()).await.expect("put");
            let uri = format!("s3://{}/{outside}", store.root().authority());
            assert_eq!(reader.key_of(&uri).expect("reachable"), None, "external, not a key");
            let reference = ObjectIdentity::new(uri.clone(), sha256(&bytes), bytes.len() as u64);
            assert!(reader.read_verified(&reference).await.expect("same bucket") == bytes);
            assert!(reader.read_range(&uri, 0..7).await.expect("same bucket") == bytes[..7]);
            // A key with characters object_store's `Path::from` would percent-encode is read as it is.
            let tilde = format!("{}-outside/a~b.bin", store.prefix());
            let tilde_path = Path::parse(tilde.as_str()).expect("a raw key");
            store.object_store().put(&tilde_path, bytes.clone().into()).await.expect("put");
            let tilde_uri = format!("s3://{}/{tilde}", store.root().authority());
            let reference = ObjectIdentity::new(tilde_uri.clone(), sha256(&bytes), bytes.len() as u64);
            assert!(reader.read_verified(&reference).await.expect("the key as written") == bytes);
            store.object_store().delete(&tilde_path).await.expect("clean up");
            let gone = format!("s3://{}/{}-outside/gone.bin", store.root().authority(), store.prefix());
            assert_missing(&reader.size(&gone).await.expect_err("missing"), &gone);
            store.object_store().delete(&Path::from(outside.as_str())).await.expect("clean up");
        }
        _ => {
            // A file outside the local root's folder.
            let elsewhere = tempfile::TempDir::new().expect("temp dir");
            std::fs::write(elsewhere.path().join("x.bin"), b"x").expect("write");
            let uri = url::Url::from_file_path(elsewhere.path().join("x.bin")).expect("file URL").to_string();
            let reference = ObjectIdentity::new(uri.clone(), sha256(b"x"), 1);
            assert_unreachable(&reader.read_verified(&reference).await.expect_err("outside the root"), &uri);
            // A managed key that is a symbolic link to it: refused, by every read.
            let object = upload(store, "linked.bin", b"x").await;
            let dir = store.local_dir().expect("a local root");
            let folder = dir.join(&object.uri).parent().expect("its folder").to_path_buf();
            std::os::unix::fs::symlink(elsewhere.path().join("x.bin"), folder.join("link.bin")).expect("symlink");
            let link = format!("{}/link.bin", object.uri.rsplit_once('/').expect("a key").0);
            let reference = ObjectIdentity::new(link.clone(), sha256(b"x"), 1);
            assert_unreachable(&reader.read_verified(&reference).await.expect_err("through a link"), &link);
            assert_unreachable(&reader.read_range(&link, 0..1).await.expect_err("through a link"), &link);
            assert_unreachable(&reader.size(&link).await.expect_err("through a link"), &link);
        }
    }
}

/// At most `concurrency` requests in flight across a reader and its clones; an open stream holds
/// its permit until it ends or is dropped.
async fn concurrency_bound(store: &LakeStore) {
    let reader = ObjectReader::with_concurrency(store.clone(), 2);
    assert_eq!(reader.concurrency(), 2);
    let clone = reader.clone();
    let reference = upload(store, "bounded.bin", &content(1_000, 5)).await;
    let first = reader.open_verified(&reference).await.expect("first");
    let second = clone.open_verified(&reference).await.expect("second");
    let blocked = tokio::time::timeout(Duration::from_millis(300), clone.size(&reference.uri)).await;
    assert!(blocked.is_err(), "a third request waits while two streams are open");
    drop(first);
    let size = tokio::time::timeout(Duration::from_secs(30), clone.size(&reference.uri)).await;
    assert_eq!(size.expect("a permit was released").expect("size"), 1_000);
    // A stream drained to its end releases its permit too.
    let (bytes, error) = drain(second).await;
    assert!(error.is_none() && bytes.len() == 1_000);
    let (a, b) = tokio::join!(reader.read_verified(&reference), clone.read_verified(&reference));
    assert!(a.is_ok() && b.is_ok());
}

/// A buffer that counts the bytes of the buffers alive (`live`) and the most ever alive (`peak`).
struct Counted {
    bytes: Vec<u8>,
    live: Arc<AtomicU64>,
}

impl AsMut<[u8]> for Counted {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(self.bytes.len() as u64, Ordering::SeqCst);
    }
}

/// Batches: every object in input order, each failure its own item (a mismatch, a missing
/// object, an unreachable reference among good objects hide none of them), never an
/// unverified byte; the byte budget bounds the buffers alive, an object above it is read alone.
async fn batches(store: &LakeStore) {
    let reader = ObjectReader::with_concurrency(store.clone(), 3);
    let mut references = Vec::new();
    let mut expected: Vec<Result<Vec<u8>, &str>> = Vec::new();
    for i in 0..24u8 {
        let bytes = content([0, 1, 1_000, 70_000, 300_000][i as usize % 5] + i as usize, i);
        references.push(upload(store, &format!("batch-{i}.bin"), &bytes).await);
        expected.push(Ok(bytes));
    }
    // Tampered in place: one byte flipped (same size: the whole file is read, then refused),
    // one truncated, one lengthened; then a missing object and an unreachable reference.
    for (at, how) in [(3usize, "corrupted"), (9, "truncated"), (14, "longer")] {
        let Ok(good) = &expected[at] else { unreachable!() };
        let mut bad = good.clone();
        match how {
            "corrupted" => bad[good.len() / 2] ^= 0x40,
            "truncated" => {
                bad.pop();
            }
            _ => bad.extend_from_slice(b"tail"),
        }
        store.put(&references[at].uri, bad).await.expect("overwrite in place");
        expected[at] = Err("object_mismatch");
    }
    let (missing_key, _) = lake_store::keys::mint_key("never-written.bin");
    references.insert(6, ObjectIdentity::new(missing_key, [0; 32], 10));
    expected.insert(6, Err("object_missing"));
    references.insert(20, ObjectIdentity::new("../escape.bin", [0; 32], 1));
    expected.insert(20, Err("object_unreachable"));

    let live = Arc::new(AtomicU64::new(0));
    let peak = Arc::new(AtomicU64::new(0));
    for budget in [0u64, 200_000, 1 << 20, u64::MAX] {
        peak.store(0, Ordering::SeqCst);
        let (l, p) = (live.clone(), peak.clone());
        let alloc = move |len: usize| {
            let now = l.fetch_add(len as u64, Ordering::SeqCst) + len as u64;
            p.fetch_max(now, Ordering::SeqCst);
            Ok(Counted { bytes: vec![0; len], live: l.clone() })
        };
        let mut stream = reader.read_many_with(references.clone(), budget, alloc);
        let mut at = 0;
        while let Some(item) = stream.next().await {
            match (&item, &expected[at]) {
                (Ok(got), Ok(want)) => assert!(got.bytes == *want, "budget {budget}, object {at}"),
                (Err(e), Err(kind)) => {
                    assert_eq!(e.kind().as_str(), *kind, "budget {budget}, object {at}: {e}");
                    if *kind == "object_mismatch" {
                        assert!(e.to_string().contains(&references[at].uri), "{e}");
                    }
                }
                (got, want) => panic!("budget {budget}, object {at}: got {:?}, want {want:?}", got.as_ref().err()),
            }
            drop(item);
            at += 1;
        }
        assert_eq!(at, references.len(), "one item per reference");
        let largest = references.iter().map(|r| r.size).max().unwrap_or(0);
        let peak = peak.load(Ordering::SeqCst);
        // Started and not handed out: at most the budget, or one object larger than it; besides
        // them, the object the loop holds (a read may start while it is being handed out).
        assert!(peak <= budget.max(largest).saturating_add(largest), "budget {budget}: {peak} bytes alive at once");
        assert_eq!(live.load(Ordering::SeqCst), 0, "every buffer was handed out or dropped");
        // The plain form hands out the same.
        if budget == 1 << 20 {
            let got: Vec<_> = reader.read_many(references.clone(), budget).collect().await;
            for (at, (got, want)) in got.iter().zip(&expected).enumerate() {
                match (got, want) {
                    (Ok(got), Ok(want)) => assert!(got == want, "object {at}"),
                    (Err(e), Err(kind)) => assert_eq!(e.kind().as_str(), *kind),
                    _ => panic!("object {at}"),
                }
            }
        }
    }
    // Dropped half-way: the reads in flight stop, and their buffers are freed.
    let l = live.clone();
    let alloc = move |len: usize| {
        l.fetch_add(len as u64, Ordering::SeqCst);
        Ok(Counted { bytes: vec![0; len], live: l.clone() })
    };
    let mut stream = reader.read_many_with(references.clone(), u64::MAX, alloc);
    assert!(stream.next().await.is_some());
    drop(stream);
    tokio::time::timeout(Duration::from_secs(30), async {
        while live.load(Ordering::SeqCst) != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the aborted reads free their buffers");
    // A buffer of the wrong size is refused, never filled past its end.
    let good = references[2].clone();
    let e = reader.read_verified_into(&good, |len| Ok(vec![0u8; len + 1])).await.expect_err("wrong buffer");
    assert!(matches!(e, StoreError::Storage { .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn local_folder_conforms() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let store = LakeStore::open(dir.path().to_str().expect("UTF-8 path")).expect("open");
    conformance(store).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_conforms() {
    let store = LakeStore::open(&crate::s3_root("reader")).expect("open");
    conformance(store).await;
}

/// A local root's whole reads (one at a time, on the calling thread, and in batches) open the
/// object with one `openat2(RESOLVE_NO_SYMLINKS)`: a symbolic link as the object's ULID folder or
/// as the object is refused by name, a folder in an object's place is a missing object, and a
/// FIFO is refused without waiting for a writer (object_store's open would block on it).
#[tokio::test(flavor = "multi_thread")]
async fn local_whole_reads_refuse_links_folders_and_fifos() {
    let dir = tempfile::TempDir::new().expect("temp dir");
    let store = LakeStore::open(dir.path().to_str().expect("UTF-8 path")).expect("open");
    let root = store.local_dir().expect("a local root").to_path_buf();
    let reader = ObjectReader::new(store.clone());
    let good = upload(&store, "good.bin", b"good").await;
    // The ULID folder of `linked_folder` is a link to a folder outside the root holding the bytes.
    let outside = tempfile::TempDir::new().expect("temp dir");
    std::fs::write(outside.path().join("x.bin"), b"good").expect("write");
    let (linked_folder, _) = lake_store::keys::mint_key("x.bin");
    let folder_of = |key: &str| root.join(key.rsplit_once('/').expect("a key").0);
    std::os::unix::fs::symlink(outside.path(), folder_of(&linked_folder)).expect("symlink");
    // The object itself a link, beside a real object.
    let linked_file = format!("{}/link.bin", good.uri.rsplit_once('/').expect("a key").0);
    std::os::unix::fs::symlink(outside.path().join("x.bin"), root.join(&linked_file)).expect("symlink");
    let (folder, _) = lake_store::keys::mint_key("folder.bin");
    std::fs::create_dir_all(root.join(&folder)).expect("a folder in an object's place");
    let (fifo, _) = lake_store::keys::mint_key("fifo.bin");
    std::fs::create_dir_all(folder_of(&fifo)).expect("its folder");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join(&fifo),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .expect("mkfifo");
    let same = |uri: &str| ObjectIdentity::new(uri.to_string(), good.sha256, good.size);
    let cases: Vec<(ObjectIdentity, Option<&str>)> = vec![
        (good.clone(), None),
        (same(&linked_folder), Some("object_unreachable")),
        (same(&linked_file), Some("object_unreachable")),
        (same(&folder), Some("object_missing")),
        (same(&fifo), Some("storage")),
        (good.clone(), None),
    ];
    let check = |what: &str, at: usize, got: Result<Vec<u8>, StoreError>| match (&got, cases[at].1) {
        (Ok(bytes), None) => assert_eq!(bytes, b"good", "{what} {at}"),
        (Err(e), Some(kind)) => {
            assert_eq!(e.kind().as_str(), kind, "{what} {at}: {e}");
            if kind == "object_unreachable" {
                assert!(e.to_string().contains("symbolic link"), "{what} {at}: {e}");
            }
        }
        _ => panic!("{what} {at}: {got:?}"),
    };
    let within = Duration::from_secs(30);
    for (at, (reference, _)) in cases.iter().enumerate() {
        let read = tokio::time::timeout(within, reader.read_verified(reference)).await.expect("no wait on a FIFO");
        check("read_verified", at, read.map(|b| b.to_vec()));
        let (r, id) = (reader.clone(), reference.clone());
        let blocking = tokio::task::spawn_blocking(move || r.read_verified_blocking(&id, |len| Ok(vec![0u8; len])));
        check(
            "read_verified_blocking",
            at,
            tokio::time::timeout(within, blocking).await.expect("no wait").expect("task"),
        );
    }
    let references: Vec<ObjectIdentity> = cases.iter().map(|(r, _)| r.clone()).collect();
    let batch: Vec<_> = tokio::time::timeout(within, reader.read_many(references, u64::MAX).collect::<Vec<_>>())
        .await
        .expect("no wait on a FIFO");
    assert_eq!(batch.len(), cases.len());
    for (at, got) in batch.into_iter().enumerate() {
        check("read_many", at, got);
    }
    assert_eq!(std::fs::read(outside.path().join("x.bin")).expect("untouched"), b"good");
}
