//! `lake-bench --only memory` runs end to end at a tiny size and prints both memory figures.

use crate::run_and_check_figures;

#[test]
fn lake_bench_prints_the_memory_figures() {
    let text = run_and_check_figures(
        &["--only", "memory", "--ingest-files", "30", "--verify-references", "3000", "--repeat", "1"],
        &["ingest_peak_rss_growth_10x", "verify_peak_rss_growth_10x"],
    );
    assert!(text.contains("# ingest peak RSS: 1x ") && text.contains("# verify peak RSS: 1x "), "{text}");
}
