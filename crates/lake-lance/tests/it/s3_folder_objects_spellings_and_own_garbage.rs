//! The doors of an `s3://` lake, each tried on LocalStack with the input that opened it and more
//! of its kind: folder markers under `objects/` (foreign, never candidates, at every inventory
//! page size), honest delete reports (S3 DeleteObjects says nothing of existence), other
//! spellings of one object's URL, GC's own garbage in the journals (uncommitted reference logs
//! and incomplete multipart uploads of them), and a reference log edited in place.

use crate::gc_scenario::dry_run;
use crate::support::{batch, new_s3_lake, reader, schema, TestLake};
use arrow_array::{ArrayRef, RecordBatch, RecordBatchIterator, StringArray};
use chrono::Utc;
use lake_common::{DataLocationBuilder, SidecarDocument};
use lake_gc::apply::{ApplyOptions, ApplyReport};
use lake_gc::checkpoint::CheckpointLocation;
use lake_gc::deleter::DeleteOutcome;
use lake_gc::plan::GcPlan;
use lake_gc::unchecked::apply_unchecked as apply;
use lake_store::layout::{reference_log_key, reference_log_prefix, sidecar_key};
use lake_store::s3_requests::RawListPage;
use lake_store::writer::ManagedObject;
use object_store::aws::{AmazonS3, AwsAuthorizer};
use object_store::client::{ClientOptions, HttpConnector, HttpRequest, HttpRequestBody, ReqwestConnector};
use object_store::ObjectStoreExt;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// A key in a URL path: everything but RFC 3986 unreserved characters and `/` percent-encoded.
const KEY_SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');

/// A ULID minted `ago` before now.
fn minted_ago(ago: Duration) -> ulid::Ulid {
    let ms = (Utc::now() - chrono::Duration::from_std(ago).unwrap()).timestamp_millis() as u64;
    ulid::Ulid::from_parts(ms, ulid::Ulid::new().random())
}

fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL")
        .expect("AWS_ENDPOINT_URL: run through scripts/localstack.sh")
        .trim_end_matches('/')
        .to_string()
}

/// The full bucket key of `key` (relative to the lake root).
fn full_key(lake: &TestLake, key: &str) -> String {
    format!("{}/{key}", lake.store.prefix())
}

/// Sends one signed request with object_store's own client and signer to the exact bucket key of
/// `key` (relative to the root): object_store's `Path` cannot name `x/`. The status and body.
async fn raw_request(lake: &TestLake, method: &str, key: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let s3: &AmazonS3 = lake.store.s3().unwrap();
    let url = format!(
        "{}/{}/{}",
        endpoint(),
        lake.store.root().authority(),
        utf8_percent_encode(&full_key(lake, key), KEY_SET)
    );
    raw_url(s3, method, &url, body).await
}

async fn raw_url(s3: &AmazonS3, method: &str, url: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut request = HttpRequest::new(HttpRequestBody::from(body.to_vec()));
    *request.method_mut() = method.parse().unwrap();
    *request.uri_mut() = url.parse().unwrap();
    let credential = s3.credentials().get_credential().await.unwrap();
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    AwsAuthorizer::new(&credential, "s3", &region).try_authorize(&mut request, None).unwrap();
    let client = ReqwestConnector::default().connect(&ClientOptions::new().with_allow_http(true)).unwrap();
    let response = client.execute(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().bytes().await.unwrap();
    (status, bytes.to_vec())
}

/// Writes `body` at the exact key `key` (relative to the root), trailing slash and all.
async fn put_raw(lake: &TestLake, key: &str, body: &[u8]) {
    let (status, _) = raw_request(lake, "PUT", key, body).await;
    assert!((200..300).contains(&status), "PUT {key}: {status}");
}

/// Every key under the root, exactly as stored (folder markers keep their slash), relative to
/// the root, without the short-lived clock probes.
async fn raw_keys(lake: &TestLake) -> BTreeSet<String> {
    let requests = lake.store.s3_requests().unwrap();
    let prefix = format!("{}/", lake.store.prefix());
    let mut keys = BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let RawListPage { objects, truncated } =
            requests.list_objects_v2(&prefix, after.as_deref(), 1000).await.unwrap();
        after = objects.last().map(|o| o.key.clone());
        keys.extend(objects.into_iter().map(|o| o.key[prefix.len()..].to_string()));
        if !truncated {
            break;
        }
    }
    keys.retain(|k| !k.starts_with("_lake/clock/"));
    keys
}

async fn table_with(lake: &TestLake, objects: &[&ManagedObject]) {
    let rows: Vec<(&str, Option<&ManagedObject>)> = objects.iter().map(|o| ("e", Some(*o))).collect();
    lake.engine.append("t", reader(vec![batch(&rows)])).await.unwrap();
}

/// Rows referencing `objects` by the URIs `uris`, one each.
fn spelled(uris: &[String], objects: &[&ManagedObject]) -> Box<dyn arrow_array::RecordBatchReader + Send> {
    let mut files = DataLocationBuilder::new();
    for (uri, o) in uris.iter().zip(objects) {
        files.append(uri, o.sha256, o.size);
    }
    let episodes: ArrayRef = Arc::new(StringArray::from_iter_values(uris.iter().map(|_| "e")));
    let rows = RecordBatch::try_new(schema(), vec![episodes, Arc::new(files.finish())]).unwrap();
    Box::new(RecordBatchIterator::new(vec![Ok(rows)], schema()))
}

fn keys_of(plan: &GcPlan) -> BTreeSet<String> {
    plan.candidates.keys().unwrap().into_iter().collect()
}

/// Applies `plan` to completion with a fresh local checkpoint.
async fn apply_plan(lake: &TestLake, plan: &GcPlan) -> Result<ApplyReport, lake_gc::GcError> {
    let dir = tempfile::tempdir().unwrap();
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let options = ApplyOptions { page_size: 1, concurrency: 2, ..ApplyOptions::default() };
    apply(&lake.engine, &deleter, &dir.path().join("gc.ckpt").as_path().into(), Some(plan), &options).await
}

/// The reference log of `version` of table `t`: its key and the SHA-256 its head records.
async fn log_of(lake: &TestLake, version: u64) -> (String, String) {
    let bytes = lake.store.get(&sidecar_key("t", version)).await.unwrap().unwrap();
    match SidecarDocument::decode(&bytes, "t", version).unwrap() {
        SidecarDocument::Log(head) => (reference_log_key("t", &head.log.write_id), head.log.sha256),
        other => panic!("version {version} has an inline sidecar: {other:?}"),
    }
}

/// The adversarial input: folder markers under `objects/` (the prefix's own `objects/`, a managed
/// folder's `objects/<U>/`, `objects/<U>/x/` beside its real, orphan slash-less twin
/// `objects/<U>/x`, the twins of a live and an orphan object, and an s3a-style marker with a file
/// below it). Each is foreign, listed in the plan, never a candidate; the plan is the same at
/// inventory page sizes 1, 2, 3 and 1000; apply deletes exactly the orphans and every marker
/// stays.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_folder_markers_are_foreign_at_every_page_size() {
    let lake = new_s3_lake("doors-markers").await;
    let hour = Duration::from_secs(3600);
    let (u1, u2, u3) = (minted_ago(hour), minted_ago(hour), minted_ago(hour));
    let live = lake.upload("live.bin", b"live").await;
    let orphan = lake.upload("orphan.bin", b"orphan").await;
    table_with(&lake, &[&live]).await;
    let twin = format!("objects/{u1}/x");
    lake.store.put(&twin, b"the marker's slash-less twin, an orphan".to_vec()).await.unwrap();
    let below = format!("objects/{u3}/x/y.bin");
    lake.store.put(&below, b"below an s3a marker: outside the grammar".to_vec()).await.unwrap();
    let markers = [
        "objects/".to_string(),
        format!("objects/{u1}/"),
        format!("objects/{u1}/x/"),
        format!("objects/{u2}/"),
        format!("objects/{u3}/x/"),
        format!("{}/", live.key),
        format!("{}/", orphan.key),
        format!("{}/", live.key.rsplit_once('/').unwrap().0),
    ];
    for m in &markers {
        put_raw(&lake, m, b"").await;
    }
    let before = raw_keys(&lake).await;
    for m in &markers {
        assert!(before.contains(m), "the marker {m} is stored with its slash: {before:?}");
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let cutoff = Utc::now();
    let want: BTreeSet<String> = [orphan.key.clone(), twin.clone()].into();
    // Named in key order (`objects/` < `objects/0...`: `/` sorts before the digits).
    let foreign: Vec<String> =
        markers.iter().collect::<BTreeSet<_>>().into_iter().map(|m| format!("{m}: folder marker")).collect();
    let mut digests = Vec::new();
    for page in [1, 2, 3, 1000] {
        let plan = dry_run(&lake, cutoff, page).await;
        assert!(plan.lineage_complete, "page size {page}: {:?}", plan.problems);
        assert_eq!(keys_of(&plan), want, "page size {page}");
        assert_eq!(plan.foreign_count, markers.len() as u64, "page size {page}: {:?}", plan.foreign);
        assert_eq!(plan.foreign, foreign, "page size {page}");
        digests.push((page, plan.digest().unwrap()));
    }
    assert!(digests.iter().all(|(_, d)| *d == digests[0].1), "one plan at every page size: {digests:?}");
    let plan = dry_run(&lake, cutoff, 2).await;
    let report = apply_plan(&lake, &plan).await.unwrap();
    assert!(report.checkpoint.complete, "{:?}", report.checkpoint);
    // Each key's first delete request, confirmed by S3: deleted (the plan listed it).
    assert_eq!(report.checkpoint.deleted, 2, "{:?}", report.checkpoint);
    let after = raw_keys(&lake).await;
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(gone, want, "exactly the orphans deleted");
    assert!(after.is_superset(&markers.iter().cloned().collect()), "every marker stays: {after:?}");
    assert!(after.contains(&below) && after.contains(&live.key));
    // The next plan still sees the markers, and nothing else to collect.
    let again = dry_run(&lake, cutoff, 1).await;
    assert!(again.candidates.is_empty() && again.foreign_count == markers.len() as u64, "{:?}", again.foreign);
}

/// The adversarial input: a plan applied three times at once, each apply with its own checkpoint
/// (two local, one on S3). LocalStack ignores conditional deletes and answers every key of a
/// DeleteObjects `<Deleted>`, existing or not: each apply accounts for every candidate once
/// (`deleted` on its first request for the key, `absent` where a request may repeat an earlier
/// one). On Amazon S3, which honours conditional deletes, the counts are exact: one `deleted`
/// per key in all (lake-gc conformance `s3_conditional_deletes_count_each_removal_once`).
/// Every candidate is gone afterwards, nothing else. The deleter itself reports a key that never
/// existed as absent, and refuses folder markers and keys outside the grammar (skipped, left in
/// place).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_concurrent_applies_account_for_every_candidate_once() {
    let lake = new_s3_lake("doors-honest").await;
    let live = lake.upload("live.bin", b"live").await;
    let mut orphans = Vec::new();
    for i in 0..5 {
        orphans.push(lake.upload(&format!("o{i}.bin"), format!("orphan {i}").as_bytes()).await);
    }
    table_with(&lake, &[&live]).await;
    let marker = format!("objects/{}/", minted_ago(Duration::from_secs(3600)));
    put_raw(&lake, &marker, b"").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let plan = dry_run(&lake, Utc::now(), 2).await;
    let want: BTreeSet<String> = orphans.iter().map(|o| o.key.clone()).collect();
    assert_eq!(keys_of(&plan), want);
    let n = want.len() as u64;

    // The deleter alone: a key that never existed, folder markers, a key outside the grammar.
    let twin = format!("{}/", live.key);
    put_raw(&lake, &twin, b"").await;
    let deleter = lake_gc::deleter::for_store(&lake.store);
    let never = format!("objects/{}/never.bin", minted_ago(Duration::from_secs(3600)));
    let outcomes =
        deleter.delete_batch(&[never.clone(), marker.clone(), twin.clone(), "_lake/lake.json".into()]).await.unwrap();
    assert_eq!(outcomes[0], DeleteOutcome::Absent, "S3 cannot tell a missing key from a deleted one");
    for o in &outcomes[1..] {
        assert!(matches!(o, DeleteOutcome::Skipped(_)), "{outcomes:?}");
    }
    let before = raw_keys(&lake).await;
    for kept in [&marker, &twin, &"_lake/lake.json".to_string(), &live.key] {
        assert!(before.contains(kept), "{kept} left alone: {before:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    let s3_ckpt = format!("{}-ckpt/gc.ckpt", lake.store.root());
    let locations = [
        CheckpointLocation::from(dir.path().join("a.ckpt").as_path()),
        CheckpointLocation::from(dir.path().join("b.ckpt").as_path()),
        CheckpointLocation::parse(&s3_ckpt).unwrap(),
    ];
    let options = ApplyOptions { page_size: 2, concurrency: 2, ..ApplyOptions::default() };
    let (a, b, c) = futures::join!(
        apply(&lake.engine, &deleter, &locations[0], Some(&plan), &options),
        apply(&lake.engine, &deleter, &locations[1], Some(&plan), &options),
        apply(&lake.engine, &deleter, &locations[2], Some(&plan), &options),
    );
    let reports = [a.unwrap(), b.unwrap(), c.unwrap()];
    let mut accounted = 0;
    for r in &reports {
        let c = &r.checkpoint;
        assert!(c.complete, "{c:?}");
        assert_eq!(c.deleted + c.absent, n, "each apply accounts for every candidate once: {c:?}");
        assert_eq!(c.already_gone, 0, "LocalStack never says that a key was gone before: {c:?}");
        assert!(c.failed.is_empty() && c.skipped.is_empty() && c.revived.is_empty(), "{c:?}");
        accounted += c.deleted + c.absent;
    }
    assert_eq!(accounted, 3 * n, "each apply accounts for every candidate once");
    let after = raw_keys(&lake).await;
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(gone, want, "every candidate gone, nothing else");
    assert!(after.difference(&before).all(|k| k.ends_with(".plan.json") || k.ends_with(".ckpt")), "{after:?}");
    // A fourth apply from a finished checkpoint is a no-op.
    let again = apply(&lake.engine, &deleter, &locations[2], None, &options).await.unwrap();
    assert!(again.was_complete && again.pages == 0);
}

/// The adversarial input: rows that spell managed objects as `S3://`, `s3a://`, the Amazon
/// virtual-hosted URL and the LocalStack endpoint's path-style and virtual-hosted URLs. Each is
/// journaled as the object's key: live, never planned, still there after apply (an orphan beside
/// them is deleted). A differently-cased bucket is refused and nothing is committed.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_every_spelling_of_an_object_keeps_it_live() {
    let lake = new_s3_lake("doors-spellings").await;
    let bucket = lake.store.root().authority().to_string();
    let prefix = lake.store.root().path().to_string();
    let mut objects = Vec::new();
    for i in 0..5 {
        objects.push(lake.upload(&format!("o{i}.bin"), format!("object {i}").as_bytes()).await);
    }
    let orphan = lake.upload("orphan.bin", b"orphan").await;
    let endpoint = endpoint();
    let (scheme, host) = endpoint.split_once("://").unwrap();
    let mut uris = vec![
        format!("S3://{bucket}/{prefix}/{}", objects[0].key),
        format!("s3a://{bucket}/{prefix}/{}", objects[1].key),
        format!("https://{bucket}.s3.amazonaws.com/{prefix}/{}", objects[2].key),
        format!("{endpoint}/{bucket}/{prefix}/{}", objects[3].key),
    ];
    // The endpoint's virtual-hosted form exists only for a host name (`bucket.127.0.0.1` is no
    // host): `AWS_ENDPOINT_URL=http://localhost:<port>` tries it too.
    let name = host.rsplit_once(':').map_or(host, |(h, _)| h);
    if name.parse::<std::net::IpAddr>().is_err() && !name.starts_with('[') {
        uris.push(format!("{scheme}://{bucket}.{host}/{prefix}/{}", objects[4].key));
    }
    // An object no spelling references (no virtual-hosted form) is an orphan like `orphan`.
    let unreferenced: BTreeSet<String> = objects[uris.len()..].iter().map(|o| o.key.clone()).collect();
    let objects = &objects[..uris.len()];
    let refs: Vec<&ManagedObject> = objects.iter().collect();
    lake.engine.append("t", spelled(&uris, &refs)).await.unwrap();
    let counts = lake.engine.journal_counts_at("t", 1).await.unwrap();
    for o in objects {
        assert!(counts.iter().any(|(id, _)| id.uri == o.key), "{} journaled by its key: {counts:?}", o.key);
    }
    assert_eq!(counts.iter().count(), objects.len(), "{counts:?}");
    tokio::time::sleep(Duration::from_millis(30)).await;
    let plan = dry_run(&lake, Utc::now(), 2).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    let mut expected = unreferenced.clone();
    expected.insert(orphan.key.clone());
    assert_eq!(keys_of(&plan), expected);
    let report = apply_plan(&lake, &plan).await.unwrap();
    assert!(
        report.checkpoint.complete && report.checkpoint.deleted == expected.len() as u64,
        "{:?}",
        report.checkpoint
    );
    assert!(lake.store.head(&orphan.key).await.unwrap().is_none());
    for o in objects {
        assert!(lake.store.head(&o.key).await.unwrap().is_some(), "{} survives", o.key);
    }
    let logs = lake.store.list_all(&reference_log_prefix("t")).await.unwrap().len();
    for uri in [
        format!("s3://{}/{prefix}/{}", bucket.to_uppercase(), objects[0].key),
        format!("S3A://{}/{prefix}/{}", bucket.to_uppercase(), objects[1].key),
    ] {
        let err =
            lake.engine.append("t", spelled(std::slice::from_ref(&uri), &[&objects[0]])).await.unwrap_err().to_string();
        assert!(err.contains("letter case"), "{uri}: {err}");
        assert_eq!(lake.engine.versions("t").await.unwrap().len(), 1, "{uri}: nothing committed");
        assert_eq!(
            lake.store.list_all(&reference_log_prefix("t")).await.unwrap().len(),
            logs,
            "{uri}: the refused write left no reference log"
        );
    }
}

/// The adversarial input: GC's own garbage on S3. A reference log of a write that never committed
/// (minted an hour ago) and an incomplete multipart upload of another such log (one 5 MiB part)
/// are planned (the upload as `<log>#upload=<id>`) and gone after apply, with a cutoff in the
/// future (the upload was initiated just now); the log a committed version's sidecar names, and
/// a log written after the cutoff, stay.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_reference_logs_and_uploads_of_uncommitted_writes_are_collected() {
    let lake = new_s3_lake("doors-garbage").await;
    let a = lake.upload("a.bin", b"a").await;
    table_with(&lake, &[&a]).await;
    let (named, _) = log_of(&lake, 1).await;
    let log = lake.store.get(&named).await.unwrap().unwrap();
    let old = reference_log_key("t", &minted_ago(Duration::from_secs(3600)).to_string());
    lake.store.put(&old, log.to_vec()).await.unwrap();
    let staged = reference_log_key("t", &minted_ago(Duration::from_secs(3600)).to_string());
    let mut upload = lake.store.object_store().put_multipart(&lake.store.path(&staged)).await.unwrap();
    upload.put_part(vec![7u8; 5 * 1024 * 1024].into()).await.unwrap();
    let requests = lake.store.s3_requests().unwrap();
    let logs_prefix = format!("{}/", full_key(&lake, &reference_log_prefix("t")));
    let uploads = requests.list_multipart_uploads(&logs_prefix).await.unwrap();
    assert_eq!(uploads.len(), 1, "{uploads:?}");
    assert_eq!(uploads[0].key, full_key(&lake, &staged));
    let upload_key = format!("{staged}#upload={}", uploads[0].upload_id);
    let cutoff = Utc::now() + chrono::Duration::seconds(2);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let young = reference_log_key("t", &ulid::Ulid::new().to_string());
    lake.store.put(&young, log.to_vec()).await.unwrap();
    let plan = dry_run(&lake, cutoff, 3).await;
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(keys_of(&plan), BTreeSet::from([old.clone(), upload_key.clone()]));
    let report = apply_plan(&lake, &plan).await.unwrap();
    let c = &report.checkpoint;
    // The log's delete confirmed on its first request, the upload aborted by this request.
    assert!(c.complete && c.deleted == 2 && c.failed.is_empty() && c.skipped.is_empty(), "{c:?}");
    assert!(lake.store.head(&old).await.unwrap().is_none(), "the uncommitted log is gone");
    assert_eq!(requests.list_multipart_uploads(&logs_prefix).await.unwrap(), [], "the upload is aborted");
    assert!(lake.store.head(&staged).await.unwrap().is_none(), "aborting completes nothing");
    for kept in [&named, &young] {
        assert!(lake.store.head(kept).await.unwrap().is_some(), "{kept} stays");
    }
    assert!(lake.store.head(&a.key).await.unwrap().is_some());
    let after = dry_run(&lake, cutoff, 3).await;
    assert!(after.lineage_complete && after.candidates.is_empty(), "{:?} {:?}", after.problems, keys_of(&after));
    assert_eq!(lake.engine.scan_version("t", 1).await.unwrap().total(), 1, "the table still reads");
}

/// The adversarial input: one character of a key inside an appended version's reference log on
/// S3 changed in place (same length; the object read, edited, put back). Were the journal
/// believed, the object would be an orphan. The head's digest catches it: the dry run is
/// incomplete with a problem naming the recorded digest, apply refuses, nothing is deleted.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_a_reference_log_edited_in_place_is_refused() {
    let lake = new_s3_lake("doors-tamper").await;
    let a = lake.upload("a.bin", b"a").await;
    let b = lake.upload("b.bin", b"b").await;
    let orphan = lake.upload("orphan.bin", b"orphan").await;
    table_with(&lake, &[&a, &b]).await;
    let (log, digest) = log_of(&lake, 1).await;
    let mut bytes = lake.store.get(&log).await.unwrap().unwrap().to_vec();
    let key = a.key.as_bytes();
    let at = bytes.windows(key.len()).position(|w| w == key).expect("the log holds the key");
    let len = bytes.len();
    bytes[at + key.len() - 1] ^= 0x01;
    assert_eq!(bytes.len(), len);
    lake.store.put(&log, bytes).await.unwrap();
    let before = raw_keys(&lake).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let plan = dry_run(&lake, Utc::now(), 2).await;
    assert!(!plan.lineage_complete && plan.candidates.is_empty(), "{:?}", keys_of(&plan));
    assert!(
        plan.problems.iter().any(|p| p.message.contains(&digest) && p.message.contains("does not match the SHA-256")),
        "a problem naming the log's digest {digest}: {:?}",
        plan.problems
    );
    let refused = apply_plan(&lake, &plan).await;
    assert!(refused.is_err(), "apply must refuse a plan on a tampered journal: {refused:?}");
    assert_eq!(raw_keys(&lake).await, before, "nothing deleted");
    assert!(lake.store.head(&orphan.key).await.unwrap().is_some() && lake.store.head(&a.key).await.unwrap().is_some());
}

/// The adversarial input: folder markers in a table's reference-log folder, where GC collects
/// its own garbage: `<log>.arrows/` beside an old log of a write that never committed, a lone
/// `<old write>.arrows/` with no log, and the folder's own marker. A marker is no log: the plan
/// is complete, the old log is its one candidate, and after apply every marker is still there.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn s3_folder_markers_beside_reference_logs_are_never_planned() {
    let lake = new_s3_lake("doors-log-markers").await;
    let a = lake.upload("a.bin", b"a").await;
    table_with(&lake, &[&a]).await;
    let (named, _) = log_of(&lake, 1).await;
    let log = lake.store.get(&named).await.unwrap().unwrap();
    let old = reference_log_key("t", &minted_ago(Duration::from_secs(3600)).to_string());
    lake.store.put(&old, log.to_vec()).await.unwrap();
    let lone = reference_log_key("t", &minted_ago(Duration::from_secs(3600)).to_string());
    let markers = [format!("{old}/"), format!("{lone}/"), format!("{}/", reference_log_prefix("t"))];
    for m in &markers {
        put_raw(&lake, m, b"").await;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let options = lake_gc::unchecked::PlanOptions::new(lake.store.root(), Duration::from_secs(1), Utc::now())
        .page_size(2)
        .memory_budget(3);
    let inventory = lake_gc::inventory::for_store(&lake.store);
    let planned = lake_gc::unchecked::plan_with_unchecked_cutoff(&lake.engine, inventory.as_ref(), &options).await;
    let plan = match planned {
        Ok((plan, _)) => plan,
        Err(e) => panic!("a folder marker beside a reference log must not stop planning: {e}"),
    };
    assert!(plan.lineage_complete, "{:?}", plan.problems);
    assert_eq!(keys_of(&plan), BTreeSet::from([old.clone()]), "a marker is never planned as a log");
    let report = apply_plan(&lake, &plan).await.unwrap();
    assert!(report.checkpoint.complete, "{:?}", report.checkpoint);
    let after = raw_keys(&lake).await;
    assert!(!after.contains(&old), "the old log is gone");
    for kept in markers.iter().chain([&named]) {
        assert!(after.contains(kept), "{kept} stays: {after:?}");
    }
}
