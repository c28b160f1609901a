//! An S3 lake configured by storage options alone: every path to the store
//! takes its settings from the lake's one resolved configuration (`S3Settings`), never from the
//! environment. The check runs in a child process of this test binary whose environment has no
//! `AWS_*` variable, so that nothing can fall back on it: the object writer, the raw listings
//! (inventory, `list_all`, multipart uploads), the store's clock probe, planning, bulk deletes,
//! an S3 checkpoint (another prefix), and an S3 Inventory report's bucket. Ignored by a plain
//! `cargo test` (LocalStack).

use crate::conformance::s3_root;
use lake_engine::memory::MemoryEngine;
use lake_gc::apply::ApplyOptions;
use lake_gc::checkpoint::{ApplyCheckpoint, CheckpointLocation};
use lake_gc::collector::{GarbageCollector, Horizon, PlanSettings};
use lake_gc::inventory::report::writer::{write_report, WriteOptions};
use lake_gc::inventory::report::{ReportFormat, ReportInventory, ReportOptions};
use lake_store::clock::{read_store_clock, FixedClock};
use lake_store::descriptor::LakeDescriptor;
use lake_store::writer::ManagedObjectWriter;
use lake_store::LakeStore;
use std::collections::HashMap;
use std::time::Duration;

/// Set (to the storage options, as JSON) only in the child process.
const CHILD: &str = "LAKE_TEST_S3_OPTIONS_CHILD";
/// The child test's name, as the test harness filters it.
const CHILD_TEST: &str = "s3_options::child_runs_gc_with_storage_options_alone";

/// The parent: LocalStack's settings become storage options, and the child runs without any
/// `AWS_*` variable.
#[test]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
fn gc_runs_with_storage_options_alone_in_a_process_without_aws_environment() {
    let var =
        |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run through scripts/test.sh"));
    let options: HashMap<&str, String> = HashMap::from([
        ("aws_endpoint", var("AWS_ENDPOINT_URL")),
        ("aws_access_key_id", var("AWS_ACCESS_KEY_ID")),
        ("aws_secret_access_key", var("AWS_SECRET_ACCESS_KEY")),
        ("aws_region", var("AWS_REGION")),
        ("allow_http", "true".into()),
    ]);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child.args([CHILD_TEST, "--exact", "--include-ignored", "--nocapture", "--test-threads=1"]);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(|n| n.starts_with("AWS_")) {
            child.env_remove(name);
        }
    }
    child.env(CHILD, serde_json::to_string(&options).unwrap());
    let out = child.output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("storage options alone: ok"), "the child did not run its checks:\n{stdout}\n{stderr}");
}

/// The child (a no-op unless started by the test above).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
async fn child_runs_gc_with_storage_options_alone() {
    let Ok(options) = std::env::var(CHILD) else { return };
    assert!(std::env::vars_os().all(|(n, _)| !n.to_string_lossy().starts_with("AWS_")), "an AWS_* variable is set");
    let options: HashMap<String, String> = serde_json::from_str(&options).unwrap();
    let root = s3_root("options");
    let bucket = std::env::var("LAKE_TEST_S3_BUCKET").unwrap();
    let unique = ulid::Ulid::new().to_string().to_lowercase();
    let store = LakeStore::open_with_options(&root, &options).unwrap();
    LakeDescriptor::create(&store, Duration::from_secs(1)).await.unwrap();
    let writer = ManagedObjectWriter::new(store.clone());
    let mut keys = Vec::new();
    for i in 0..5 {
        keys.push(writer.upload(&format!("o{i}"), b"orphan".as_slice()).await.unwrap().key);
    }
    // Raw requests: an exact listing, the multipart uploads, the clock probe.
    assert_eq!(store.list_all("objects").await.unwrap().len(), 5);
    let requests = store.s3_requests().unwrap();
    assert_eq!(requests.list_multipart_uploads(&format!("{}/", store.prefix())).await.unwrap(), []);
    let now = read_store_clock(&store).await.unwrap().store_now;

    // A plan from the lake's listing and from an S3 Inventory report written to (and read from)
    // another prefix, then an apply with its checkpoint on S3.
    let engine = MemoryEngine::new();
    let later = FixedClock(now + chrono::Duration::seconds(5));
    let horizon = Horizon::new(Duration::from_secs(1));
    let gc = GarbageCollector::open(store.clone(), &engine).await.unwrap().with_unchecked_clock(later);
    let planned = gc.plan(&horizon, &PlanSettings::default()).await.unwrap();
    assert_eq!(planned.plan.candidates.len(), 5);
    let report =
        write_report(&store, &format!("s3://{bucket}/options-reports-{unique}"), &WriteOptions::new(ReportFormat::Csv))
            .await
            .unwrap();
    let report_options = ReportOptions { margin: Duration::ZERO, ..ReportOptions::default() };
    let inventory = ReportInventory::open(&store, &report.manifest_url, &report_options).await.unwrap();
    let from_report = GarbageCollector::open(store.clone(), &engine)
        .await
        .unwrap()
        .with_unchecked_clock(later)
        .with_inventory(Box::new(inventory))
        .plan(&horizon, &PlanSettings::default())
        .await
        .unwrap();
    assert_eq!(from_report.plan.candidates.keys().unwrap(), planned.plan.candidates.keys().unwrap());
    let checkpoint =
        CheckpointLocation::parse_for(&format!("s3://{bucket}/options-ckpt-{unique}/gc.ckpt"), &store).unwrap();
    let applied = gc.apply(&planned.plan, &horizon, &checkpoint, &ApplyOptions::default()).await.unwrap();
    let c = &applied.checkpoint;
    assert!(c.complete && c.failed.is_empty(), "{c:?}");
    assert_eq!((c.deleted, c.absent, c.already_gone), (5, 0, 0), "{c:?}");
    for key in &keys {
        assert!(store.head(key).await.unwrap().is_none(), "{key} is still there");
    }
    assert!(ApplyCheckpoint::load(&checkpoint).await.unwrap().unwrap().checkpoint.complete);
    println!("storage options alone: ok");
}
