//! `lake refs verify`, `lake refs repair`.

use crate::cli::{RefsCommand, RepairArgs, VerifyArgs};
use crate::commands::{open_lake, print_json};
use crate::error::{memory_budget_bytes, CliError};
use serde_json::json;

/// Runs a `lake refs` subcommand.
///
/// # Errors
/// Engine errors; [`CliError::Exit`] when verification finds differences.
pub async fn run(command: &RefsCommand) -> Result<(), CliError> {
    match command {
        RefsCommand::Verify(a) => verify(a).await,
        RefsCommand::Repair(a) => repair(a).await,
    }
}

async fn verify(args: &VerifyArgs) -> Result<(), CliError> {
    let budget = memory_budget_bytes(args.memory_budget_mib)?;
    let (_, _, engine) = open_lake(&args.root).await?;
    let engine = engine.with_memory_budget(budget);
    let tables: Vec<String> = args.table.iter().cloned().collect();
    let report = engine.verify_refs(&tables).await?;
    if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["ok"] = json!(report.is_ok());
        print_json(&v);
    } else {
        println!("scanned {} retained versions ({} references)", report.versions_scanned, report.references_scanned);
        for p in &report.problems {
            println!("  lineage problem: {p}");
        }
        for m in &report.mismatches {
            println!(
                "  table `{}` version {}: {} journal count {} != scanned count {}",
                m.table, m.version, m.uri, m.journal, m.scan
            );
        }
        more(report.mismatch_count, report.mismatches.len(), "count differences");
        for m in &report.missing_objects {
            println!("  missing object: {m}");
        }
        more(report.missing_object_count, report.missing_objects.len(), "missing objects");
        for m in &report.size_mismatches {
            println!("  size differs: {m}");
        }
        more(report.size_mismatch_count, report.size_mismatches.len(), "size differences");
        println!("{}", if report.is_ok() { "journal matches the tables" } else { "DIFFERENCES FOUND" });
    }
    if report.is_ok() {
        Ok(())
    } else {
        Err(CliError::Exit { code: 1, message: "the journal does not match the tables (see the report)".into() })
    }
}

/// Says how many of a capped list were not printed.
fn more(total: u64, listed: usize, what: &str) {
    if total > listed as u64 {
        println!("  ... {total} {what} in total, the first {listed} listed");
    }
}

async fn repair(args: &RepairArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let snapshot = engine.repair_refs(&args.table.table, args.version).await?;
    let refs: u64 = snapshot.added.iter().map(|e| e.count).sum();
    if args.table.json {
        print_json(
            &json!({"table": snapshot.table, "version": snapshot.version, "kind": "snapshot", "references": refs, "objects": snapshot.added.len()}),
        );
    } else {
        println!(
            "journal entry of `{}` version {} rebuilt from a scan: a snapshot of {} references to {} objects",
            snapshot.table,
            snapshot.version,
            refs,
            snapshot.added.len()
        );
    }
    Ok(())
}
