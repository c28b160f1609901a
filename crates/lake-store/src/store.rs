//! [`LakeStore`]: a lake root opened as an `object_store` store, with keys relative to the root.
//!
//! Size: about 630 lines, no unit tests; some 25 short methods of `LakeStore` (reads, create-only
//! and streamed writes, deletes, listings), each mapping local and S3 errors alike, and the `s3`
//! module (about 150 lines) resolving the S3 settings every path to the store shares.

use crate::error::StoreError;
use bytes::Bytes;
use futures::TryStreamExt;
use lake_common::LakeRootUri;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::collections::HashMap;
use std::sync::Arc;

/// The outcome of a create-only write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The document was created.
    Created,
    /// A document already existed at the key; its bytes.
    Exists(Bytes),
}

/// A lake root opened for reading and writing.
///
/// Local roots use `LocalFileSystem` (create-only writes are atomic hard links); `s3://` roots
/// use `AmazonS3` configured by one [`S3Settings`] (the standard `AWS_*` environment variables
/// overlaid by the storage options the root was opened with), resolved when it is opened.
#[derive(Debug, Clone)]
pub struct LakeStore {
    root: LakeRootUri,
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    local_dir: Option<std::path::PathBuf>,
    storage_options: HashMap<String, String>,
    s3: Option<Arc<object_store::aws::AmazonS3>>,
    s3_requests: Option<Arc<crate::s3_requests::S3Requests>>,
    s3_settings: Option<Arc<s3::S3Settings>>,
}

pub use s3::S3Settings;

impl LakeStore {
    /// Opens `root`: a local path (relative paths are made absolute; the folder is created),
    /// `file:///abs/path`, or `s3://bucket/prefix`.
    ///
    /// # Errors
    /// [`StoreError::Root`] when the root cannot be parsed or opened.
    pub fn open(root: &str) -> Result<Self, StoreError> {
        Self::open_with_options(root, &HashMap::new())
    }

    /// Opens `root` as [`LakeStore::open`] does, with S3 settings `options` (object_store's
    /// `AmazonS3ConfigKey` names, e.g. `aws_endpoint`, `aws_access_key_id`, `aws_region`,
    /// `allow_http`, or their environment spellings such as `AWS_ENDPOINT_URL`) taking
    /// precedence over the `AWS_*` environment, like pylance's `storage_options`. Lance reads the
    /// same settings ([`LakeStore::storage_options`]). Ignored for local roots.
    ///
    /// # Errors
    /// [`StoreError::Root`] when the root cannot be parsed or opened, or an option's name is
    /// not an S3 setting.
    pub fn open_with_options(root: &str, options: &HashMap<String, String>) -> Result<Self, StoreError> {
        let root_err = |m: String| StoreError::Root { root: root.to_string(), message: m };
        let is_url = root.contains("://");
        if !is_url || root.starts_with("file://") {
            let path = if is_url {
                let url = url::Url::parse(root).map_err(|e| root_err(e.to_string()))?;
                url.to_file_path().map_err(|_| root_err("not a local file URL".into()))?
            } else {
                let p = std::path::PathBuf::from(root);
                if p.is_absolute() {
                    p
                } else {
                    std::env::current_dir().map_err(|e| root_err(e.to_string()))?.join(p)
                }
            };
            std::fs::create_dir_all(&path).map_err(|e| root_err(format!("cannot create folder: {e}")))?;
            let given = path.clone();
            let path = path.canonicalize().map_err(|e| root_err(e.to_string()))?;
            let text = path.to_str().ok_or_else(|| root_err("path is not UTF-8".into()))?;
            // References may spell the root as it was given (through a symbolic link) or reach
            // it by another route (a link, a bind mount): all normalise to the same keys.
            let mut uri = LakeRootUri::parse(text).map_err(|e| root_err(e.to_string()))?;
            // (A given path with `..` in it is no spelling a reference could use textually; the
            // route resolution still reaches it.)
            if let Some(given) = given.to_str().filter(|g| *g != text) {
                uri = uri.clone().with_alias(given).unwrap_or(uri);
            }
            let uri = uri.bind_local_folder(&path).map_err(|e| root_err(e.to_string()))?;
            let store = LocalFileSystem::new_with_prefix(&path).map_err(|e| root_err(e.to_string()))?;
            return Ok(Self {
                root: uri,
                store: Arc::new(store),
                prefix: Path::default(),
                local_dir: Some(path),
                storage_options: HashMap::new(),
                s3: None,
                s3_requests: None,
                s3_settings: None,
            });
        }
        let uri = LakeRootUri::parse(root).map_err(|e| root_err(e.to_string()))?;
        crate::store::s3::open(uri, options).map_err(root_err)
    }

    /// The normalised root URI.
    pub fn root(&self) -> &LakeRootUri {
        &self.root
    }

    /// The root as the operator would type it: the folder path for local roots, the URI otherwise.
    pub fn display_root(&self) -> String {
        match &self.local_dir {
            Some(p) => p.display().to_string(),
            None => self.root.to_string(),
        }
    }

    /// The local folder of a local root.
    pub fn local_dir(&self) -> Option<&std::path::Path> {
        self.local_dir.as_deref()
    }

    /// The S3 client of an `s3://` root (for S3-only requests such as paginated listings).
    pub fn s3(&self) -> Option<&Arc<object_store::aws::AmazonS3>> {
        self.s3.as_ref()
    }

    /// Raw signed requests to an `s3://` root's bucket (exact listings that keep trailing
    /// slashes, DeleteObjects with per-key answers, incomplete multipart uploads), with the same
    /// configuration as [`LakeStore::s3`].
    pub fn s3_requests(&self) -> Option<&crate::s3_requests::S3Requests> {
        self.s3_requests.as_deref()
    }

    /// The resolved S3 configuration of an `s3://` root ([`S3Settings`]); `None` for a local root.
    pub fn s3_settings(&self) -> Option<&S3Settings> {
        self.s3_settings.as_deref()
    }

    /// Opens another location for this lake's use (an S3 checkpoint's folder, an S3 Inventory
    /// report's bucket): an `s3://` `root` with this lake's [`S3Settings`] when the lake is on S3
    /// (the endpoint, region and credentials the lake was opened with, not the environment of
    /// the moment), otherwise as [`LakeStore::open`].
    ///
    /// # Errors
    /// As [`LakeStore::open`].
    pub fn open_related(&self, root: &str) -> Result<LakeStore, StoreError> {
        let root_err = |m: String| StoreError::Root { root: root.to_string(), message: m };
        match &self.s3_settings {
            Some(settings) if root.contains("://") && !root.starts_with("file://") => {
                let uri = LakeRootUri::parse(root).map_err(|e| root_err(e.to_string()))?;
                s3::open_resolved(uri, settings.clone()).map_err(root_err)
            }
            _ => Self::open(root),
        }
    }

    /// The store path of the root itself (empty for local roots).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The underlying store (paths include the root prefix: use [`LakeStore::path`]).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// The same root with its object_store requests going through `wrap(store)` (a wrapper that
    /// counts, delays or fails some requests: for tests of what a failing store leaves, and for
    /// instrumentation). The raw S3 requests ([`LakeStore::s3_requests`], [`LakeStore::s3`]) and
    /// Lance's own access ([`LakeStore::storage_options`]) are not wrapped.
    pub fn wrapped(mut self, wrap: impl FnOnce(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>) -> Self {
        self.store = wrap(self.store);
        self
    }

    /// Options for Lance to reach the same storage (object_store configuration keys).
    pub fn storage_options(&self) -> &HashMap<String, String> {
        &self.storage_options
    }

    /// The store path of a key relative to the root.
    pub fn path(&self, key: &str) -> Path {
        if self.prefix.as_ref().is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// The key relative to the root of a store path; `None` when outside the root.
    pub fn key_of(&self, path: &Path) -> Option<String> {
        let p = path.as_ref();
        if self.prefix.as_ref().is_empty() {
            return Some(p.to_string());
        }
        p.strip_prefix(self.prefix.as_ref())?.strip_prefix('/').map(str::to_string)
    }

    /// The URI Lance opens for a key: an absolute local path, or `s3://bucket/prefix/key`.
    pub fn uri_of(&self, key: &str) -> String {
        match &self.local_dir {
            Some(dir) => dir.join(key).display().to_string(),
            None => self.root.join(key),
        }
    }

    /// Reads a document; `None` when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Storage`] for any other failure.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        match self.store.get(&self.path(key)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| StoreError::storage(key, e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// The bytes of an object as a stream of chunks, as the backend delivers them (object_store's
    /// `GetResult::into_stream`: the local backend reads the file in chunks, S3 streams the
    /// response body), so a reader holds one chunk at a time; `None` when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Storage`] for any other failure, at the request or for a chunk.
    pub async fn get_stream(
        &self,
        key: &str,
    ) -> Result<Option<futures::stream::BoxStream<'static, Result<Bytes, StoreError>>>, StoreError> {
        use futures::StreamExt;
        match self.store.get(&self.path(key)).await {
            Ok(r) => {
                let key = key.to_string();
                Ok(Some(r.into_stream().map(move |chunk| chunk.map_err(|e| StoreError::storage(&key, e))).boxed()))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// The bytes `range` (offsets in bytes, end exclusive) of an object (an HTTP ranged GET on
    /// S3); `None` when the object does not exist.
    ///
    /// # Errors
    /// [`StoreError::Storage`] for any other failure (a range past the object's end
    /// included).
    pub async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Option<Bytes>, StoreError> {
        match object_store::ObjectStoreExt::get_range(self.store.as_ref(), &self.path(key), range).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// Metadata of an object; `None` when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Storage`] for any other failure.
    pub async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, StoreError> {
        match self.store.head(&self.path(key)).await {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// Writes `bytes` at `key` only if nothing is there (S3 `If-None-Match: *`; a hard link
    /// locally). Returns the existing bytes otherwise.
    ///
    /// # Errors
    /// [`StoreError::Storage`] when the write fails for another reason.
    pub async fn put_create(&self, key: &str, bytes: impl Into<Bytes>) -> Result<CreateOutcome, StoreError> {
        let bytes: Bytes = bytes.into();
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&self.path(key), PutPayload::from(bytes), opts).await {
            Ok(_) => Ok(CreateOutcome::Created),
            Err(object_store::Error::AlreadyExists { .. }) | Err(object_store::Error::Precondition { .. }) => {
                match self.get(key).await? {
                    Some(existing) => Ok(CreateOutcome::Exists(existing)),
                    None => Err(StoreError::storage(key, "create-only write refused but no object found")),
                }
            }
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// Checks, once per store and process, that the store refuses a create-only write over an
    /// existing key: the property every lake document written create-only (registry documents,
    /// journal entries, write intents, revocation markers) and Lance's own manifests rely on
    /// (docs/protocol.md). A probe `_lake/clock/<ULID>` is written create-only twice and must be
    /// refused the second time, then deleted (a probe left by a killed process is GC's own
    /// garbage, like a clock probe). The verdict is cached per root and S3 endpoint for the
    /// process; a storage failure is not cached.
    ///
    /// S3-compatible stores without conditional writes accept `If-None-Match: *` and overwrite:
    /// on such a store concurrent writers would silently replace each other's versions.
    ///
    /// # Errors
    /// [`StoreError::Capability`] when the second write
    /// was accepted; [`StoreError::Storage`] when the probe cannot be written or read.
    pub async fn require_create_only(&self) -> Result<(), StoreError> {
        use std::sync::{Mutex, OnceLock};
        static VERDICTS: OnceLock<Mutex<HashMap<String, bool>>> = OnceLock::new();
        let endpoint = self
            .s3_settings
            .as_ref()
            .and_then(|s| s.get(object_store::aws::AmazonS3ConfigKey::Endpoint))
            .unwrap_or_default();
        let cache_key = format!("{} {endpoint}", self.root());
        let verdicts = VERDICTS.get_or_init(|| Mutex::new(HashMap::new()));
        let known = verdicts.lock().map(|v| v.get(&cache_key).copied()).unwrap_or(None);
        let honoured = match known {
            Some(honoured) => honoured,
            None => {
                let honoured = self.probe_create_only().await?;
                if let Ok(mut v) = verdicts.lock() {
                    v.insert(cache_key, honoured);
                }
                honoured
            }
        };
        if honoured {
            return Ok(());
        }
        Err(StoreError::Capability {
            message: format!(
                "the store at `{}` does not refuse a create-only write over an existing key (a PUT with `If-None-Match: *`, object_store's `PutMode::Create`): it overwrote a probe object. lake's registry, journal and write intents, and Lance's manifests, rely on create-only writes; on this store concurrent writers would replace each other's versions and lose rows. Nothing was written. Use a store with conditional writes (Amazon S3, MinIO, LocalStack; enable them if the store has a setting), or one writer process at a time on a local folder",
                self.display_root()
            ),
        })
    }

    /// Writes a probe create-only twice; true when the second write was refused.
    async fn probe_create_only(&self) -> Result<bool, StoreError> {
        let key = format!("{}/{}", crate::layout::CLOCK_PREFIX, ulid::Ulid::new());
        let probe_folder = self.local_dir().map(|dir| dir.join(crate::layout::CLOCK_PREFIX)).filter(|f| !f.exists());
        let first = self.put_create(&key, Bytes::from_static(b"create-only probe 1")).await?;
        let second = self.put_create(&key, Bytes::from_static(b"create-only probe 2")).await;
        // The first write counts as created when the store holds its bytes (its answer may have
        // been lost and its retry refused: a conditional PUT retried after a 5xx meets itself).
        let created = match &first {
            CreateOutcome::Created => true,
            CreateOutcome::Exists(existing) => existing.as_ref() == b"create-only probe 1",
        };
        let honoured = match &second {
            Ok(CreateOutcome::Exists(existing)) => created && existing.as_ref() == b"create-only probe 1",
            _ => false,
        };
        if let Err(e) = self.delete(&key).await {
            tracing::warn!(probe = %key, "the create-only probe could not be deleted ({e}); a later GC apply collects it");
        }
        if let Some(folder) = probe_folder {
            let _ = std::fs::remove_dir(folder);
        }
        second?;
        Ok(honoured)
    }

    /// Downloads the object at `key` into a new local temporary file, streaming (memory: one
    /// chunk of the response); `None` when it does not exist.
    ///
    /// # Errors
    /// [`StoreError::Storage`] for a failed request, [`StoreError::Io`] for the local file.
    pub async fn get_to_file(&self, key: &str) -> Result<Option<tempfile::NamedTempFile>, StoreError> {
        use futures::StreamExt;
        use std::io::Write;
        let result = match self.store.get(&self.path(key)).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(StoreError::storage(key, e)),
        };
        let tmp_dir = std::env::temp_dir().display().to_string();
        let io = |source| StoreError::Io { path: tmp_dir.clone(), source };
        let mut file = tempfile::Builder::new().prefix("lake-download-").tempfile().map_err(io)?;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| StoreError::storage(key, e))?;
            file.write_all(&chunk).map_err(io)?;
        }
        file.flush().map_err(io)?;
        Ok(Some(file))
    }

    /// Uploads the local file `source` to `key`, replacing what is there, streaming (a
    /// multipart upload past object_store's `BufWriter` capacity). The object appears whole or
    /// not at all (S3 publishes a multipart upload when it is completed).
    ///
    /// # Errors
    /// [`StoreError::Io`] when the file cannot be opened, [`StoreError::Storage`] when
    /// reading it or uploading fails (the upload is aborted).
    pub async fn put_file(&self, key: &str, source: &std::path::Path) -> Result<(), StoreError> {
        use tokio::io::AsyncWriteExt;
        let mut file = tokio::fs::File::open(source)
            .await
            .map_err(|e| StoreError::Io { path: source.display().to_string(), source: e })?;
        let mut writer = object_store::buffered::BufWriter::new(self.store.clone(), self.path(key));
        if let Err(e) = tokio::io::copy(&mut file, &mut writer).await {
            let _ = writer.abort().await;
            return Err(StoreError::storage(key, e));
        }
        // A failed shutdown cannot be aborted (object_store's `BufWriter::abort` panics once
        // shut down); a multipart upload it leaves behind is S3's to expire (or, under the root,
        // GC's own garbage).
        writer.shutdown().await.map_err(|e| StoreError::storage(key, e))
    }

    /// Writes `bytes` at `key`, replacing what is there.
    ///
    /// # Errors
    /// [`StoreError::Storage`].
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.store.put(&self.path(key), PutPayload::from(bytes)).await.map_err(|e| StoreError::storage(key, e))?;
        Ok(())
    }

    /// Deletes one object; a missing object is not an error. On S3 it is a DeleteObjects request
    /// read by [`crate::s3_requests`] (object_store's reader of that answer panics on a key the
    /// request did not name), unless the settings disable bulk deletes.
    ///
    /// # Errors
    /// [`StoreError::Storage`], on S3 when the answer names an error for the key or does not
    /// mention it.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        use crate::s3_requests::DeleteAnswer;
        use object_store::aws::AmazonS3ConfigKey;
        let bulk = self.s3_settings.as_ref().is_some_and(|s| !s.is_true(AmazonS3ConfigKey::DisableBulkDelete));
        if let (Some(requests), true) = (&self.s3_requests, bulk) {
            let full = self.path(key).to_string();
            return match requests.delete_objects(std::slice::from_ref(&full)).await?.pop() {
                Some(DeleteAnswer::Removed | DeleteAnswer::Gone | DeleteAnswer::Missing) => Ok(()),
                // (The wording of object_store's own error, which `is_transient_error` classifies
                // by its code: `SlowDown` is transient, `AccessDenied` is not.)
                Some(DeleteAnswer::Error { code, message }) => Err(StoreError::storage(
                    key,
                    format!("DeleteObjects request failed for key {full}: {message} (code: {code})"),
                )),
                Some(DeleteAnswer::Unanswered) | None => {
                    Err(StoreError::storage(key, "DeleteObjects: the answer did not mention the key"))
                }
            };
        }
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(StoreError::storage(key, e)),
        }
    }

    /// Every object under the folder `prefix` (recursive, any order), keys relative to the root.
    /// For small folders (registry, journal); the managed prefix is listed by an inventory. On
    /// S3 the keys are exact ([`crate::s3_requests`]): a folder marker keeps its trailing `/`
    /// (object_store would drop it, and then name an object that does not exist); its
    /// `ObjectMeta::location` cannot hold the slash, so use the key.
    ///
    /// # Errors
    /// [`StoreError::Storage`].
    pub async fn list_all(&self, prefix: &str) -> Result<Vec<(String, ObjectMeta)>, StoreError> {
        if let Some(requests) = &self.s3_requests {
            let root = self.prefix.to_string();
            let full = |key: &str| if root.is_empty() { key.to_string() } else { format!("{root}/{key}") };
            let prefix = prefix.trim_matches('/');
            let folder = match (root.is_empty(), prefix.is_empty()) {
                (true, true) => String::new(),
                (false, true) => format!("{root}/"),
                _ => format!("{}/", full(prefix)),
            };
            let mut out = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = requests.list_objects_v2(&folder, after.as_deref(), 1000).await?;
                after = page.objects.last().map(|o| o.key.clone());
                for o in page.objects {
                    let key = if root.is_empty() { o.key.clone() } else { o.key[root.len() + 1..].to_string() };
                    let location = self.path(&key);
                    out.push((
                        key,
                        ObjectMeta {
                            location,
                            last_modified: o.last_modified,
                            size: o.size,
                            e_tag: o.e_tag,
                            version: None,
                        },
                    ));
                }
                if !page.truncated || after.is_none() {
                    return Ok(out);
                }
            }
        }
        let path = self.path(prefix);
        let metas: Vec<ObjectMeta> =
            self.store.list(Some(&path)).try_collect().await.map_err(|e| StoreError::storage(prefix, e))?;
        Ok(metas.into_iter().filter_map(|m| self.key_of(&m.location).map(|k| (k, m))).collect())
    }

    /// Whether anything but folders lies below the folder `prefix`: a file, a symbolic link, any
    /// other entry (local folders are walked without following links), or on S3 any key, folder
    /// markers included. `false` for a folder that does not exist.
    ///
    /// # Errors
    /// [`StoreError::Io`] or [`StoreError::Storage`] when the folder cannot be read.
    pub async fn holds_anything_below(&self, prefix: &str) -> Result<bool, StoreError> {
        match &self.local_dir {
            Some(dir) => {
                let folder = dir.join(prefix);
                holds_anything_local(&folder)
                    .map_err(|source| StoreError::Io { path: folder.display().to_string(), source })
            }
            None => {
                let path = self.path(prefix);
                let first = self.store.list(Some(&path)).try_next().await;
                first.map(|o| o.is_some()).map_err(|e| StoreError::storage(prefix, e))
            }
        }
    }

    /// The immediate sub-folders and objects of the folder `prefix`, keys relative to the root,
    /// each list sorted by key.
    ///
    /// # Errors
    /// [`StoreError::Storage`].
    pub async fn list_dir(&self, prefix: &str) -> Result<(Vec<String>, Vec<ObjectMeta>), StoreError> {
        let path = self.path(prefix);
        let result = self.store.list_with_delimiter(Some(&path)).await.map_err(|e| StoreError::storage(prefix, e))?;
        let mut dirs: Vec<String> = result.common_prefixes.iter().filter_map(|p| self.key_of(p)).collect();
        dirs.sort();
        let mut objects = result.objects;
        objects.sort_by(|a, b| a.location.as_ref().cmp(b.location.as_ref()));
        Ok((dirs, objects))
    }
}

/// Whether the local `folder` holds anything but (empty) folders; links are not followed.
fn holds_anything_local(folder: &std::path::Path) -> std::io::Result<bool> {
    let entries = match std::fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() || holds_anything_local(&entry.path())? {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(crate) mod s3 {
    //! `s3://` roots, configured by one [`S3Settings`]: the standard `AWS_*` environment
    //! variables and, over them, the storage options given to [`LakeStore::open_with_options`].
    use super::LakeStore;
    use lake_common::LakeRootUri;
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    use object_store::path::Path;
    use object_store::ClientOptions;
    use std::collections::HashMap;
    use std::sync::Arc;

    /// The S3 configuration of a lake, resolved once when the lake is opened: every `AWS_*`
    /// environment variable that names an object_store setting (read as
    /// `AmazonS3Builder::from_env` reads them), then the storage options given to
    /// [`LakeStore::open_with_options`], which take precedence. Every path to the store takes its
    /// settings from here, never from the environment again: object_store's `AmazonS3`, the raw
    /// requests ([`crate::s3_requests`]: listings, DeleteObjects, multipart uploads), Lance
    /// ([`LakeStore::storage_options`]), and the other S3 locations opened for the lake
    /// ([`LakeStore::open_related`]: an S3 checkpoint, an S3 Inventory report's bucket). The
    /// bucket is never a setting: it is the root's.
    #[derive(Debug, Clone, Default)]
    pub struct S3Settings {
        /// Each setting once, in the order it was first given.
        entries: Vec<(AmazonS3ConfigKey, String)>,
    }

    impl S3Settings {
        /// The `AWS_*` environment overlaid by `given` (object_store's names, e.g.
        /// `aws_endpoint`, or their environment spellings, e.g. `AWS_ENDPOINT_URL`).
        ///
        /// # Errors
        /// A message naming an option that is not an S3 setting, or names a bucket.
        pub fn resolve(given: &HashMap<String, String>) -> Result<Self, String> {
            let mut settings = Self::default();
            for (name, value) in std::env::vars_os() {
                let (Some(name), Some(value)) = (name.to_str(), value.to_str()) else { continue };
                if !name.starts_with("AWS_") {
                    continue;
                }
                match name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    Ok(AmazonS3ConfigKey::Bucket) | Err(_) => {}
                    Ok(key) => settings.set(key, value),
                }
            }
            let mut names: Vec<&String> = given.keys().collect();
            names.sort();
            for name in names {
                let value = given.get(name).map(String::as_str).unwrap_or_default();
                settings.set(config_key(name)?, value);
            }
            Ok(settings)
        }

        fn set(&mut self, key: AmazonS3ConfigKey, value: &str) {
            match self.entries.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value.to_string(),
                None => self.entries.push((key, value.to_string())),
            }
        }

        /// An `AmazonS3Builder` for `bucket` with every setting.
        pub fn builder(&self, bucket: &str) -> AmazonS3Builder {
            let builder = self.entries.iter().fold(AmazonS3Builder::new(), |b, (k, v)| b.with_config(*k, v));
            builder.with_bucket_name(bucket)
        }

        /// The value object_store uses for `key` (a setting and its aliases, e.g. `Region` falls
        /// back to `DefaultRegion`), when not empty.
        pub fn get(&self, key: AmazonS3ConfigKey) -> Option<String> {
            self.builder("").get_config_value(&key).filter(|v| !v.is_empty())
        }

        /// Whether `key` is set to `true` (any letter case).
        pub fn is_true(&self, key: AmazonS3ConfigKey) -> bool {
            self.get(key).is_some_and(|v| v.eq_ignore_ascii_case("true"))
        }

        /// The HTTP client options among the settings (`allow_http`, timeouts, proxies, ...).
        pub fn client_options(&self) -> ClientOptions {
            self.entries.iter().fold(ClientOptions::new(), |options, (key, value)| match key {
                AmazonS3ConfigKey::Client(key) => options.with_config(*key, value),
                _ => options,
            })
        }

        /// The settings as storage options for Lance (object_store's names).
        pub fn storage_options(&self) -> HashMap<String, String> {
            self.entries.iter().map(|(k, v)| (k.as_ref().to_string(), v.clone())).collect()
        }
    }

    /// An S3-compatible server's endpoint names the root's objects too: path style
    /// (`http://host:port/bucket/prefix/key`) and virtual-hosted style
    /// (`http://bucket.host:port/prefix/key`).
    fn with_endpoint_aliases(uri: LakeRootUri, endpoint: Option<&str>) -> Result<LakeRootUri, String> {
        let Some(endpoint) = endpoint.map(|e| e.trim_end_matches('/')) else { return Ok(uri) };
        let bad = |e: lake_common::UriError| format!("AWS_ENDPOINT_URL `{endpoint}`: {e}");
        let path = uri.path();
        let tail = if path.is_empty() { String::new() } else { format!("/{path}") };
        let bucket = uri.authority().to_string();
        let mut uri = uri.with_alias(&format!("{endpoint}/{bucket}{tail}")).map_err(bad)?;
        // Virtual-hosted style needs a DNS name: an IP address (`127.0.0.1`, `[::1]`) takes
        // path-style requests only.
        let dns = url::Url::parse(endpoint).ok().is_some_and(|u| matches!(u.host(), Some(url::Host::Domain(_))));
        if let (true, Some((scheme, host))) = (dns, endpoint.split_once("://")) {
            uri = uri.with_alias(&format!("{scheme}://{bucket}.{host}{tail}")).map_err(bad)?;
        }
        Ok(uri)
    }

    /// The object_store key of an option named by its object_store name or its environment
    /// spelling (`AWS_ENDPOINT_URL` parses as `aws_endpoint_url`, an alias of `aws_endpoint`).
    /// The bucket is the root's: an option naming another is refused.
    fn config_key(name: &str) -> Result<AmazonS3ConfigKey, String> {
        let key = name.to_ascii_lowercase().parse::<AmazonS3ConfigKey>().map_err(|_| {
            format!("`{name}` is not an S3 storage option; use object_store's names (aws_endpoint, aws_access_key_id, aws_secret_access_key, aws_session_token, aws_region, allow_http, ...)")
        })?;
        if key == AmazonS3ConfigKey::Bucket {
            return Err(format!(
                "the storage option `{name}` would name another bucket; the bucket is the root's (s3://BUCKET/prefix)"
            ));
        }
        Ok(key)
    }

    /// Opens the `s3://` root `uri` with the environment overlaid by `given` ([`S3Settings`]).
    pub(crate) fn open(uri: LakeRootUri, given: &HashMap<String, String>) -> Result<LakeStore, String> {
        open_resolved(uri, Arc::new(S3Settings::resolve(given)?))
    }

    /// Opens the `s3://` root `uri` with `settings`, and nothing else.
    pub(crate) fn open_resolved(uri: LakeRootUri, settings: Arc<S3Settings>) -> Result<LakeStore, String> {
        let endpoint =
            settings.get(AmazonS3ConfigKey::S3Endpoint).or_else(|| settings.get(AmazonS3ConfigKey::Endpoint));
        let uri = with_endpoint_aliases(uri, endpoint.as_deref())?;
        let store = Arc::new(
            settings
                .builder(uri.authority())
                .build()
                .map_err(|e| format!("cannot configure S3 from the storage options and the AWS_* environment: {e}"))?,
        );
        let requests =
            crate::s3_requests::S3Requests::new(uri.authority(), &settings, &store).map_err(|e| e.to_string())?;
        Ok(LakeStore {
            prefix: Path::from(uri.path()),
            root: uri,
            store: store.clone(),
            local_dir: None,
            storage_options: settings.storage_options(),
            s3: Some(store),
            s3_requests: Some(Arc::new(requests)),
            s3_settings: Some(settings),
        })
    }
}
