//! `lake cat` and `lake get`: objects read back through the lake's store, verified against
//! their references; corrupted and missing objects fail by kind; `get` writes only outside the
//! lake, atomically, and never over a different file.

use crate::{json, lake as run, object_files, ok, stderr, stdout, tree, write_files};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The source files of the test lake: (path below the ingested folder, content); `d.bin` has
/// `a.bin`'s bytes (another object, another key).
const FILES: [(&str, &str); 4] = [
    ("ep0/a.bin", "episode zero, file a"),
    ("ep0/b.bin", "episode zero, file b"),
    ("ep1/c.bin", "episode one, file c"),
    ("ep1/d.bin", "episode zero, file a"),
];

/// A lake with table `t` ingested from [`FILES`] (rows `episode`, `path`, `file`).
struct Lake {
    dir: tempfile::TempDir,
    root: String,
}

impl Lake {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("lake").display().to_string();
        let src = dir.path().join("src");
        write_files(&src, &FILES);
        ok(&["init", &root, "--min-age", "1h"]);
        ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
        Self { dir, root }
    }

    /// The key of the object made from the file named `name` (`a.bin`).
    fn key(&self, name: &str) -> String {
        object_files(Path::new(&self.root))
            .into_iter()
            .find(|k| k.ends_with(&format!("/{name}")))
            .unwrap_or_else(|| panic!("no object named {name}"))
    }

    /// The object file of `key` in the lake.
    fn object_path(&self, key: &str) -> PathBuf {
        Path::new(&self.root).join(key)
    }

    /// A folder of the test outside the lake.
    fn outside(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn content(name: &str) -> &'static str {
    FILES.iter().find(|(p, _)| p.ends_with(&format!("/{name}"))).map(|(_, c)| *c).unwrap()
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The last line of standard error as the JSON error, checked: exit 1 and `kind`.
fn error_kind(o: &std::process::Output, kind: &str) -> serde_json::Value {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    let error = json(stderr(o).lines().last().unwrap_or_default());
    assert_eq!(error["error"]["kind"], kind, "{error}");
    error
}

/// Every file under `dir` (relative path, content).
fn files_under(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    tree(dir).into_iter().filter(|(rel, _)| !rel.ends_with('/')).map(|(rel, c)| (rel, c.unwrap())).collect()
}

#[test]
fn cat_writes_the_bytes_verified_or_says_it_did_not_verify() {
    let lake = Lake::new();
    let key = lake.key("a.bin");
    let bytes = content("a.bin");
    let (sha, size) = (sha256_hex(bytes.as_bytes()), bytes.len().to_string());

    let o = run(&["cat", &lake.root, &key, "--sha256", &sha, "--size", &size]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), bytes);
    assert!(stderr(&o).is_empty(), "a verified read says nothing: {}", stderr(&o));

    // --json: the bytes on standard output, the report on standard error.
    let o = run(&["cat", &lake.root, &key, "--sha256", &sha.to_uppercase(), "--size", &size, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), bytes);
    let report = json(&stderr(&o));
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!((report["key"].as_str(), report["size"].as_u64()), (Some(key.as_str()), Some(bytes.len() as u64)));
    assert_eq!(report["sha256"], sha.as_str());

    // Unverified, by key or by a file: URL of the object: the bytes, and a line saying so.
    let url = format!("file://{}", lake.object_path(&key).canonicalize().unwrap().display());
    for spelling in [key.as_str(), url.as_str()] {
        let o = run(&["cat", &lake.root, spelling]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(stdout(&o), bytes);
        assert!(stderr(&o).contains("NOT verified") && stderr(&o).contains(&sha), "{}", stderr(&o));
    }
    let o = run(&["cat", &lake.root, &key, "--json"]);
    let report = json(&stderr(&o));
    assert_eq!((report["verified"].as_bool(), report["sha256"].as_str()), (Some(false), Some(sha.as_str())));

    // --sha256 without --size (and the reverse), or a bad SHA-256: usage errors, nothing read.
    for args in [vec!["--sha256", sha.as_str()], vec!["--size", size.as_str()], vec!["--sha256", "abc", "--size", "1"]]
    {
        let mut full = vec!["cat", lake.root.as_str(), key.as_str(), "--json"];
        full.extend(args);
        let o = run(&full);
        error_kind(&o, "invalid_input");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn cat_of_a_corrupted_or_missing_object_fails_by_kind() {
    let lake = Lake::new();
    let key = lake.key("b.bin");
    let bytes = content("b.bin");
    let (sha, size) = (sha256_hex(bytes.as_bytes()), bytes.len().to_string());
    // One byte changed, same size.
    let mut corrupted = bytes.as_bytes().to_vec();
    corrupted[3] ^= 0x20;
    std::fs::write(lake.object_path(&key), &corrupted).unwrap();

    let o = run(&["cat", &lake.root, &key, "--sha256", &sha, "--size", &size, "--json"]);
    let error = error_kind(&o, "object_mismatch");
    assert!(error["error"]["message"].as_str().unwrap().contains(&key), "{error}");
    assert!(o.stdout.is_empty(), "a small object is written only once verified");
    // Without --json the same, as a message.
    let o = run(&["cat", &lake.root, &key, "--sha256", &sha, "--size", &size]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not match its reference"), "{}", stderr(&o));
    // A wrong size is a mismatch too.
    let o = run(&["cat", &lake.root, &key, "--sha256", &sha, "--size", "3", "--json"]);
    error_kind(&o, "object_mismatch");
    // Unverified, the corrupted bytes come out, with the warning.
    let o = run(&["cat", &lake.root, &key]);
    assert!(o.status.success());
    assert_eq!(o.stdout, corrupted);
    assert!(stderr(&o).contains("NOT verified"));

    // A missing object, verified or not; a location the lake's store cannot reach.
    let missing = format!("{}/nope.bin", key.rsplit_once('/').unwrap().0);
    let o = run(&["cat", &lake.root, &missing, "--sha256", &sha, "--size", &size, "--json"]);
    let error = error_kind(&o, "object_missing");
    assert!(error["error"]["message"].as_str().unwrap().contains(&missing), "{error}");
    error_kind(&run(&["cat", &lake.root, &missing, "--json"]), "object_missing");
    let elsewhere = lake.outside("elsewhere.bin");
    std::fs::write(&elsewhere, bytes).unwrap();
    let url = format!("file://{}", elsewhere.display());
    error_kind(&run(&["cat", &lake.root, &url, "--json"]), "object_unreachable");
}

#[test]
fn get_writes_the_objects_of_the_matching_rows_and_skips_them_the_second_time() {
    let lake = Lake::new();
    let out = lake.outside("out");
    let out_s = out.to_str().unwrap();
    let get = |more: &[&str]| {
        let mut args = vec!["get", lake.root.as_str(), "--table", "t", "--column", "file", out_s, "--json"];
        args.extend(more);
        json(&ok(&args))
    };

    let first = get(&["--where", "episode = 'ep0'", "--concurrency", "1"]);
    assert_eq!(
        (first["rows"].as_u64(), first["objects"].as_u64(), first["written"].as_u64()),
        (Some(2), Some(2), Some(2)),
        "{first}"
    );
    assert_eq!(first["skipped_existing"], 0);
    let want = |names: &[&str]| -> BTreeMap<String, Vec<u8>> {
        names.iter().map(|n| (lake.key(n), content(n).as_bytes().to_vec())).collect()
    };
    assert_eq!(files_under(&out), want(&["a.bin", "b.bin"]), "exactly the matching rows' objects, nothing else");
    assert_eq!(first["bytes"], content("a.bin").len() + content("b.bin").len());
    let files = first["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    for f in files {
        let uri = f["uri"].as_str().unwrap();
        assert_eq!(f["path"].as_str().unwrap(), out.join(uri).display().to_string(), "{f}");
        assert_eq!(f["size"].as_u64(), Some(std::fs::metadata(out.join(uri)).unwrap().len()));
    }

    // Again: nothing written, both skipped; then every row: the other two written.
    let again = get(&["--where", "episode = 'ep0'"]);
    assert_eq!((again["written"].as_u64(), again["skipped_existing"].as_u64()), (Some(0), Some(2)), "{again}");
    let all = get(&[]);
    assert_eq!(
        (all["rows"].as_u64(), all["objects"].as_u64(), all["written"].as_u64(), all["skipped_existing"].as_u64()),
        (Some(4), Some(4), Some(2), Some(2)),
        "{all}"
    );
    assert_eq!(files_under(&out), want(&["a.bin", "b.bin", "c.bin", "d.bin"]));

    // A different file where an object goes is never replaced: the command stops naming it.
    let c = out.join(lake.key("c.bin"));
    std::fs::write(&c, "not the object").unwrap();
    let o = run(&["get", &lake.root, "--table", "t", "--column", "file", out_s, "--json"]);
    let error = error_kind(&o, "invalid_input");
    assert!(error["error"]["message"].as_str().unwrap().contains(&c.display().to_string()), "{error}");
    assert_eq!(std::fs::read(&c).unwrap(), b"not the object");

    // Text output; no row matching.
    let text = ok(&["get", &lake.root, "--table", "t", "--where", "episode = 'none'", "--column", "file", out_s]);
    assert!(text.contains("0 rows of `t`: 0 objects"), "{text}");
    // Not a reference column, an unknown column or table, a bad --concurrency: refused by kind.
    let other = lake.outside("other");
    for (args, kind) in [
        (vec!["--column", "path"], "invalid_input"),
        (vec!["--column", "nope"], "invalid_input"),
        (vec!["--column", "file", "--concurrency", "0"], "invalid_input"),
        (vec!["--column", "file", "--concurrency", "65"], "invalid_input"),
    ] {
        let mut full = vec!["get", lake.root.as_str(), "--table", "t", other.to_str().unwrap(), "--json"];
        full.extend(args);
        error_kind(&run(&full), kind);
    }
    let o = run(&[
        "get",
        &lake.root,
        "--table",
        "missing",
        "--column",
        "file",
        lake.outside("x").to_str().unwrap(),
        "--json",
    ]);
    error_kind(&o, "no_such_table");
    assert!(!other.exists() && !lake.outside("x").exists(), "no DIR made by a refused command");
}

#[test]
fn get_refuses_a_folder_inside_the_lake() {
    let lake = Lake::new();
    let root = Path::new(&lake.root);
    let before = tree(root);
    let link = lake.outside("link");
    std::os::unix::fs::symlink(root.join("objects"), &link).unwrap();
    let relative_route = format!("{}/../copy", root.join("objects").display());
    for dir in [
        root.to_path_buf(),
        root.join("copy"),
        root.join("objects"),
        PathBuf::from(&relative_route),
        link.join("copy"),
        PathBuf::from(format!("file://{}/copy", root.display())),
    ] {
        let o = run(&["get", &lake.root, "--table", "t", "--column", "file", dir.to_str().unwrap(), "--json"]);
        let error = error_kind(&o, "root");
        assert!(error["error"]["message"].as_str().unwrap().contains("inside the lake root"), "{error}");
    }
    // A link deeper in DIR, where an object's folder goes, into the lake's own folder of it.
    let out = lake.outside("out");
    let key = lake.key("a.bin");
    let folder = key.rsplit_once('/').unwrap().0;
    std::fs::create_dir_all(out.join("objects")).unwrap();
    std::os::unix::fs::symlink(root.join(folder), out.join(folder)).unwrap();
    let o = run(&[
        "get",
        &lake.root,
        "--table",
        "t",
        "--where",
        "path = 'ep0/a.bin'",
        "--column",
        "file",
        out.to_str().unwrap(),
        "--json",
    ]);
    error_kind(&o, "root");
    assert_eq!(tree(root), before, "nothing written inside the lake");
}

#[test]
fn get_stops_on_a_corrupted_or_missing_object_and_writes_no_partial_file() {
    let lake = Lake::new();
    let out = lake.outside("out");
    let b = lake.key("b.bin");
    let mut corrupted = content("b.bin").as_bytes().to_vec();
    corrupted[0] ^= 1;
    std::fs::write(lake.object_path(&b), &corrupted).unwrap();
    let get = || {
        run(&[
            "get",
            &lake.root,
            "--table",
            "t",
            "--where",
            "path = 'ep0/b.bin'",
            "--column",
            "file",
            out.to_str().unwrap(),
            "--json",
        ])
    };
    let error = error_kind(&get(), "object_mismatch");
    assert!(error["error"]["message"].as_str().unwrap().contains(&b), "{error}");
    assert!(files_under(&out).is_empty(), "no file, no temporary file left: {:?}", files_under(&out));

    std::fs::remove_file(lake.object_path(&b)).unwrap();
    error_kind(&get(), "object_missing");
    assert!(files_under(&out).is_empty());
}

/// A verified `cat` of an object larger than what it holds (64 MiB) streams it: a mismatch found
/// at its end leaves the bytes already written on standard output, says so, and exits 1.
#[test]
fn a_large_verified_cat_streams_and_a_late_mismatch_still_fails() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("lake").display().to_string();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let bytes: Vec<u8> = (0..(64 << 20) + 4096).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(src.join("big.bin"), &bytes).unwrap();
    ok(&["init", &root, "--min-age", "1h"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);
    let key = object_files(Path::new(&root)).pop().unwrap();
    let (sha, size) = (sha256_hex(&bytes), bytes.len().to_string());

    let o = run(&["cat", &root, &key, "--sha256", &sha, "--size", &size]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == bytes, "the whole object, verified");

    // The last byte changed: found only at the end, after 64 MiB were written.
    let mut corrupted = bytes.clone();
    *corrupted.last_mut().unwrap() ^= 1;
    std::fs::write(Path::new(&root).join(&key), &corrupted).unwrap();
    let o = run(&["cat", &root, &key, "--sha256", &sha, "--size", &size]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // What the store holds, up to the chunk whose end showed the mismatch.
    assert!(o.stdout.len() > 64 << 20 && corrupted.starts_with(&o.stdout), "{} bytes written", o.stdout.len());
    assert!(
        stderr(&o).contains("discard them") && stderr(&o).contains("does not match its reference"),
        "{}",
        stderr(&o)
    );
    let o = run(&["cat", &root, &key, "--sha256", &sha, "--size", &size, "--json"]);
    error_kind(&o, "object_mismatch");
}

/// `lake cat` and `lake get` on an `s3://` root (LocalStack): the bytes ingested come back,
/// verified, by key and by the object's `s3://` URI; an object replaced in place (one byte
/// changed, truncated, lengthened) fails a verified `cat` and `get` with `object_mismatch` and
/// `get` leaves no file; a missing object fails with `object_missing`.
#[test]
#[ignore = "needs LocalStack S3: run scripts/test.sh"]
fn s3_cat_and_get_read_objects_back_verified() {
    let bucket =
        std::env::var("LAKE_TEST_S3_BUCKET").expect("LAKE_TEST_S3_BUCKET is not set: run through scripts/test.sh");
    let root = format!("s3://{bucket}/cli-read-{}", ulid::Ulid::new().to_string().to_lowercase());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    write_files(&src, &FILES);
    ok(&["init", &root, "--min-age", "1h"]);
    ok(&["ingest", &root, "--table", "t", src.to_str().unwrap()]);

    // Every object of the table into a local folder: the files ingested, by key.
    let out = dir.path().join("out");
    let all = json(&ok(&["get", &root, "--table", "t", "--column", "file", out.to_str().unwrap(), "--json"]));
    assert_eq!((all["rows"].as_u64(), all["objects"].as_u64(), all["written"].as_u64()), (Some(4), Some(4), Some(4)));
    let key_of = |name: &str| -> String {
        files_under(&out).into_keys().find(|k| k.ends_with(&format!("/{name}"))).unwrap_or_else(|| panic!("{name}"))
    };
    for (path, text) in FILES {
        let name = path.rsplit_once('/').unwrap().1;
        assert_eq!(files_under(&out)[&key_of(name)], text.as_bytes(), "{name}");
    }

    // cat by key (verified) and by the object's s3:// URI (not verified): the bytes.
    let key = key_of("a.bin");
    let bytes = content("a.bin");
    let (sha, size) = (sha256_hex(bytes.as_bytes()), bytes.len().to_string());
    let o = run(&["cat", &root, &key, "--sha256", &sha, "--size", &size, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), bytes);
    assert_eq!(json(&stderr(&o))["verified"], true);
    let uri = format!("{root}/{key}");
    let o = run(&["cat", &root, &uri]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), bytes);
    assert!(stderr(&o).contains("NOT verified") && stderr(&o).contains(&sha), "{}", stderr(&o));

    // The object replaced in place: one byte changed, truncated, lengthened.
    let store = lake::store::LakeStore::open(&root).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut changed = bytes.as_bytes().to_vec();
    changed[5] ^= 0x01;
    let truncated = bytes.as_bytes()[..bytes.len() - 1].to_vec();
    let longer = [bytes.as_bytes(), b"!"].concat();
    let fresh = dir.path().join("fresh");
    for (what, replacement) in [("changed", changed), ("truncated", truncated), ("longer", longer)] {
        rt.block_on(store.put(&key, replacement.clone())).unwrap();
        let o = run(&["cat", &root, &key, "--sha256", &sha, "--size", &size, "--json"]);
        let error = error_kind(&o, "object_mismatch");
        assert!(error["error"]["message"].as_str().unwrap().contains(&key), "{what}: {error}");
        assert!(o.stdout.is_empty(), "{what}: nothing written before the check");
        let o = run(&[
            "get",
            &root,
            "--table",
            "t",
            "--where",
            "path = 'ep0/a.bin'",
            "--column",
            "file",
            fresh.to_str().unwrap(),
            "--json",
        ]);
        error_kind(&o, "object_mismatch");
        assert!(files_under(&fresh).is_empty(), "{what}: no file left: {:?}", files_under(&fresh));
        // Unverified, the bytes the store holds now.
        let o = run(&["cat", &root, &key]);
        assert!(o.status.success(), "{what}: {}", stderr(&o));
        assert_eq!(o.stdout, replacement, "{what}");
    }

    // A missing object, verified or not.
    rt.block_on(store.delete(&key)).unwrap();
    error_kind(&run(&["cat", &root, &key, "--sha256", &sha, "--size", &size, "--json"]), "object_missing");
    error_kind(&run(&["cat", &root, &key, "--json"]), "object_missing");
}
