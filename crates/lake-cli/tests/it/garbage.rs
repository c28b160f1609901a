//! Through the binary: what killed commands leave is reported and collected by later runs
//! (a `lake ingest` killed mid-upload, a `lake restore` killed after tagging its source), tags
//! belong to their lineage, and a setting that lets Lance remove versions is named and unset.

use crate::{advance_clock, json, lake, lake_command, object_files, ok, stderr, stdout, write_files};
use std::path::Path;
use std::time::Duration;

/// A lake with table `t` at version 1 (one small file).
fn lake_with_table(dir: &Path) -> String {
    let root = dir.join("lake").display().to_string();
    let small = dir.join("small");
    write_files(&small, &[("a.bin", "small file")]);
    ok(&["init", &root, "--min-age", "4s"]);
    ok(&["ingest", &root, "--table", "t", small.to_str().unwrap()]);
    root
}

/// The input: `lake ingest` killed during the upload of a file above 8 MiB (an injected
/// crash: the process aborts, as under `kill -9`) leaves object_store's staging file
/// `objects/<ULID>/big.bin#1`. Earlier builds planned its folder as an empty folder and skipped
/// it on every run. A later `lake gc` reports it as a staged upload (text and `--json`), and its
/// apply deletes it and its folder.
#[test]
fn a_staging_file_of_a_killed_ingest_is_reported_and_collected() {
    let dir = tempfile::tempdir().unwrap();
    let root = lake_with_table(dir.path());
    let big = dir.path().join("big");
    std::fs::create_dir_all(&big).unwrap();
    std::fs::write(big.join("big.bin"), vec![42u8; 9 << 20]).unwrap();
    let killed = lake_command()
        .args(["ingest", &root, "--table", "t", big.to_str().unwrap()])
        .env("LAKE_FAILPOINT", "upload.mid_multipart")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "{}", stderr(&killed));
    assert!(stderr(&killed).contains("injected crash at `upload.mid_multipart`"), "{}", stderr(&killed));
    let staged: Vec<String> = object_files(Path::new(&root)).into_iter().filter(|f| f.ends_with("big.bin#1")).collect();
    assert_eq!(staged.len(), 1, "{:?}", object_files(Path::new(&root)));
    let folder = Path::new(&root).join(staged[0].rsplit_once('/').unwrap().0);
    advance_clock(Duration::from_secs(5));
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["lineage_complete"], true, "{dry}");
    let keys: Vec<&str> = dry["candidates"].as_array().unwrap().iter().map(|c| c["uri"].as_str().unwrap()).collect();
    assert!(keys.contains(&staged[0].as_str()), "{dry}");
    assert_eq!(dry["own_garbage"]["staged_uploads"], 1, "{dry}");
    assert_eq!(dry["metrics"]["staged_uploads"], 1, "{dry}");
    let text = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(text.contains(&format!("{}  ", staged[0])) && text.contains("(staged upload)"), "{text}");
    assert!(text.contains("own garbage:") && text.contains("1 staged uploads"), "{text}");
    let checkpoint = dir.path().join("gc.ckpt");
    let applied =
        json(&ok(&["gc", &root, "--min-age", "4s", "--apply", "--checkpoint", checkpoint.to_str().unwrap(), "--json"]));
    assert_eq!(applied["complete"], true, "{applied}");
    assert!(!folder.exists(), "the staging file and its folder are gone");
    assert_eq!(object_files(Path::new(&root)).len(), 1, "only version 1's object is left");
}

/// The input: `lake restore` killed after tagging its source and before its commit
/// (failure point `restore.after_tag`) left `lake-restore-*`, which pinned version 1 for good and
/// was never reported. `lake versions` now marks it as a restore's tag, `lake gc` reports it, and
/// once it is stale (floor 4 s + 2 x margin 1 s + commit deadline 30 s = 36 s after the restore
/// began, by the store's clock)
/// `lake cleanup` removes it, fences, and then removes version 1; its object becomes a candidate.
#[test]
fn a_tag_of_a_killed_restore_is_reported_and_removed_by_cleanup_once_stale() {
    let dir = tempfile::tempdir().unwrap();
    let root = lake_with_table(dir.path());
    ok(&["delete", &root, "--table", "t", "--where", "path = 'a.bin'"]);
    let killed = lake_command()
        .args(["restore", &root, "--table", "t", "--version", "1"])
        .env("LAKE_FAILPOINT", "restore.after_tag")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(1), "{}", stderr(&killed));
    let versions = json(&ok(&["versions", &root, "--table", "t", "--json"]));
    let tag = versions["versions"][0]["tags"][0].as_str().unwrap().to_string();
    assert!(tag.starts_with("lake-restore-"), "{versions}");
    assert_eq!(versions["versions"][0]["restore_tags"][0]["stale"], false, "{versions}");
    let text = ok(&["versions", &root, "--table", "t"]);
    assert!(text.contains(&format!("{tag} (a restore in progress)")), "{text}");
    // Not stale yet: cleanup keeps it and version 1.
    let c = json(&ok(&["cleanup", &root, "--table", "t", "--older-than", "0s", "--json"]));
    assert_eq!(
        (c["old_versions"].as_u64(), c["stale_restore_tags_removed"].as_array().map(Vec::len)),
        (Some(0), Some(0))
    );
    advance_clock(Duration::from_secs(40));
    let gc = ok(&["gc", &root, "--min-age", "4s"]);
    assert!(gc.contains(&format!("restore tag: `{tag}` of `t` pins version 1")) && gc.contains("STALE"), "{gc}");
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["restore_tags"][0]["stale"], true, "{dry}");
    assert_eq!(dry["candidate_count"], 0, "{dry}");
    // Removing the stale tag commits a fence (version 3: a restore still running under the tag
    // could not land after it); then versions 1 and 2 go.
    let out = ok(&["cleanup", &root, "--table", "t", "--older-than", "0s"]);
    assert!(out.contains(&format!("removed the stale restore tag `{tag}`")), "{out}");
    assert!(out.contains("removed 2 old versions"), "{out}");
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["candidate_count"], 1, "version 1's object is an orphan now: {dry}");
    assert_eq!(dry["restore_tags"].as_array().map(Vec::len), Some(0), "{dry}");
}

/// The input: `lake versions --table t` showed a branch's tag on main's version of the
/// same number, and `lake tag --table t --delete NAME` deleted the branch's tag. Each lineage now
/// shows its own tags, and a tag of another lineage is refused with where it points.
#[test]
fn lake_tag_and_versions_keep_to_the_lineage_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = lake_with_table(dir.path());
    let more = dir.path().join("more");
    write_files(&more, &[("b.bin", "second")]);
    ok(&["ingest", &root, "--table", "t", more.to_str().unwrap()]);
    ok(&["branch", "create", &root, "--table", "t", "--name", "b", "--from", "1"]);
    ok(&["ingest", &root, "--table", "t@b", more.to_str().unwrap()]);
    ok(&["tag", &root, "--table", "t@b", "--version", "2", "onb"]);
    let main = json(&ok(&["versions", &root, "--table", "t", "--json"]));
    assert!(main["versions"].as_array().unwrap().iter().all(|v| v["tags"].as_array().unwrap().is_empty()), "{main}");
    let branch = json(&ok(&["versions", &root, "--table", "t@b", "--json"]));
    assert_eq!(branch["versions"][1]["tags"][0], "onb", "{branch}");
    let refused = lake(&["tag", &root, "--table", "t", "--delete", "onb"]);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(stderr(&refused).contains("names version 2 of `t@b`"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("Name the table `t@b`"), "{}", stderr(&refused));
    let refused = lake(&["tag", &root, "--table", "t", "--version", "2", "onb"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("already exists"), "{}", stderr(&refused));
    let branch = json(&ok(&["versions", &root, "--table", "t@b", "--json"]));
    assert_eq!(branch["versions"][1]["tags"][0], "onb", "still there: {branch}");
    ok(&["tag", &root, "--table", "t@b", "--delete", "onb"]);
}

/// `lake config` shows a setting another client set that lets Lance remove versions, `lake gc`
/// names it (exit 3) with the command, and `lake config --unset` removes it.
#[test]
fn lake_config_shows_and_unsets_a_setting_that_blocks_gc() {
    let dir = tempfile::tempdir().unwrap();
    let root = lake_with_table(dir.path());
    let dataset = Path::new(&root).join("tables/t.lance");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut ds = lance::Dataset::open(dataset.to_str().unwrap()).await.unwrap();
        ds.update_config([("lance.auto_cleanup.interval", "1000")]).await.unwrap();
    });
    let shown = ok(&["config", &root, "--table", "t"]);
    assert!(shown.contains("lance.auto_cleanup.interval=1000  (lets Lance remove versions"), "{shown}");
    let gc = lake(&["gc", &root, "--min-age", "4s"]);
    assert_eq!(gc.status.code(), Some(3), "{}", stderr(&gc));
    assert!(stdout(&gc).contains("`config unset` of `lance.auto_cleanup.interval`"), "{}", stdout(&gc));
    assert!(stdout(&gc).contains("with lake: lake config ROOT --table TABLE --unset KEY"), "{}", stdout(&gc));
    let unset = json(&ok(&["config", &root, "--table", "t", "--unset", "lance.auto_cleanup.interval", "--json"]));
    assert_eq!(unset["version"], 3, "{unset}");
    let shown = json(&ok(&["config", &root, "--table", "t", "--json"]));
    assert_eq!(shown["blocks_gc"].as_array().map(Vec::len), Some(0), "{shown}");
    let dry = json(&ok(&["gc", &root, "--min-age", "4s", "--json"]));
    assert_eq!(dry["lineage_complete"], true, "{dry}");
}
