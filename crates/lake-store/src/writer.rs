//! The managed object writer: the only way objects enter `objects/`.
//!
//! Each upload gets a fresh key `objects/<ULID>/<name>` (ULID minted when the upload starts,
//! see [`crate::keys`]), streams its bytes to the store while computing SHA-256, and returns
//! the identity a row should reference. Objects are immutable: nothing rewrites a key.

use crate::error::StoreError;
use crate::keys::mint_key;
use crate::store::LakeStore;
use chrono::{DateTime, Utc};
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Bytes buffered before an upload switches to a multipart upload (also the part size): 8 MiB.
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// A managed object as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedObject {
    /// Key relative to the lake root (`objects/<ULID>/<name>`): the `uri` rows store.
    pub key: String,
    /// SHA-256 of the bytes.
    pub sha256: [u8; 32],
    /// Size in bytes.
    pub size: u64,
    /// The store's `last_modified` of the object, UTC.
    pub last_modified: DateTime<Utc>,
}

impl ManagedObject {
    /// The identity a row referencing this object carries.
    pub fn identity(&self) -> lake_common::ObjectIdentity {
        lake_common::ObjectIdentity::new(self.key.clone(), self.sha256, self.size)
    }
}

/// Uploads managed objects into a lake.
#[derive(Debug, Clone)]
pub struct ManagedObjectWriter {
    store: LakeStore,
}

impl ManagedObjectWriter {
    /// A writer for `store`.
    pub fn new(store: LakeStore) -> Self {
        Self { store }
    }

    /// Streams `reader` to a new managed key derived from `name`.
    ///
    /// # Errors
    /// [`StoreError::Io`] when `reader` fails, [`StoreError::Storage`] when the store does;
    /// a failed multipart upload is aborted (a failed single put writes nothing).
    pub async fn upload(&self, name: &str, mut reader: impl AsyncRead + Unpin) -> Result<ManagedObject, StoreError> {
        let (key, _) = mint_key(name);
        let path = self.store.path(&key);
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut first = Vec::with_capacity(64 * 1024);
        let io = |e: std::io::Error| StoreError::Io { path: name.to_string(), source: e };
        // Read up to one part; small objects go in one PUT.
        let mut buf = vec![0u8; 1024 * 1024];
        loop {
            let n = reader.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            size += n as u64;
            first.extend_from_slice(&buf[..n]);
            if first.len() >= PART_SIZE {
                break;
            }
        }
        if first.len() < PART_SIZE {
            self.store
                .object_store()
                .put(&path, PutPayload::from(first))
                .await
                .map_err(|e| StoreError::storage(&key, e))?;
        } else {
            let upload =
                self.store.object_store().put_multipart(&path).await.map_err(|e| StoreError::storage(&key, e))?;
            let mut write = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            write.write(&first);
            drop(first);
            crate::failpoint::crash("upload.mid_multipart");
            let result: Result<(), StoreError> = async {
                loop {
                    let n = reader.read(&mut buf).await.map_err(io)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                    size += n as u64;
                    write.wait_for_capacity(4).await.map_err(|e| StoreError::storage(&key, e))?;
                    write.write(&buf[..n]);
                }
                Ok(())
            }
            .await;
            match result {
                Ok(()) => {
                    write.finish().await.map_err(|e| StoreError::storage(&key, e))?;
                }
                Err(e) => {
                    let _ = write.abort().await;
                    return Err(e);
                }
            }
        }
        crate::failpoint::hit("append.after_upload")?;
        let meta = self
            .store
            .head(&key)
            .await?
            .ok_or_else(|| StoreError::storage(&key, "object missing right after upload"))?;
        if meta.size != size {
            return Err(StoreError::storage(&key, format!("store reports {} bytes after writing {size}", meta.size)));
        }
        Ok(ManagedObject { key, sha256: hasher.finalize().into(), size, last_modified: meta.last_modified })
    }

    /// Copies the managed object `source` to a fresh key (a new ULID, same name) with the store's
    /// server-side copy (S3 CopyObject; a file copy locally), so an old object can be referenced
    /// again without tripping the publication guard ([`crate::guard`]). The copy keeps the
    /// source's SHA-256; its size is checked against the store.
    ///
    /// # Errors
    /// [`StoreError::Storage`] when `source` is not a managed key, does not exist, or its size
    /// differs from the identity.
    pub async fn copy_fresh(&self, source: &lake_common::ObjectIdentity) -> Result<ManagedObject, StoreError> {
        let managed = crate::keys::parse_managed_key(&source.uri).ok_or_else(|| {
            StoreError::storage(
                &source.uri,
                "not a managed key (objects/<ULID>/<name>); only managed objects are copied",
            )
        })?;
        let (key, _) = mint_key(&managed.name);
        self.store
            .object_store()
            .copy(&self.store.path(&source.uri), &self.store.path(&key))
            .await
            .map_err(|e| StoreError::storage(&source.uri, e))?;
        let meta = self
            .store
            .head(&key)
            .await?
            .ok_or_else(|| StoreError::storage(&key, "copy missing right after copying"))?;
        if meta.size != source.size {
            let _ = self.store.delete(&key).await;
            return Err(StoreError::storage(
                &source.uri,
                format!("the object has {} bytes, not the {} its identity records", meta.size, source.size),
            ));
        }
        Ok(ManagedObject { key, sha256: source.sha256, size: source.size, last_modified: meta.last_modified })
    }

    /// Uploads the local file at `path`, naming the key after the file name.
    ///
    /// # Errors
    /// As [`ManagedObjectWriter::upload`].
    pub async fn upload_file(&self, path: &std::path::Path) -> Result<ManagedObject, StoreError> {
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|e| StoreError::Io { path: path.display().to_string(), source: e })?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("object");
        self.upload(name, file).await
    }
}
