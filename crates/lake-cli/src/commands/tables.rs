//! `lake delete`, `lake compact`, `lake cleanup`, `lake versions`, `lake config`.

use crate::cli::{CleanupArgs, ConfigArgs, DeleteArgs, TableArgs, VersionsArgs};
use crate::commands::{open_lake, print_json};
use crate::error::{parse_duration, CliError};
use serde_json::json;

/// Runs `lake delete`.
///
/// # Errors
/// Engine errors (an invalid predicate among them).
pub(crate) async fn delete(args: &DeleteArgs) -> Result<(), CliError> {
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
pub(crate) async fn compact(args: &TableArgs) -> Result<(), CliError> {
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
pub(crate) async fn cleanup(args: &CleanupArgs) -> Result<(), CliError> {
    let older_than = parse_duration("--older-than", &args.older_than)?;
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let o = engine.cleanup(&args.table.table, older_than).await?;
    if args.table.json {
        print_json(&json!({
            "table": args.table.table,
            "old_versions": o.old_versions,
            "bytes_removed": o.bytes_removed,
            "stale_restore_tags_removed": o.stale_restore_tags,
        }));
    } else {
        for t in &o.stale_restore_tags {
            println!(
                "removed the stale restore tag `{}` (a restore of version {} killed at {}); the version is no longer pinned",
                t.name,
                t.version,
                lake::collect::planner::format_time(t.started)
            );
        }
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
pub(crate) async fn versions(args: &VersionsArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let versions = engine.versions(&args.table.table).await?;
    if args.table.json {
        print_json(&json!({"table": args.table.table, "versions": versions}));
    } else {
        println!("{:>8}  {:<24}  {:<9}  tags", "version", "timestamp (UTC)", "journaled");
        for v in &versions {
            let tags: Vec<String> = v
                .tags
                .iter()
                .map(|name| match v.restore_tags.iter().find(|t| t.name == *name) {
                    Some(t) if t.stale => {
                        format!("{name} (STALE: a restore killed after tagging; `lake cleanup` removes it)")
                    }
                    Some(_) => format!("{name} (a restore in progress)"),
                    None => name.clone(),
                })
                .collect();
            println!(
                "{:>8}  {:<24}  {:<9}  {}",
                v.version,
                v.timestamp,
                if v.journaled { "yes" } else { "NO" },
                tags.join(",")
            );
        }
    }
    Ok(())
}

/// Runs `lake config`: prints the table's config (flagging the settings that block GC), or
/// removes the `--unset` keys as a new version.
///
/// # Errors
/// Engine errors.
pub(crate) async fn config(args: &ConfigArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let table = &args.table.table;
    if !args.unset.is_empty() {
        let keys: Vec<&str> = args.unset.iter().map(String::as_str).collect();
        let outcome = engine.unset_config(table, &keys).await?;
        match (outcome, args.table.json) {
            (Some(o), true) => print_json(&json!({"table": table, "unset": args.unset, "version": o.version})),
            (None, true) => print_json(&json!({"table": table, "unset": args.unset, "version": null})),
            (Some(o), false) => println!("unset {} of `{table}` as version {}", args.unset.join(", "), o.version),
            (None, false) => println!("none of {} is set on `{table}`; no new version", args.unset.join(", ")),
        }
        return Ok(());
    }
    let config = engine.config(table).await?;
    let blocking: Vec<String> = lake::lance::settings::version_removing_settings(&config.clone().into_iter().collect())
        .into_iter()
        .map(|(key, _, _)| key)
        .collect();
    if args.table.json {
        print_json(&json!({"table": table, "config": config, "blocks_gc": blocking}));
    } else {
        for (key, value) in &config {
            let flag = if blocking.contains(key) {
                "  (lets Lance remove versions: GC refuses until it is unset)"
            } else {
                ""
            };
            println!("{key}={value}{flag}");
        }
        if config.is_empty() {
            println!("(no config)");
        }
    }
    Ok(())
}
