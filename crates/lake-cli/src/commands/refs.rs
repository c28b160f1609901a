//! `lake refs verify`, `lake refs repair`, `lake refs bind`, `lake refs recover`.

use crate::cli::{RecoverArgs, RefsCommand, RepairArgs, VerifyArgs};
use crate::commands::{open_lake, print_json};
use crate::error::{memory_budget_bytes, CliError};
use serde_json::json;

/// Runs a `lake refs` subcommand.
///
/// # Errors
/// Engine errors; [`CliError::Exit`] when verification finds differences.
pub(crate) async fn run(command: &RefsCommand) -> Result<(), CliError> {
    match command {
        RefsCommand::Verify(a) => verify(a).await,
        RefsCommand::Repair(a) => repair(a).await,
        RefsCommand::Bind(a) => bind(a).await,
        RefsCommand::Recover(a) => recover(a).await,
    }
}

/// `lake refs bind` takes the arguments of `lake refs verify` (it runs its comparison).
async fn bind(args: &VerifyArgs) -> Result<(), CliError> {
    let (store, _, engine) = open_lake(&args.root).await?;
    let engine = engine.with_memory_budget(args.memory_budget_mib.saturating_mul(1024 * 1024));
    let tables = match &args.table {
        Some(t) => vec![t.clone()],
        None => lake::store::registry::tables(&store).await?,
    };
    let mut bound = Vec::new();
    let mut refused = Vec::new();
    for table in &tables {
        match engine.bind_refs(table).await {
            Ok(report) => bound.push(report),
            Err(e @ lake::lance::LanceEngineError::InvalidInput(_)) => refused.push((table.clone(), e.to_string())),
            Err(e) => return Err(e.into()),
        }
    }
    if args.json {
        let refused: Vec<_> = refused.iter().map(|(t, why)| json!({"table": t, "reason": why})).collect();
        print_json(&json!({"ok": refused.is_empty(), "tables": bound, "refused": refused}));
    } else {
        for r in &bound {
            match r.bound.as_slice() {
                [] => println!(
                    "table `{}`: {} retained versions match the journal; nothing to bind",
                    r.table, r.versions_compared
                ),
                versions => println!(
                    "table `{}`: {} retained versions match the journal; bound the entries of versions {:?}",
                    r.table, r.versions_compared, versions
                ),
            }
        }
        for (_, why) in &refused {
            println!("{why}");
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(CliError::Exit {
            kind: lake::common::ErrorKind::LineageIncomplete,
            message: format!("{} table(s) not bound (see the report)", refused.len()),
        })
    }
}

async fn recover(args: &RecoverArgs) -> Result<(), CliError> {
    use lake::lance::commit::Resolution;
    use lake::lance::commit::VersionRecovery;
    let (_, _, engine) = open_lake(&args.root).await?;
    if let Some(table) = &args.table {
        lake::store::layout::validate_table_name(table)?;
    }
    let options = lake::lance::commit::RecoverOptions {
        wait: if args.no_wait { lake::lance::commit::Wait::No } else { lake::lance::commit::Wait::UntilDue },
        progress: Some(std::sync::Arc::new(|line: &str| eprintln!("lake: {line}"))),
    };
    let report = engine.recover_writes_with(args.table.as_deref(), &options).await?;
    if args.json {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["pending"] = json!(report.pending());
        v["left"] = json!(report.left());
        print_json(&v);
    } else {
        if report.intents.is_empty() {
            println!("no write intents: every commit is resolved");
        }
        for i in &report.intents {
            let what = match &i.resolution {
                Resolution::Committed { version } => format!("committed as version {version}, journaled"),
                Resolution::Abandoned { proof: 0 } => {
                    "not committed: its branch is not registered (deleted, or its creation did not finish); intent and log removed. If `lake gc` names what is left of the branch, `lake branch delete` removes it".to_string()
                }
                Resolution::Abandoned { proof } => {
                    format!("not committed (revoked; version {proof}, committed after that, is not its write); intent and log removed")
                }
                Resolution::CleanedUp { proof, versions } => format!(
                    "can no longer land (revoked; version {proof} written after that); whether it landed cannot be told: version(s) {versions:?} were cleaned up since; intent and log removed"
                ),
                Resolution::Pending { reason } => format!("PENDING: {reason}"),
            };
            let what = crate::remedy::with_hints(&what, "    ");
            println!("  {} ({} on `{}`, written {}): {what}", i.key, i.operation, i.table, i.written);
        }
        if report.stray_markers_removed > 0 {
            println!("  removed {} markers whose intent was already resolved", report.stray_markers_removed);
        }
        for v in &report.versions {
            let what = match &v.outcome {
                VersionRecovery::Journaled { operation, added, removed } => {
                    format!("committed by this lake ({operation}), journaled: +{added} -{removed} references")
                }
                VersionRecovery::Left { reason } => format!("LEFT: {reason}"),
            };
            let what = crate::remedy::with_hints(&what, "    ");
            println!("  table `{}` version {} had no journal entry: {what}", v.table, v.version);
        }
    }
    match (report.pending(), report.left()) {
        (0, 0) => Ok(()),
        (pending, 0) => Err(CliError::Exit {
            kind: lake::common::ErrorKind::Incomplete,
            message: format!("{pending} write intent(s) still pending; their objects stay protected (see the report)"),
        }),
        (pending, left) => Err(CliError::Exit {
            kind: lake::common::ErrorKind::LineageIncomplete,
            message: format!(
                "{left} version(s) without a journal entry are not provably this lake's and {pending} write intent(s) are pending; GC refuses until each is journaled (see the report for the command)"
            ),
        }),
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
        Err(CliError::Exit {
            kind: lake::common::ErrorKind::LineageIncomplete,
            message: "the journal does not match the tables (see the report)".into(),
        })
    }
}

/// Says how many of a capped list were not printed.
fn more(total: u64, listed: usize, what: &str) {
    if total > listed as u64 {
        println!("  ... {total} {what} in total, the first {listed} listed");
    }
}

async fn repair(args: &RepairArgs) -> Result<(), CliError> {
    let budget = crate::error::memory_budget_bytes(args.memory_budget_mib)?;
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let engine = engine.with_memory_budget(budget);
    let entry = engine.repair_refs(&args.table.table, args.version).await?;
    if args.table.json {
        print_json(
            &json!({"table": entry.table, "version": entry.version, "kind": "snapshot", "references": entry.references, "objects": entry.objects, "spilled_runs": entry.spilled_runs}),
        );
    } else {
        println!(
            "journal entry of `{}` version {} rebuilt from a scan: a snapshot of {} references to {} objects",
            entry.table, entry.version, entry.references, entry.objects
        );
    }
    Ok(())
}
