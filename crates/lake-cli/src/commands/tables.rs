//! `lake delete`, `lake compact`, `lake cleanup`, `lake versions`.

use crate::cli::{CleanupArgs, DeleteArgs, TableArgs, VersionsArgs};
use crate::commands::{open_lake, print_json};
use crate::error::{parse_duration, CliError};
use serde_json::json;

/// Runs `lake delete`.
///
/// # Errors
/// Engine errors (an invalid predicate among them).
pub async fn delete(args: &DeleteArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let outcome = engine.delete(&args.table.table, &args.predicate).await?;
    match (outcome, args.table.json) {
        (Some(o), true) => print_json(
            &json!({"table": o.table, "version": o.version, "rows_deleted": o.rows, "references_removed": o.references_removed}),
        ),
        (None, true) => {
            print_json(&json!({"table": args.table.table, "version": null, "rows_deleted": 0, "references_removed": 0}))
        }
        (Some(o), false) => println!(
            "deleted {} rows from `{}` as version {} ({} references removed)",
            o.rows, o.table, o.version, o.references_removed
        ),
        (None, false) => println!("no rows of `{}` matched; no new version", args.table.table),
    }
    Ok(())
}

/// Runs `lake compact`.
///
/// # Errors
/// Engine errors.
pub async fn compact(args: &TableArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.root).await?;
    let outcome = engine.compact(&args.table).await?;
    match (outcome, args.json) {
        (Some(o), true) => print_json(&json!({"table": o.table, "version": o.version})),
        (None, true) => print_json(&json!({"table": args.table, "version": null})),
        (Some(o), false) => println!("compacted `{}` as version {}", o.table, o.version),
        (None, false) => println!("nothing to compact in `{}`", args.table),
    }
    Ok(())
}

/// Runs `lake cleanup`.
///
/// # Errors
/// Usage errors for a bad duration; engine errors.
pub async fn cleanup(args: &CleanupArgs) -> Result<(), CliError> {
    let older_than = parse_duration("--older-than", &args.older_than)?;
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let o = engine.cleanup(&args.table.table, older_than).await?;
    if args.table.json {
        print_json(
            &json!({"table": args.table.table, "old_versions": o.old_versions, "bytes_removed": o.bytes_removed}),
        );
    } else {
        println!(
            "removed {} old versions of `{}` ({} bytes of Lance files)",
            o.old_versions, args.table.table, o.bytes_removed
        );
    }
    Ok(())
}

/// Runs `lake versions`.
///
/// # Errors
/// Engine errors.
pub async fn versions(args: &VersionsArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let versions = engine.versions(&args.table.table).await?;
    if args.table.json {
        print_json(&json!({"table": args.table.table, "versions": versions}));
    } else {
        println!("{:>8}  {:<24}  {:<9}  tags", "version", "timestamp (UTC)", "journaled");
        for v in versions {
            println!(
                "{:>8}  {:<24}  {:<9}  {}",
                v.version,
                v.timestamp,
                if v.journaled { "yes" } else { "NO" },
                v.tags.join(",")
            );
        }
    }
    Ok(())
}
