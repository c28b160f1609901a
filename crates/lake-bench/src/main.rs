//! `lake-bench`: side-by-side benchmarks of lake's cost targets (README, "Benchmarks"), on synthetic lakes it
//! builds itself. Run `cargo run --release -p lake-bench --features bench`; sizes are flags.
//! Prints one `name: value` line per figure; `#` lines describe the setup. Each ratio compares two
//! measurements taken in the same run, back to back and alternating; a ratio is the median of the
//! `--repeat` per-pair ratios (these machines are shared and noisy). Peak memory is measured in child processes (`VmHWM`).

mod append;
mod changes;
mod incremental;
mod inventory_report;
mod lakes;
mod latency_proxy;
mod listing;
mod memory;
mod plan;
mod rss;
mod s3;
mod snapshots;
mod two_phase;
mod upsert;

use clap::Parser;

/// Benchmarks of journaled appends, journal-based planning and bulk deletes.
#[derive(Debug, Parser)]
#[command(name = "lake-bench", version)]
pub struct Args {
    /// Rows per append (one DataLocation per row).
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: usize,
    /// Managed objects in the planning lake (1x; the growth figure also builds 10x).
    #[arg(long, default_value_t = 20_000)]
    pub objects: usize,
    /// Retained versions in the planning lake.
    #[arg(long, default_value_t = 100)]
    pub versions: usize,
    /// Planning's memory budget in KiB (`lake gc --memory-budget-mib`, here finer): half for live
    /// keys, half for the replayed journal. The default lets the 1x lake plan in memory and makes
    /// the 10x lake spill, so the growth figure shows memory bounded by the budget, not the lake.
    #[arg(long, default_value_t = 4096)]
    pub memory_budget_kib: usize,
    /// Tiny files of the 1x ingest of `ingest_peak_rss_growth_10x` (the 10x ingest has ten
    /// times as many), 1000 per folder.
    #[arg(long, default_value_t = 20_000)]
    pub ingest_files: usize,
    /// References of the 1x lake of `verify_peak_rss_growth_10x` (the 10x lake has ten times as
    /// many): 4 rows per object, 10,000 rows per appended version, 2 retained versions; both are
    /// verified with `--memory-budget-kib` (rounded up to MiB).
    #[arg(long, default_value_t = 100_000)]
    pub verify_references: usize,
    /// Rows of the table and of each upsert in `upsert_time_ratio` (half replace, half new).
    #[arg(long, default_value_t = 100_000)]
    pub upsert_rows: usize,
    /// Table rows of the second `upsert_time_ratio` (an upsert of `--upsert-small-rows` rows).
    #[arg(long, default_value_t = 1_000_000)]
    pub upsert_large_table_rows: usize,
    /// Rows of the upsert into `--upsert-large-table-rows` (half replace, half new).
    #[arg(long, default_value_t = 1_000)]
    pub upsert_small_rows: usize,
    /// References per table of the 1x lake of the `snapshots` group (the 10x lake has ten times
    /// as many) and of the `shards` lake.
    #[arg(long, default_value_t = 1_000_000)]
    pub snapshot_references: usize,
    /// Memory budget of the `snapshots` and `shards` groups' repairs and dry runs, in MiB (as
    /// `lake gc --memory-budget-mib`).
    #[arg(long, default_value_t = 64)]
    pub snapshot_budget_mib: usize,
    /// Internal: the key range (JSON) a child dry run plans.
    #[arg(long, hide = true)]
    pub shard_range: Option<String>,
    /// Table rows of `update_time_ratio` and `delete_time_ratio`.
    #[arg(long, default_value_t = 1_000_000)]
    pub change_table_rows: usize,
    /// Rows each update or delete of `update_time_ratio` and `delete_time_ratio` changes (spread
    /// over the table: `id % (table rows / changed rows) = i`).
    #[arg(long, default_value_t = 1_000)]
    pub changed_rows: usize,
    /// Objects deleted per side in the bulk-delete figure (needs LocalStack).
    #[arg(long, default_value_t = 2_000)]
    pub delete_objects: usize,
    /// Objects in the lake of `parallel_listing_speedup` (`--only list-s3`, on LocalStack; about
    /// 700 to 1000 PUTs a second there).
    #[arg(long, default_value_t = 50_000)]
    pub list_objects: usize,
    /// Listing streams of `parallel_listing_speedup` (against one).
    #[arg(long, default_value_t = 8)]
    pub list_streams: usize,
    /// Keys per listing request in `parallel_listing_speedup` (1 to 1000).
    #[arg(long, default_value_t = 1000)]
    pub list_page_size: usize,
    /// Milliseconds the latency proxy in front of LocalStack adds to every request in
    /// `parallel_listing_speedup` (about an S3 ListObjectsV2 round trip).
    #[arg(long, default_value_t = 30)]
    pub proxy_delay_ms: u64,
    /// Measurements per side; a ratio is the median of the per-pair ratios.
    #[arg(long, default_value_t = 7)]
    pub repeat: usize,
    /// Skip the S3 figures even when LocalStack is configured.
    #[arg(long)]
    pub skip_s3: bool,
    /// Run only these groups of figures (comma-separated): append (throughput and peak RSS),
    /// plan (speedup, listing ratio, RSS growth), delete (bulk deletes on LocalStack), and
    /// plan-s3 (the speedup on LocalStack S3, about 4 minutes here: only when named), and
    /// memory (peak RSS of `lake ingest` and `lake refs verify` at 1x and 10x: only when named),
    /// and upsert (an engine upsert vs plain Lance's merge insert: only when named), update and
    /// row-delete (an engine update or delete vs plain Lance's: only when named), and list-s3
    /// (parallel vs single listing on LocalStack through a latency proxy: only when named), and
    /// incremental (incremental vs full plans after a change of 1%: only when named), and
    /// two-phase (a two-phase append vs Lance's own: only when named).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub only: Vec<Group>,
    /// Internal: run one measured step in a child process.
    #[arg(long, hide = true)]
    pub child: Option<String>,
    /// Internal: the lake root of a child step.
    #[arg(long, hide = true)]
    pub root: Option<String>,
    /// Internal: the folder a child step ingests.
    #[arg(long, hide = true)]
    pub dir: Option<std::path::PathBuf>,
    /// Objects in the lake of `plan_from_inventory_vs_listing` (`--only inventory-s3`, on
    /// LocalStack).
    #[arg(long, default_value_t = 200_000)]
    pub inventory_objects: usize,
    /// Internal: the cutoff of a child plan, milliseconds since the epoch (UTC).
    #[arg(long, hide = true)]
    pub cutoff_ms: Option<i64>,
    /// Internal: the S3 Inventory manifest a child plan reads.
    #[arg(long, hide = true)]
    pub inventory: Option<String>,
    /// Objects in the local lake of `incremental_plan_vs_full` (`--only incremental`).
    #[arg(long, default_value_t = 1_000_000)]
    pub incremental_objects: usize,
    /// Objects in the LocalStack lake of `incremental_plan_vs_full_s3` (`--only incremental`,
    /// under scripts/localstack.sh; about 700 to 1000 PUTs a second there).
    #[arg(long, default_value_t = 200_000)]
    pub incremental_s3_objects: usize,
    /// Internal: a child plan of the `incremental` group is full (else incremental).
    #[arg(long, hide = true)]
    pub full_plan: bool,
    /// Pieces of the two-phase write of `two_phase_append_vs_lance` (`--only two-phase`), which
    /// share `--rows` rows evenly.
    #[arg(long, default_value_t = 4)]
    pub pieces: usize,
}

/// A group of figures measured together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Group {
    /// `append_throughput_ratio`, `append_peak_rss_ratio`.
    Append,
    /// `plan_speedup_vs_full_scan`, `plan_vs_listing_ratio`, `plan_peak_rss_growth_10x`.
    Plan,
    /// `plan_speedup_vs_full_scan_s3`: the planning speedup on LocalStack S3 (not run by default:
    /// a full scan of 100 versions there takes about 35 s).
    PlanS3,
    /// `bulk_delete_speedup`.
    Delete,
    /// `ingest_peak_rss_growth_10x`, `ingest_peak_rss_vs_lance` (the 10x ingest vs a plain Lance
    /// write of as many rows), `verify_peak_rss_growth_10x`: peak RSS of `lake ingest` of
    /// `--ingest-files` vs ten times as many files, and of `lake refs verify` of a lake of
    /// `--verify-references` vs ten times as many (not run by default: several minutes).
    Memory,
    /// `upsert_time_ratio`: an upsert of `--upsert-rows` rows into as many, and of
    /// `--upsert-small-rows` into `--upsert-large-table-rows`, through the engine vs plain
    /// Lance's merge insert (not run by default).
    Upsert,
    /// `update_time_ratio`: an update of `--changed-rows` rows of a `--change-table-rows`-row
    /// table through the engine vs plain Lance (not run by default).
    Update,
    /// `delete_time_ratio`: a delete of `--changed-rows` rows of a `--change-table-rows`-row
    /// table through the engine vs plain Lance (not run by default).
    RowDelete,
    /// `repair_peak_rss_growth_10x`, `snapshot_plan_peak_rss_growth_10x`,
    /// `plan_time_per_million_refs`: repair and a dry run of a lake whose entries are snapshots of
    /// `--snapshot-references` references per table vs ten times as many (not run by default:
    /// the 10x lake takes minutes to build).
    Snapshots,
    /// `shard_journal_bytes_ratio`: the journal bytes one of 8 shards reads vs an unsharded plan
    /// (not run by default).
    Shards,
    /// `parallel_listing_speedup`: a listing of `--list-objects` objects on LocalStack with
    /// `--list-streams` streams vs one, through a proxy adding `--proxy-delay-ms` per request (not
    /// run by default: filling LocalStack takes minutes).
    ListS3,
    /// `plan_from_inventory_vs_listing`: a dry run of `--inventory-objects` objects on LocalStack
    /// from an S3 Inventory report vs from a full listing, through the latency proxy (not run by
    /// default: filling LocalStack takes minutes).
    InventoryS3,
    /// `incremental_plan_vs_full` (local, `--incremental-objects`) and, on LocalStack through the
    /// latency proxy, `incremental_plan_vs_full_s3` and `incremental_list_requests_vs_full_s3`
    /// (`--incremental-s3-objects`): after a change of 1% since the last complete GC run, an
    /// incremental plan vs a full plan at the same cutoff, same candidates (not run by default:
    /// the lakes take minutes to build).
    Incremental,
    /// `two_phase_append_vs_lance`: a two-phase append of `--rows` rows in `--pieces` pieces
    /// through the engine (`prepare_append`, `commit_pieces`) vs Lance's own (uncommitted
    /// inserts, one commit of their fragments), in one process (not run by default).
    TwoPhase,
}

/// The median of the ratios `numerators[i] / denominators[i]` of samples taken side by side, one
/// pair per repetition, back to back; 0 when there are none. On a shared machine whose load drifts
/// between repetitions, each pair's ratio compares two measurements taken under the same load,
/// where a ratio of two medians can pair a quiet sample of one side with a busy one of the other.
pub fn median_ratio(numerators: &[std::time::Duration], denominators: &[std::time::Duration]) -> f64 {
    let mut ratios: Vec<f64> =
        numerators.iter().zip(denominators).map(|(n, d)| n.as_secs_f64() / d.as_secs_f64().max(1e-9)).collect();
    ratios.sort_by(f64::total_cmp);
    ratios.get(ratios.len() / 2).copied().unwrap_or(0.0)
}

/// Durations as a list of seconds, for the `#` lines that show every sample.
pub fn seconds(samples: &[std::time::Duration]) -> String {
    samples.iter().map(|d| format!("{:.3}", d.as_secs_f64())).collect::<Vec<_>>().join(" ")
}

/// The median of `samples` (durations, or peak RSS in KiB); the default when empty.
pub fn median<T: Ord + Copy + Default>(mut samples: Vec<T>) -> T {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// Structured logs on stderr, filtered by `LAKE_LOG` in tracing's env-filter syntax (errors only
/// when unset, so the figures on stdout stand alone): `LAKE_LOG=lake_lance=debug` shows each
/// append's phases (data files, commit, journal), `LAKE_LOG=lake_gc=debug` those of each plan.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::from_env("LAKE_LOG");
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

fn main() {
    let args = Args::parse();
    // As the `lake` binary does for `gc`, `refs verify` and `refs repair`, before any thread
    // starts: the children that measure those jobs run under its policy.
    if matches!(args.child.as_deref(), Some("plan" | "plan-state" | "repair" | "snapshot-plan" | "verify")) {
        lake_engine::allocator::limit_malloc_arenas();
    }
    init_logging();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let result = runtime.block_on(async {
        match args.child.as_deref() {
            Some(step) => rss::run_child(step, &args).await,
            None => run(&args).await,
        }
    });
    if let Err(e) = result {
        eprintln!("lake-bench: {e}");
        std::process::exit(1);
    }
}

async fn run(args: &Args) -> Result<(), String> {
    println!(
        "# lake-bench: rows {}, objects {}, versions {}, repeat {}",
        args.rows, args.objects, args.versions, args.repeat
    );
    let wanted = |g: Group| args.only.is_empty() || args.only.contains(&g);
    if wanted(Group::Append) {
        append::throughput(args).await?;
        rss::append_peak_rss(args)?;
    }
    if wanted(Group::Plan) {
        plan::figures(args).await?;
    }
    if args.only.contains(&Group::PlanS3) {
        if args.skip_s3 {
            println!("# plan_speedup_vs_full_scan_s3 skipped (--skip-s3)");
        } else {
            plan::s3_speedup(args).await?;
        }
    }
    if args.only.contains(&Group::Memory) {
        memory::figures(args).await?;
    }
    if args.only.contains(&Group::Upsert) {
        upsert::time_ratio(args).await?;
    }
    if args.only.contains(&Group::Update) {
        changes::update_ratio(args).await?;
    }
    if args.only.contains(&Group::RowDelete) {
        changes::delete_ratio(args).await?;
    }
    if args.only.contains(&Group::Snapshots) {
        snapshots::figures(args).await?;
    }
    if args.only.contains(&Group::Shards) {
        snapshots::shard_figures(args).await?;
    }
    if args.only.contains(&Group::ListS3) {
        if args.skip_s3 {
            println!("# parallel_listing_speedup skipped (--skip-s3)");
        } else {
            listing::speedup(args).await?;
        }
    }
    if args.only.contains(&Group::InventoryS3) {
        if args.skip_s3 {
            println!("# plan_from_inventory_vs_listing skipped (--skip-s3)");
        } else {
            inventory_report::ratio(args).await?;
        }
    }
    if args.only.contains(&Group::Incremental) {
        incremental::figures(args).await?;
    }
    if args.only.contains(&Group::TwoPhase) {
        two_phase::ratio(args).await?;
    }
    if !wanted(Group::Delete) {
    } else if args.skip_s3 {
        println!("# bulk_delete_speedup skipped (--skip-s3)");
    } else {
        s3::bulk_delete(args).await?;
    }
    Ok(())
}
