//! The end-to-end scenario through the `lake` binary on an `s3://` root (LocalStack), with an
//! apply killed mid-way (SIGKILL to the process) and resumed from its checkpoint.

use crate::{json, lake, ok, stderr, write_files};
use lake::store::LakeStore;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
fn s3_gc_apply_killed_mid_way_resumes_from_its_checkpoint() {
    let bucket =
        std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET is not set: run through scripts/test.sh");
    let root = format!("s3://{bucket}/cli-{}", ulid::Ulid::new().to_string().to_lowercase());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let n_doomed = 120;
    let mut files: Vec<(String, String)> =
        (0..n_doomed).map(|i| (format!("doomed/f{i:03}.bin"), format!("doomed {i}"))).collect();
    files.extend((0..5).map(|i| (format!("kept/k{i}.bin"), format!("kept {i}"))));
    let refs: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    write_files(&src, &refs);

    ok(&["init", &root, "--min-age", "10s"]);
    ok(&["ingest", &root, "--table", "episodes", src.to_str().unwrap()]);
    let d = json(&ok(&["delete", &root, "--table", "episodes", "--where", "episode = 'doomed'", "--json"]));
    assert_eq!(d["rows_deleted"], n_doomed);
    ok(&["compact", &root, "--table", "episodes"]);
    ok(&["cleanup", &root, "--table", "episodes", "--older-than", "0s"]);
    // Old enough for --min-age 10s (the policy floor: the guard gives the 125-file ingest 7.5s and
    // its commit a 2.5s deadline, room enough on a loaded machine).
    crate::advance_clock(Duration::from_millis(10500));

    let dry = json(&ok(&["gc", &root, "--min-age", "10s", "--json"]));
    assert_eq!(dry["lineage_complete"], true, "{dry}");
    assert_eq!(dry["candidate_count"], n_doomed);
    let cutoff = dry["cutoff"].as_str().unwrap().to_string();
    let candidates: Vec<String> =
        dry["candidates"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap().to_string()).collect();

    let ckpt = dir.path().join("gc.ckpt");
    let mut child = crate::lake_command()
        .args([
            "gc",
            &root,
            "--min-age",
            "10s",
            "--cutoff",
            &cutoff,
            "--apply",
            "--checkpoint",
            ckpt.to_str().unwrap(),
            "--page-size",
            "1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let killed_at = loop {
        if let Ok(bytes) = std::fs::read(&ckpt) {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                let next = v["next_index"].as_u64().unwrap_or(0);
                if next >= 2 {
                    child.kill().unwrap();
                    break next;
                }
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "apply made no progress");
        std::thread::sleep(Duration::from_millis(2));
    };
    child.wait().unwrap();
    let cp = json(&std::fs::read_to_string(&ckpt).unwrap());
    assert_eq!(cp["complete"], false, "killed before finishing");
    assert!(killed_at < n_doomed as u64, "killed mid-way at {killed_at}");

    let resumed = lake(&["gc", &root, "--min-age", "10s", "--apply", "--checkpoint", ckpt.to_str().unwrap(), "--json"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let r = json(&String::from_utf8_lossy(&resumed.stdout));
    assert_eq!(
        (r["complete"].as_bool(), r["resumed"].as_bool(), r["failed"].as_u64()),
        (Some(true), Some(true), Some(0))
    );
    assert_eq!(r["digest"], dry["digest"]);
    assert_eq!(r["delete_pages"].as_u64().unwrap(), 1, "the rest went in one bulk request");
    // Finished, the same command plans anew (nothing left) and replaces the finished apply.
    let again =
        json(&ok(&["gc", &root, "--min-age", "10s", "--apply", "--checkpoint", ckpt.to_str().unwrap(), "--json"]));
    assert_eq!(
        (again["candidate_count"].as_u64(), again["replaced"]["plan_digest"].as_str()),
        (Some(0), dry["digest"].as_str()),
        "{again}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = LakeStore::open(&root).unwrap();
        for c in &candidates {
            assert!(store.head(c).await.unwrap().is_none(), "{c} still exists");
        }
        let engine = lake::lance::LanceEngine::new(store);
        let report = lake::lance::verify::check_retained_objects(&engine).await.unwrap();
        assert!(report.is_ok(), "{report:?}");
        assert_eq!(report.objects_checked, 5);
    });
    let after = json(&ok(&["gc", &root, "--min-age", "10s", "--json"]));
    assert_eq!(after["candidate_count"], 0);
}

/// `lake gc --inventory`: a plan from an S3 Inventory report (written in AWS's layout from a real
/// listing; LocalStack delivers none) equals the plan from a full listing at the same cutoff, on
/// a lake with orphans made before and after the report; a stale report is refused by full plans
/// and not read by incremental ones.
#[test]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
fn s3_gc_plans_from_an_inventory_report() {
    use lake::collect::inventory::report::writer::{write_report, WriteOptions};
    use lake::collect::inventory::report::ReportFormat;
    let bucket =
        std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET is not set: run through scripts/test.sh");
    let id = ulid::Ulid::new().to_string().to_lowercase();
    let root = format!("s3://{bucket}/cli-inventory-{id}");
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(String, String)> = ["early/e0", "early/e1", "early/e2", "kept/k0", "late/l0", "late/l1"]
        .iter()
        .map(|p| (format!("{p}.bin"), format!("content of {p}")))
        .collect();
    for (path, content) in &files {
        let group = path.split('/').next().unwrap();
        write_files(&dir.path().join(group), &[(path.as_str(), content.as_str())]);
    }
    let ingest = |group: &str| ok(&["ingest", &root, "--table", "t", dir.path().join(group).to_str().unwrap()]);
    ok(&["init", &root, "--min-age", "10s"]);
    ingest("early");
    ingest("kept");
    ok(&["delete", &root, "--table", "t", "--where", "episode = 'early'"]);

    let rt = tokio::runtime::Runtime::new().unwrap();
    let written = rt.block_on(async {
        let store = LakeStore::open(&root).unwrap();
        let options = WriteOptions { created: Some(chrono::Utc::now()), ..WriteOptions::new(ReportFormat::Parquet) };
        write_report(&store, &format!("s3://{bucket}/reports-{id}"), &options).await.unwrap()
    });
    ingest("late");
    ok(&["delete", &root, "--table", "t", "--where", "episode = 'late'"]);
    ok(&["cleanup", &root, "--table", "t", "--older-than", "0s"]);
    crate::advance_clock(Duration::from_millis(10500));

    // Both plans with --full: a plan's digest covers its mode record, whose reason for a full
    // plan would otherwise differ (no GC state yet, a given inventory) where the plans do not.
    let listed = json(&ok(&["gc", &root, "--min-age", "10s", "--full", "--json"]));
    assert_eq!(listed["candidate_count"], 5, "{listed}");
    assert!(listed.get("inventory").is_none());
    let cutoff = listed["cutoff"].as_str().unwrap();
    let args = ["gc", &root, "--min-age", "10s", "--cutoff", cutoff, "--full", "--inventory", &written.manifest_url];
    let from_report = json(&ok(&[&args[..], &["--inventory-margin", "0s", "--json"]].concat()));
    assert_eq!(from_report["digest"], listed["digest"], "{from_report}");
    assert_eq!(from_report["candidates"], listed["candidates"]);
    let inventory = &from_report["inventory"];
    assert_eq!(inventory["manifest"], written.manifest_url.as_str());
    assert!(inventory["from_report"].as_u64().unwrap() >= 4, "early and kept objects: {inventory}");
    assert!(inventory["from_listing"].as_u64().unwrap() >= 2, "late objects: {inventory}");
    let text = ok(&[&args[..], &["--inventory-margin", "0s"]].concat());
    assert!(text.contains("entries from the report"), "{text}");

    let stale = lake(&[&args[..], &["--inventory-max-age", "5s"]].concat());
    assert!(!stale.status.success());
    let message = stderr(&stale);
    assert!(
        message.contains("refused; nothing was planned") && message.contains("raise the bound on a report's age"),
        "{message}"
    );

    // An incremental run (a GC state there) never reads the report: a report too old stops
    // only full plans, and the report lists no `inventory` it did not read.
    let checkpoint = dir.path().join("gc.ckpt").display().to_string();
    let applied = json(&ok(&["gc", &root, "--min-age", "10s", "--apply", "--checkpoint", &checkpoint, "--json"]));
    assert!(applied["state_recorded"].is_string(), "{applied}");
    let stale_args =
        ["gc", &root, "--min-age", "10s", "--inventory", &written.manifest_url, "--inventory-max-age", "5s"];
    let incremental = json(&ok(&[&stale_args[..], &["--json"]].concat()));
    assert_eq!(incremental["mode"], "incremental", "{incremental}");
    assert!(incremental.get("inventory").is_none(), "{incremental}");
    let full = lake(&[&stale_args[..], &["--full"]].concat());
    assert!(!full.status.success() && stderr(&full).contains("raise the bound on a report's age"), "{}", stderr(&full));
}
