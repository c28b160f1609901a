//! The benchmark binary runs end to end at a tiny size and prints every figure as `name: value`.

use crate::run_and_check_figures;

#[test]
fn lake_bench_prints_every_figure() {
    let text = run_and_check_figures(
        &["--rows", "5000", "--objects", "200", "--versions", "5", "--repeat", "1", "--skip-s3"],
        &[
            "append_throughput_ratio",
            "append_peak_rss_ratio",
            "plan_speedup_vs_full_scan",
            "plan_vs_listing_ratio",
            "plan_peak_rss_growth_10x",
        ],
    );
    assert!(text.contains("bulk_delete_speedup skipped"));
}
