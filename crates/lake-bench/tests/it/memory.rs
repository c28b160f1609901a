//! `lake-bench --only memory`, `upsert`, `update`, `row-delete`, `snapshots`, `shards` and `incremental` run end
//! to end at tiny sizes and print their figures.

use crate::run_and_check_figures;

#[test]
fn lake_bench_prints_the_memory_figures() {
    let text = run_and_check_figures(
        &["--only", "memory", "--ingest-files", "30", "--verify-references", "3000", "--repeat", "1"],
        &["ingest_peak_rss_growth_10x", "ingest_peak_rss_vs_lance", "verify_peak_rss_growth_10x"],
    );
    assert!(text.contains("# ingest peak RSS: 1x ") && text.contains("# verify peak RSS: 1x "), "{text}");
}

#[test]
fn lake_bench_prints_the_upsert_figure() {
    let args = ["--only", "upsert", "--upsert-rows", "2000", "--upsert-large-table-rows", "4000"];
    let text = run_and_check_figures(
        &[&args[..], &["--upsert-small-rows", "40", "--repeat", "1"]].concat(),
        &["upsert_time_ratio"],
    );
    assert!(text.contains("# upsert of 2000 rows (1000 replacing, 1000 new)"), "{text}");
    assert!(text.contains("upsert_time_ratio: ") && text.contains("(40 rows into 4000)"), "{text}");
}

#[test]
fn lake_bench_prints_the_update_and_delete_figures() {
    let args = ["--only", "update,row-delete", "--change-table-rows", "4000", "--changed-rows", "4", "--repeat", "1"];
    run_and_check_figures(&args, &["update_time_ratio", "delete_time_ratio"]);
}

#[test]
fn lake_bench_prints_the_snapshot_and_shard_figures() {
    let args = ["--only", "snapshots,shards", "--snapshot-references", "3000", "--snapshot-budget-mib", "1"];
    let figures = [
        "repair_peak_rss_growth_10x",
        "snapshot_plan_peak_rss_growth_10x",
        "plan_time_per_million_refs",
        "shard_journal_bytes_ratio",
    ];
    let text = run_and_check_figures(&args, &figures);
    assert!(text.contains("# snapshot lakes: 3000 and 30000 references per table"), "{text}");
}

#[test]
fn lake_bench_prints_the_incremental_figure() {
    let args = ["--only", "incremental", "--incremental-objects", "3000", "--repeat", "1", "--skip-s3"];
    let text = run_and_check_figures(&args, &["incremental_plan_vs_full"]);
    // Both plans found the change's garbage, the same candidates (the run fails otherwise).
    assert!(text.contains("same candidates"), "{text}");
    assert!(text.contains("incremental_plan_vs_full_s3 skipped"), "{text}");
}
