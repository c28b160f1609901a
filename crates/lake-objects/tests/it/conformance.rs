//! The storage conformance suite: the same checks for every backend.
//!
//! Each `check_*` function takes an empty lake store; a backend's test opens one and runs them
//! all. Backends: local folder (here); S3 joins with the S3 issue.

use chrono::Utc;
use lake_objects::deleter::{DeleteOutcome, ObjectDeleter, StoreDeleter};
use lake_objects::inventory::local::LocalInventory;
use lake_objects::inventory::ObjectInventory;
use lake_objects::keys::mint_key;
use lake_objects::store::CreateOutcome;
use lake_objects::writer::ManagedObjectWriter;
use lake_objects::LakeStore;
use sha2::Digest;

/// Inventory pages concatenate to every key under `objects/` in byte order, whatever the page
/// size, and never include keys of a sibling prefix.
pub async fn check_inventory_order_and_pagination(
    store: &LakeStore,
    inventory: &dyn ObjectInventory,
) {
    let mut expected = Vec::new();
    for i in 0..23 {
        let (key, _) = mint_key(&format!("f{i}.bin"));
        store.put(&key, vec![b'x'; i]).await.unwrap();
        expected.push(key);
    }
    // Keys whose byte order differs from a per-folder order: `a.b` sorts before `a/x`.
    for k in [
        "objects/a.b",
        "objects/a/x",
        "objects/a/y/z",
        "objects/a-",
        "objects/a0",
        "objects/Z",
    ] {
        store.put(k, b"odd".to_vec()).await.unwrap();
        expected.push(k.to_string());
    }
    for k in [
        "objects-old/01J00000000000000000000000/x",
        "objectsx",
        "stray.bin",
    ] {
        store.put(k, b"outside".to_vec()).await.unwrap();
    }
    expected.sort();
    for page_size in [1, 2, 5, 1000] {
        let mut got = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = inventory
                .list_page(after.as_deref(), page_size)
                .await
                .unwrap();
            assert!(page.entries.len() <= page_size);
            pages += 1;
            got.extend(page.entries.iter().map(|e| e.key.clone()));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(got, expected, "page size {page_size}");
        assert!(
            pages >= expected.len() / page_size,
            "page size {page_size}: {pages} pages"
        );
    }
    // Sizes and server timestamps come through.
    let page = inventory.list_page(None, 1000).await.unwrap();
    let now = Utc::now();
    for e in &page.entries {
        assert!(e.last_modified <= now + chrono::Duration::seconds(5));
        let meta = store.head(&e.key).await.unwrap().unwrap();
        assert_eq!(meta.size, e.size);
    }
}

/// Bulk deletes report one outcome per key; keys already gone are not failures.
pub async fn check_bulk_delete_with_missing_keys(store: &LakeStore, deleter: &dyn ObjectDeleter) {
    let mut keys = Vec::new();
    for i in 0..5 {
        let (key, _) = mint_key(&format!("d{i}"));
        store.put(&key, b"d".to_vec()).await.unwrap();
        keys.push(key);
    }
    let (missing, _) = mint_key("never-written");
    keys.insert(2, missing.clone());
    let outcomes = deleter.delete_batch(&keys).await.unwrap();
    assert_eq!(outcomes.len(), keys.len());
    for (k, o) in keys.iter().zip(&outcomes) {
        assert!(
            matches!(o, DeleteOutcome::Deleted | DeleteOutcome::NotFound),
            "{k}: {o:?}"
        );
        assert!(store.head(k).await.unwrap().is_none());
    }
    // Deleting again: every key is already gone, none failed.
    let again = deleter.delete_batch(&keys).await.unwrap();
    assert!(
        again
            .iter()
            .all(|o| matches!(o, DeleteOutcome::Deleted | DeleteOutcome::NotFound)),
        "{again:?}"
    );
}

/// Create-only writes are atomic and report the existing bytes.
pub async fn check_create_only(store: &LakeStore) {
    assert_eq!(
        store
            .put_create("_lake/test/doc", b"one".to_vec())
            .await
            .unwrap(),
        CreateOutcome::Created
    );
    match store
        .put_create("_lake/test/doc", b"two".to_vec())
        .await
        .unwrap()
    {
        CreateOutcome::Exists(b) => assert_eq!(b.as_ref(), b"one"),
        other => panic!("{other:?}"),
    }
}

/// The writer streams, hashes and names objects by the grammar, also across multipart uploads.
pub async fn check_writer(store: &LakeStore) {
    let writer = ManagedObjectWriter::new(store.clone());
    let big: Vec<u8> = (0..(lake_objects::writer::PART_SIZE + 12345))
        .map(|i| (i % 251) as u8)
        .collect();
    for content in [Vec::new(), b"small".to_vec(), big] {
        let o = writer
            .upload("a file.bin", content.as_slice())
            .await
            .unwrap();
        assert!(
            lake_objects::keys::parse_managed_key(&o.key).is_some(),
            "{}",
            o.key
        );
        assert_eq!(o.size, content.len() as u64);
        assert_eq!(o.sha256, <[u8; 32]>::from(sha2::Sha256::digest(&content)));
        assert_eq!(
            store.get(&o.key).await.unwrap().unwrap().as_ref(),
            content.as_slice()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let open = |name: &str| LakeStore::open(dir.path().join(name).to_str().unwrap()).unwrap();
    let store = open("inventory");
    check_inventory_order_and_pagination(&store, &LocalInventory::new(store.clone())).await;
    let store = open("delete");
    check_bulk_delete_with_missing_keys(&store, &StoreDeleter::new(store.clone())).await;
    let store = open("create");
    check_create_only(&store).await;
    let store = open("writer");
    check_writer(&store).await;
}
