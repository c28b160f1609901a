//! The benchmark binary runs end to end at a tiny size and prints every figure as `name: value`.

use std::process::Command;

#[test]
fn lake_bench_prints_every_figure() {
    let out = Command::new(env!("CARGO_BIN_EXE_lake-bench"))
        .args(["--rows", "5000", "--objects", "200", "--versions", "5", "--repeat", "1", "--skip-s3"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    for name in [
        "append_throughput_ratio",
        "append_peak_rss_ratio",
        "plan_speedup_vs_full_scan",
        "plan_vs_listing_ratio",
        "plan_peak_rss_growth_10x",
    ] {
        let value: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} missing in:\n{text}"))
            .parse()
            .unwrap();
        assert!(value.is_finite() && value > 0.0, "{name}: {value}");
    }
    assert!(text.contains("bulk_delete_speedup skipped"));
}
