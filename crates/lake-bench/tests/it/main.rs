//! Tests of the `lake-bench` binary: it runs end to end at tiny sizes and prints its figures
//! (one test binary per crate).

mod bench;
mod memory;

use std::process::Command;

/// Runs `lake-bench` with `args`, asserts it succeeded, and returns its stdout after checking that
/// each of `figures` is printed as `name: value` with a finite, positive value.
pub fn run_and_check_figures(args: &[&str], figures: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lake-bench")).args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for name in figures {
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap();
        assert!(value.is_finite() && value > 0.0, "{name}: {value}");
    }
    text
}
