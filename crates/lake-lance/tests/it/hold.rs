//! A Lance object-store wrapper that holds manifest writes (`_versions/*.manifest`) until the
//! test releases them: the stand-in, on a local root, for a PUT that a slow network holds past
//! the writer's deadline.
//!
//! A held write runs in a task of its own, exactly as the blocking thread of a local rename or an
//! HTTP request already sent keeps going when its caller stops waiting: the manifest lands when
//! (and if) the test releases it. The caller gets an error at once while the write stays held
//! ([`Mode::FailCaller`]: a response lost on the way back, a client-side timeout): what a
//! timeout does, without waiting for one. Nothing here depends on time: the test
//! waits for a write to be held ([`ManifestHold::wait_held`]) and releases it
//! ([`ManifestHold::release`]) explicitly.

use async_trait::async_trait;
use futures::stream::BoxStream;
use lance::io::WrappingObjectStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result,
};
use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, Notify};

/// One held manifest write.
struct Held {
    path: String,
    release: oneshot::Sender<()>,
    landed: oneshot::Receiver<bool>,
}

/// What happens to a manifest write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Written at once.
    #[default]
    Off,
    /// Held; the caller gets an error at once.
    FailCaller,
    /// The next manifest write only, as [`Mode::FailCaller`]; then [`Mode::Off`].
    FailCallerOnce,
    /// Held; the caller waits until the test releases it (a writer paused mid-commit).
    Hold,
}

#[derive(Default)]
struct State {
    mode: Mode,
    held: Vec<Held>,
    /// Every manifest write the wrapper has seen held, in order (paths).
    seen: Vec<String>,
}

/// Holds manifest writes while [`ManifestHold::hold`] is on (see the module documentation).
#[derive(Default)]
pub(crate) struct ManifestHold {
    state: Mutex<State>,
    arrived: Notify,
}

impl std::fmt::Debug for ManifestHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ManifestHold")
    }
}

impl ManifestHold {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Sets the mode for manifest writes from now on (those held stay held).
    pub(crate) fn set(&self, mode: Mode) {
        self.state.lock().unwrap().mode = mode;
    }

    /// Waits until at least `n` manifest writes are held (a generous bound guards against a
    /// test that never gets there: it fails instead of hanging).
    pub(crate) async fn wait_held(&self, n: usize) {
        let waited = tokio::time::timeout(std::time::Duration::from_secs(120), async {
            loop {
                let notified = self.arrived.notified();
                if self.state.lock().unwrap().held.len() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no manifest write was held within 120 s");
    }

    /// Paths of the writes held now.
    pub(crate) fn held(&self) -> Vec<String> {
        self.state.lock().unwrap().held.iter().map(|h| h.path.clone()).collect()
    }

    /// Releases the `i`-th held write and waits until it completed: true when the store
    /// accepted it (the manifest landed), false when it was refused (a create-only write whose
    /// version another commit took meanwhile).
    pub(crate) async fn release(&self, i: usize) -> bool {
        let held = self.state.lock().unwrap().held.remove(i);
        let _ = held.release.send(());
        held.landed.await.unwrap_or(false)
    }

    /// Releases every held write, oldest first; returns whether each landed.
    pub(crate) async fn release_all(&self) -> Vec<bool> {
        let mut out = Vec::new();
        while !self.held().is_empty() {
            out.push(self.release(0).await);
        }
        out
    }
}

/// The wrapper given to the engine (`LanceEngine::with_object_store_wrapper`).
#[derive(Debug, Clone)]
pub(crate) struct HoldWrapper(pub Arc<ManifestHold>);

impl WrappingObjectStore for HoldWrapper {
    fn wrap(&self, _store_prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(HoldingStore { inner: original, hold: self.0.clone() })
    }

    /// Listings are only observed (writes are held): the pushdown is kept.
    fn wrap_paginated(
        &self,
        _store_prefix: &str,
        original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        Some(original)
    }
}

#[derive(Debug)]
struct HoldingStore {
    inner: Arc<dyn ObjectStore>,
    hold: Arc<ManifestHold>,
}

impl std::fmt::Display for HoldingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HoldingStore({})", self.inner)
    }
}

fn is_manifest(path: &Path) -> bool {
    let p = path.as_ref();
    p.contains("/_versions/") && p.ends_with(".manifest")
}

#[async_trait]
impl ObjectStore for HoldingStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> Result<PutResult> {
        let held = {
            let mut state = self.hold.state.lock().unwrap();
            let mode = state.mode;
            if mode == Mode::FailCallerOnce && is_manifest(location) {
                state.mode = Mode::Off;
            }
            (mode != Mode::Off && is_manifest(location)).then(|| {
                let (release, released) = oneshot::channel::<()>();
                let (landed_tx, landed) = oneshot::channel::<bool>();
                state.held.push(Held { path: location.to_string(), release, landed });
                state.seen.push(location.to_string());
                (released, landed_tx, mode)
            })
        };
        let Some((released, landed_tx, mode)) = held else {
            return self.inner.put_opts(location, payload, opts).await;
        };
        self.hold.arrived.notify_waiters();
        let (result_tx, result_rx) = oneshot::channel();
        let inner = self.inner.clone();
        let location = location.clone();
        // The write goes on in its own task whether or not its caller still waits.
        tokio::spawn(async move {
            if released.await.is_err() {
                return;
            }
            let result = inner.put_opts(&location, payload, opts).await;
            let _ = landed_tx.send(result.is_ok());
            let _ = result_tx.send(result);
        });
        if matches!(mode, Mode::FailCaller | Mode::FailCallerOnce) {
            // (`Mode::Hold`: the caller waits for the released write's answer below.)
            return Err(object_store::Error::Generic {
                store: "HoldingStore",
                source: "connection reset while the response was awaited (the write is held by the test)".into(),
            });
        }
        match result_rx.await {
            Ok(result) => result,
            Err(_) => {
                Err(object_store::Error::Generic { store: "HoldingStore", source: "the held write was dropped".into() })
            }
        }
    }

    async fn put_multipart_opts(&self, location: &Path, opts: PutMultipartOptions) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[std::ops::Range<u64>]) -> Result<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, Result<Path>>) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}
