//! Tests of the `lake` binary: the operator's contract (one test binary per crate).

mod ingest;
mod refusals;
mod s3;
mod workflow;

use std::path::Path;
use std::process::{Command, Output};

/// Runs `lake ARGS` and returns its output.
pub fn lake(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lake")).args(args).output().expect("run lake")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

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
