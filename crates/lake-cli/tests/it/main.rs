//! Tests of the `lake` binary: the operator's contract (one test binary per crate).

mod garbage;
mod incremental;
mod ingest;
mod intents;
mod objects;
mod outputs;
mod refusals;
mod s3;
mod shards;
mod workflow;
mod write_refusals;

use std::path::Path;
use std::process::{Command, Output};

thread_local! {
    /// How far this test moved the store's clock forward (test builds of `lake` read
    /// `LAKE_UNCHECKED_CLOCK_SHIFT`; see `lake::store::clock`). Each test runs on its own thread.
    static CLOCK_SHIFT: std::cell::Cell<std::time::Duration> = const { std::cell::Cell::new(std::time::Duration::ZERO) };
}

/// Moves the store's clock as `lake gc` sees it forward by `by`, instead of sleeping: objects
/// uploaded so far are that much older for every later command of this test.
pub fn advance_clock(by: std::time::Duration) {
    CLOCK_SHIFT.with(|c| c.set(c.get() + by));
}

/// The `lake` binary, with this test's clock shift ([`advance_clock`]).
pub fn lake_command() -> Command {
    let shift = CLOCK_SHIFT.with(|c| c.get());
    let mut command = Command::new(env!("CARGO_BIN_EXE_lake"));
    command.env("LAKE_UNCHECKED_CLOCK_SHIFT", format!("{}ms", shift.as_millis()));
    // The guard of the binary's writes reads a clock an hour behind: these tests use floors of a
    // few seconds for GC, and a loaded machine must not make an ingest's objects too old to
    // publish (the guard is tested in lake-lance with an injected clock).
    command.env("LAKE_UNCHECKED_WRITER_CLOCK_BEHIND", "1h");
    command
}

/// Parses a command's JSON output, naming it when it is not JSON.
pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// Runs `lake ARGS` and returns its output.
pub fn lake(args: &[&str]) -> Output {
    lake_command().args(args).output().expect("run lake")
}

/// A command's standard output as text (lossy UTF-8).
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command's standard error as text (lossy UTF-8).
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs and asserts success, returning stdout.
pub fn ok(args: &[&str]) -> String {
    let o = lake(args);
    assert!(o.status.success(), "lake {args:?} failed: {}{}", stdout(&o), stderr(&o));
    stdout(&o)
}

/// Writes `files` (relative path, content) under `dir`.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

/// Every file under `dir/objects`, relative to `dir`.
pub fn object_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.join("objects")];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Every path under `dir` (folders and links too, links not followed) with a file's bytes or a
/// link's target: compared before and after a command, it shows any change under `dir`.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
    fn walk(base: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                out.insert(format!("{rel}/"), None);
                walk(base, &path, out);
            } else if meta.file_type().is_symlink() {
                out.insert(rel, Some(std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes()));
            } else {
                out.insert(rel, std::fs::read(&path).ok());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}
