//! `lake-bench --only memory` and `--only upsert` run end to end at tiny sizes and print their
//! figures.

use crate::run_and_check_figures;

#[test]
fn lake_bench_prints_the_memory_figures() {
    let text = run_and_check_figures(
        &["--only", "memory", "--ingest-files", "30", "--verify-references", "3000", "--repeat", "1"],
        &["ingest_peak_rss_growth_10x", "verify_peak_rss_growth_10x"],
    );
    assert!(text.contains("# ingest peak RSS: 1x ") && text.contains("# verify peak RSS: 1x "), "{text}");
}

#[test]
fn lake_bench_prints_the_upsert_figure() {
    let text =
        run_and_check_figures(&["--only", "upsert", "--upsert-rows", "2000", "--repeat", "1"], &["upsert_time_ratio"]);
    assert!(text.contains("# upsert of 2000 rows (1000 replacing, 1000 new)"), "{text}");
}
