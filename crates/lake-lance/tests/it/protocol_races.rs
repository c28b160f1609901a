//! An adversarial pass against the one write protocol (`lake_lance::commit`): a manifest write
//! that landed but was answered "already exists", a forged compaction committed while a fence
//! commits, a branch creation killed between its manifest and Lance's branch document. Each test
//! asserts the safe outcome; each doc comment says the input and what went wrong before the fix
//! (the gate's accounting, `publish::journal_content_preserving`, `resolve::fence`).

use crate::hold::Mode;
use crate::intents::{assert_nothing_referenced_is_missing, held_lake, intent_keys};
use crate::protocol::gc_all;
use crate::support::{batch, new_lake, reader, TestLake};
use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::TryStreamExt;
use lake_lance::LanceEngine;
use lake_store::writer::ManagedObject;
use lance::dataset::transaction::{Operation, RewriteGroup, Transaction};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteMode, WriteParams};
use lance::io::WrappingObjectStore;
use lance::Dataset;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions, Result as StoreResult,
};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn one(episode: &str, o: &ManagedObject) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    reader(vec![batch(&[(episode, Some(o))])])
}

/// The keys the latest version of `table` references, from a plain scan; the error when the
/// version cannot be read.
async fn latest_keys(lake: &TestLake, table: &str) -> Result<BTreeSet<String>, String> {
    let ds = Dataset::open(&lake.engine.dataset_uri(table)).await.map_err(|e| e.to_string())?;
    let mut keys = BTreeSet::new();
    let mut stream = ds.scan().try_into_stream().await.map_err(|e| e.to_string())?;
    while let Some(b) = stream.try_next().await.map_err(|e| e.to_string())? {
        use arrow_array::Array;
        for column in b.columns() {
            let Some(s) = column.as_any().downcast_ref::<arrow_array::StructArray>() else { continue };
            let Some(uris) =
                s.column_by_name("uri").and_then(|u| u.as_any().downcast_ref::<arrow_array::StringArray>())
            else {
                continue;
            };
            for i in 0..s.len() {
                if s.is_valid(i) {
                    keys.insert(uris.value(i).to_string());
                }
            }
        }
    }
    Ok(keys)
}

/// Whether a plan of `lake` now has complete lineage (its problems otherwise).
async fn lineage_complete(lake: &TestLake) -> Result<(), Vec<String>> {
    let (plan, _) = crate::support::unchecked_plan_now(lake, Duration::from_secs(1)).await.unwrap();
    if plan.lineage_complete {
        Ok(())
    } else {
        Err(plan.problems.iter().map(|p| p.message.clone()).collect())
    }
}

fn keys(objects: &[&ManagedObject]) -> BTreeSet<String> {
    objects.iter().map(|o| o.key.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Finding 1: a manifest write that landed but was answered "already exists".
//
// On S3 a conditional PUT (`If-None-Match: *`) whose response is a 5xx after the object was
// stored is retried by object_store (server errors are retried whatever the method), and the
// retry is answered 412: object_store reports `AlreadyExists`, Lance's commit handler a
// `CommitConflict`. Lance 14 then reads the version back (`verify_commit_outcome`), finds its
// own transaction there and returns success. The gate counted that manifest write as *refused*
// (`Gate::after_publish`), so `gate.uncertain()` is false, and `LanceEngine::commit` takes the
// success for "Lance's own call wrote no manifest" (the `unchanged` branch): it removes the
// intent, deletes the write's staged data files and its reference log, and writes no journal
// entry and no registry pin for the version that landed.

/// One manifest write is let through to the store and then answered `AlreadyExists` (the store
/// kept it; the answer is what a retried conditional PUT gets).
#[derive(Debug, Default)]
struct LostAnswer {
    /// Manifest writes still to answer `AlreadyExists` after they landed.
    armed: AtomicUsize,
    /// Manifest writes answered so.
    lost: AtomicUsize,
}

impl LostAnswer {
    fn arm(&self, n: usize) {
        self.armed.store(n, Ordering::SeqCst);
    }

    fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone)]
struct LostAnswerWrapper(Arc<LostAnswer>);

impl WrappingObjectStore for LostAnswerWrapper {
    fn wrap(&self, _store_prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(LostAnswerStore { inner: original, state: self.0.clone() })
    }

    fn wrap_paginated(
        &self,
        _store_prefix: &str,
        original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        Some(original)
    }
}

#[derive(Debug)]
struct LostAnswerStore {
    inner: Arc<dyn ObjectStore>,
    state: Arc<LostAnswer>,
}

impl std::fmt::Display for LostAnswerStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LostAnswerStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for LostAnswerStore {
    async fn put_opts(&self, location: &Path, payload: PutPayload, opts: PutOptions) -> StoreResult<PutResult> {
        let manifest = location.as_ref().contains("/_versions/") && location.as_ref().ends_with(".manifest");
        let lose =
            manifest && self.state.armed.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        let result = self.inner.put_opts(location, payload, opts).await;
        if lose && result.is_ok() {
            self.state.lost.fetch_add(1, Ordering::SeqCst);
            return Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "the PUT landed; its 500 answer was retried and the retry got 412".into(),
            });
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[std::ops::Range<u64>]) -> StoreResult<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(&self, locations: BoxStream<'static, StoreResult<Path>>) -> BoxStream<'static, StoreResult<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(&self, prefix: Option<&Path>, offset: &Path) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> StoreResult<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// A local lake whose engine's manifest writes can be answered `AlreadyExists` after landing.
async fn lossy_lake() -> (TestLake, Arc<LostAnswer>) {
    let mut lake = new_lake().await;
    let lost = Arc::new(LostAnswer::default());
    lake.engine = LanceEngine::new(lake.store.clone())
        .with_memory_budget(2048)
        .with_object_store_wrapper(Arc::new(LostAnswerWrapper(lost.clone())));
    (lake, lost)
}

/// Input: an append (`lake ingest`) whose manifest write lands and is answered `AlreadyExists`
/// (S3: a 500 after the object was stored, retried by object_store into a 412).
///
/// Observed before the fix: Lance verifies the version is its own and returns success; the engine reports
/// "committed as version 2" but, taking the write for one that published nothing, deletes the
/// version's own data file (and its intent and reference log) and journals nothing. Version 2
/// and every later version (they keep its fragment) cannot be scanned; checked by hand: the next
/// append commits version 3; `lake refs recover` leaves version 2 ("could not be journaled"),
/// `lake refs repair` of version 2 or 3 fails (scan: file not found), `lake cleanup
/// --older-than 0` then leaves "version 2 has no sidecar, but replaying version 3 needs it", and
/// `lake refs verify` fails: every GC of the lake refuses from then on, with no command out.
#[tokio::test(flavor = "multi_thread")]
async fn an_append_whose_landed_manifest_is_answered_already_exists_keeps_its_data_and_journal() {
    let (lake, lost) = lossy_lake().await;
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", one("e0", &first)).await.unwrap();
    let second = lake.upload("second", b"second").await;
    lost.arm(1);
    let outcome = lake.engine.append("t", one("e1", &second)).await;
    assert_eq!(lost.lost(), 1, "premise: the manifest write landed and was answered `already exists`");
    let outcome = outcome.expect("Lance found its own version there and reported success");
    assert_eq!(outcome.version, 2);
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    assert_eq!(ds.version().version, 2, "premise: version 2 is the append's");
    assert_eq!(
        latest_keys(&lake, "t").await,
        Ok(keys(&[&first, &second])),
        "version 2 was committed and reported, but its writer deleted its data file"
    );
    assert!(
        lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().is_some(),
        "version 2 was committed and reported, but has no journal entry"
    );
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!((report.pending(), report.left()), (0, 0), "{report:?}");
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("GC refuses: {p:?}"));
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

/// Input: the first ingest of table `fresh` (a create) whose manifest write lands and is
/// answered `AlreadyExists`.
///
/// Observed before the fix: the create reports success as version 1, but its writer deleted the version's data
/// file, wrote no journal entry and never registered the table: `tables/fresh.lance` is an
/// unregistered dataset with a version, which stops every GC of the lake, and no command can
/// journal or register it (the version cannot be read).
#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_landed_manifest_is_answered_already_exists_is_registered_and_readable() {
    let (lake, lost) = lossy_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let o = lake.upload("fresh", b"the first row of a new table").await;
    lost.arm(1);
    let outcome = lake.engine.append("fresh", one("e0", &o)).await;
    assert_eq!(lost.lost(), 1, "premise: the manifest write landed and was answered `already exists`");
    assert_eq!(outcome.expect("Lance found its own version there and reported success").version, 1);
    assert_eq!(
        latest_keys(&lake, "fresh").await,
        Ok(keys(&[&o])),
        "version 1 of `fresh` was committed and reported, but its writer deleted its data file"
    );
    assert!(
        lake_store::registry::current(&lake.store, "fresh").await.unwrap().is_some(),
        "the create was reported, but table `fresh` is not registered"
    );
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!((report.pending(), report.left()), (0, 0), "{report:?}");
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("GC refuses: {p:?}"));
    gc_all(&lake).await;
    assert_nothing_referenced_is_missing(&lake, &["t", "fresh"], &[]).await;
}

/// Input: an update (Lance's own call through the gate) whose manifest write lands and is
/// answered `AlreadyExists`.
///
/// Observed before the fix: version 2 (the update) exists, but the engine reports `None` ("no row matched"),
/// removes the intent and journals nothing; the version carries no marker (Lance's own call)
/// and no intent claims it any more, so `lake refs recover` leaves it as "another client's
/// commit" and GC refuses until an operator runs `lake refs repair`.
#[tokio::test(flavor = "multi_thread")]
async fn an_update_whose_landed_manifest_is_answered_already_exists_is_reported_and_journaled() {
    let (lake, lost) = lossy_lake().await;
    let first = lake.upload("first", b"first").await;
    let second = lake.upload("second", b"second").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&first)), ("e1", Some(&second))])])).await.unwrap();
    lost.arm(1);
    let set: lake_lance::update::Assignment = "file = NULL".parse().unwrap();
    let outcome = lake.engine.update("t", &[set], Some("episode = 'e0'")).await;
    assert_eq!(lost.lost(), 1, "premise: the manifest write landed and was answered `already exists`");
    assert_eq!(latest_keys(&lake, "t").await, Ok(keys(&[&second])), "premise: version 2 is the update's");
    let outcome = outcome.unwrap();
    assert_eq!(outcome.map(|c| c.version), Some(2), "the update committed version 2 but reports no row matched");
    let report = lake.engine.recover_writes(None).await.unwrap();
    assert_eq!((report.pending(), report.left()), (0, 0), "{report:?}");
    lineage_complete(&lake).await.unwrap_or_else(|p| panic!("GC refuses: {p:?}"));
}

/// A TCP proxy in front of LocalStack that forwards every request, except that the next `n`
/// manifest PUTs that S3 accepts are answered `500 InternalError` (the object stored all the
/// same): what an S3 front end returns now and then for a request it completed.
struct LosingProxy {
    addr: std::net::SocketAddr,
    lose: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LosingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LosingProxy {
    async fn start(upstream: &str) -> Self {
        let target =
            upstream.strip_prefix("http://").expect("plain http:// only").split('/').next().unwrap().to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (lose, lost) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (l, d) = (lose.clone(), lost.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(proxy_one(client, target.clone(), l.clone(), d.clone()));
            }
        });
        Self { addr, lose, lost, task }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn proxy_one(mut client: tokio::net::TcpStream, target: String, lose: Arc<AtomicUsize>, lost: Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4) {
            break end;
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    for line in lines.filter(|l| !l.is_empty()) {
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if !lower.starts_with("connection:") {
            headers.push(line.to_string());
        }
    }
    while buf.len() < end + length {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut request = format!("{request_line}\r\n{}\r\nConnection: close\r\n\r\n", headers.join("\r\n")).into_bytes();
    request.extend_from_slice(&buf[end..end + length]);
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split('?').next().unwrap_or_default();
    let manifest = method == "PUT" && path.contains("/_versions/") && path.ends_with(".manifest");
    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else { return };
    if server.write_all(&request).await.is_err() {
        return;
    }
    let mut response = Vec::new();
    loop {
        match server.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => response.extend_from_slice(&chunk[..n]),
        }
    }
    let status: Option<u16> =
        String::from_utf8_lossy(&response[..response.len().min(64)]).split(' ').nth(1).and_then(|s| s.parse().ok());
    let landed = status.is_some_and(|s| (200..300).contains(&s));
    if manifest && landed && lose.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
        lost.fetch_add(1, Ordering::SeqCst);
        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>";
        response = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
    }
    let _ = client.write_all(&response).await;
    let _ = client.shutdown().await;
}

/// Finding 1 on S3 end to end (LocalStack behind a proxy): the manifest PUT of an append is
/// stored and answered 500; object_store retries it, the retry gets 412 (`If-None-Match: *`),
/// Lance finds its own version and reports success. Observed before the fix, as locally: the append reports
/// version 2, deletes version 2's data file and journals nothing.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3"]
async fn s3_an_append_whose_manifest_put_is_answered_500_after_landing_keeps_its_data_and_journal() {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("AWS_ENDPOINT_URL");
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET");
    let proxy = LosingProxy::start(&endpoint).await;
    let root = format!("s3://{bucket}/lost-answer-{}", ulid::Ulid::new().to_string().to_lowercase());
    let options = std::collections::HashMap::from([("aws_endpoint".to_string(), proxy.endpoint())]);
    let store = lake_store::LakeStore::open_with_options(&root, &options).unwrap();
    lake_store::descriptor::LakeDescriptor::create(&store, Duration::from_secs(3600)).await.unwrap();
    let lake = TestLake {
        _dir: None,
        engine: LanceEngine::new(store.clone()).with_memory_budget(2048),
        writer: lake_store::writer::ManagedObjectWriter::new(store.clone()),
        store,
    };
    let first = lake.upload("first", b"first").await;
    lake.engine.append("t", one("e0", &first)).await.unwrap();
    let second = lake.upload("second", b"second").await;
    proxy.lose.store(1, Ordering::SeqCst);
    let outcome = lake.engine.append("t", one("e1", &second)).await;
    assert_eq!(proxy.lost.load(Ordering::SeqCst), 1, "premise: the manifest PUT was stored and answered 500");
    let outcome = outcome.expect("Lance found its own version there and reported success");
    assert_eq!(outcome.version, 2);
    let ds = lake.engine.open("t").await.unwrap();
    assert_eq!(ds.version().version, 2);
    let mut stream = ds.scan().try_into_stream().await.unwrap();
    let mut scanned = Ok(0usize);
    loop {
        match stream.try_next().await {
            Ok(Some(b)) => scanned = scanned.map(|n| n + b.num_rows()),
            Ok(None) => break,
            Err(e) => {
                scanned = Err(e.to_string());
                break;
            }
        }
    }
    assert_eq!(scanned, Ok(2), "version 2 was committed and reported, but its writer deleted its data file");
    assert!(
        lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().is_some(),
        "version 2 was committed and reported, but has no journal entry"
    );
    assert!(intent_keys(&lake).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Finding 2: a content-preserving commit's journal (`Journal::ContentPreserving`, the fence of
// every resolution and of `lake cleanup`, compaction, index builds) writes an EMPTY entry for
// every version after the one it started from whose Lance transaction *says* it preserves
// content (`foreign::preserves_content`: for a `Rewrite`, only the row counts), without the
// check against the two manifests that the implied entries get (`proven_against_previous`).

/// Input: a stale restore tag (a restore killed two hours ago) makes `lake cleanup` commit a
/// fence; while that fence is being committed, a second Lance client commits a `Rewrite` whose
/// new fragment holds the same number of rows but other references (row e1 now references its
/// object `c`, `b` is gone). The fence lands after it (Lance rebases a config change over a
/// rewrite).
///
/// Observed before the fix: the fence journals the second client's version as an empty entry (its transaction
/// is a `Rewrite` with matching row counts), bound to its manifest, so the lineage is complete
/// and says nothing changed: the journal keeps `b` live and has never seen `c`, which versions 2
/// and 3 reference. GC (once `c` is older than `min_age`: here a cutoff an hour ahead) deletes
/// `c`. Without the fence, the same version is no implied entry (checked against its manifests)
/// and GC refuses until `lake refs repair`.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_rewrite_committed_under_a_cleanup_fence_is_not_journaled_as_empty() {
    let (lake, hold) = held_lake().await;
    let lake = Arc::new(lake);
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let c = lake.upload("c.bin", b"c, referenced only by the second client's rewrite").await;
    lake.engine.append("t", reader(vec![batch(&[("e0", Some(&a)), ("e1", Some(&b))])])).await.unwrap();
    // A restore killed two hours ago left its tag on version 1.
    let ds = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    let killed = ulid::Ulid::from_datetime(std::time::SystemTime::now() - Duration::from_secs(2 * 3600));
    let tag = format!("{}{}", lake_lance::history::RESTORE_TAG_PREFIX, killed.to_string().to_lowercase());
    ds.tags().create(&tag, 1u64).await.unwrap();
    // `lake cleanup`: the stale tag goes, then its fence, whose manifest write is held.
    hold.set(Mode::Hold);
    let cleanup = {
        let lake = lake.clone();
        tokio::spawn(async move { lake.engine.cleanup("t", Duration::from_secs(3600)).await })
    };
    hold.wait_held(1).await;
    hold.set(Mode::Off);
    // The second client's rewrite: the same two rows by count, `c` instead of `b`.
    let ds = Arc::new(Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap());
    let old = ds.manifest().fragments.as_ref().clone();
    let params = WriteParams { mode: WriteMode::Append, ..Default::default() };
    let written = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(vec![batch(&[("e0", Some(&a)), ("e1", Some(&c))])])
        .await
        .unwrap();
    let Operation::Append { fragments } = written.operation else { panic!("an append") };
    let op = Operation::Rewrite {
        groups: vec![RewriteGroup { old_fragments: old, new_fragments: fragments }],
        rewritten_indices: vec![],
        frag_reuse_index: None,
    };
    let rewritten = CommitBuilder::new(ds.clone())
        .with_skip_auto_cleanup(true)
        .execute(Transaction::new(ds.version().version, op, None))
        .await
        .unwrap();
    assert_eq!(rewritten.version().version, 2, "premise: the second client's rewrite is version 2");
    assert_eq!(hold.release_all().await, vec![false], "premise: the fence's first attempt finds version 2 taken");
    cleanup.await.unwrap().unwrap();
    let latest = Dataset::open(&lake.engine.dataset_uri("t")).await.unwrap();
    assert_eq!(latest.version().version, 3, "premise: the fence landed as version 3");
    assert_eq!(latest_keys(&lake, "t").await, Ok(keys(&[&a, &c])), "premise: versions 2 and 3 reference c");
    // The fence journals only its own version: the second client's rewrite (no marker, no intent)
    // has no entry, and is no implied one either (its manifests show `c` replacing `b`).
    assert!(lake_lance::sidecar::read(&lake.store, "t", 2).await.unwrap().is_none());
    assert!(lineage_complete(&lake).await.is_err(), "GC refuses while version 2 is not journaled");
    // GC once `c` is old enough to be a candidate: nothing is deleted.
    gc_all(&lake).await;
    assert!(
        lake.store.head(&c.key).await.unwrap().is_some(),
        "GC deleted {}, which versions 2 and 3 reference: the fence journaled the second client's rewrite as empty",
        c.key
    );
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    // An operator repairs it from a scan: exact, and `c` stays live.
    lake.engine.repair_refs("t", 2).await.unwrap();
    lineage_complete(&lake).await.unwrap();
    gc_all(&lake).await;
    assert!(lake.store.head(&c.key).await.unwrap().is_some());
    assert_nothing_referenced_is_missing(&lake, &["t"], &[]).await;
    assert!(lake.engine.verify_refs(&[]).await.unwrap().is_ok());
}

// ---------------------------------------------------------------------------------------------
// Finding 3: a branch creation killed between its manifest and Lance's branch document.

/// Not a test: creates branch `b` of table `t` from version 1 in the lake at `LAKE_CHILD_ROOT`
/// (`lake branch create`), printing `ok <version>` or `err <kind>: <message>` last.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "child-process helper of the protocol_races tests"]
async fn child_process_helper_create_branch() {
    let root = std::env::var("LAKE_CHILD_ROOT").expect("run only as a child process");
    let engine = LanceEngine::new(lake_store::LakeStore::open(&root).unwrap());
    match engine.create_branch("t", "b", &lake_lance::branch::BranchSource::Version(1)).await {
        Ok(c) => println!("ok {}", c.version),
        Err(e) => println!("err {}: {e}", e.kind()),
    }
}

/// Input: `lake branch create` (branch `b` of `t` from version 1) killed right after the
/// branch's first manifest landed in `tables/t.lance/tree/b/`, before Lance wrote the branch's
/// document (`_refs/branches/b.json`): a process killed between two PUTs
/// (`LAKE_CRASHPOINT=commit.lost_manifest_response`).
///
/// Observed before the fix: the write's intent (lineage `t@b`) can never be resolved: its fence is committed
/// on the branch's folder (it has a version) and then refused because `t@b` is not registered,
/// so every `lake refs recover` leaves it pending; `lake branch delete` resolves the branch's
/// writes first and refuses for that pending intent; and GC refuses lake-wide for the branch
/// folder without a document ("made by another Lance client"). No command removes the block
/// (the branch module says: delete the branch and create it again), and every resolution
/// attempt commits one more fence version into the half-made branch. The same state follows
/// from a write to `t@b` whose intent is written after `lake branch delete` listed the branch's
/// intents and whose manifest lands in the deleted folder: `fence` commits on any branch folder
/// with a version, and `publish` refuses an unregistered branch.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_creation_killed_after_its_manifest_can_be_resolved_or_deleted() {
    let lake = new_lake().await;
    lake.engine.append("t", one("e0", &lake.upload("first", b"first").await)).await.unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "protocol_races::child_process_helper_create_branch",
            "--include-ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("LAKE_CHILD_ROOT", lake.store.root().to_string())
        .env("LAKE_CRASHPOINT", "commit.lost_manifest_response")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        !text.lines().any(|l| l.starts_with("ok ") || l.starts_with("err ")),
        "premise: the child was killed: {text}"
    );
    assert_eq!(intent_keys(&lake).await.len(), 1, "premise: the branch creation's intent stays");
    assert!(lake.engine.table_exists("t@b").await.unwrap(), "premise: the branch's manifest landed");
    // An operator, past the deadline: recover, delete the half-made branch, recover again.
    let later = crate::support::engine_later(&lake, crate::support::LATER);
    let first = later.recover_writes(None).await.unwrap();
    let deleted = later.delete_branch("t", "b").await;
    let again = later.recover_writes(None).await.unwrap();
    let problems = lineage_complete(&lake).await.err();
    assert!(
        problems.is_none() && again.pending() == 0,
        "GC refuses for good.\nrecover: {:?}\nbranch delete: {deleted:?}\nrecover again: {:?}\nGC problems: {problems:?}",
        first.intents,
        again.intents
    );
}
