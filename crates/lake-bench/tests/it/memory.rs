//! `lake-bench --only memory` runs end to end at a tiny size and prints both memory figures.

use std::process::Command;

#[test]
fn lake_bench_prints_the_memory_figures() {
    let out = Command::new(env!("CARGO_BIN_EXE_lake-bench"))
        .args(["--only", "memory", "--ingest-files", "30", "--verify-references", "3000", "--repeat", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for name in ["ingest_peak_rss_growth_10x", "verify_peak_rss_growth_10x"] {
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
            .parse()
            .unwrap();
        assert!(value.is_finite() && value > 0.0, "{name}: {value}");
    }
    assert!(text.contains("# ingest peak RSS: 1x ") && text.contains("# verify peak RSS: 1x "), "{text}");
}
