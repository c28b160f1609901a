//! `lake update`, `lake index create|drop|list`, `lake columns add-files|drop|rename` and
//! `lake branch create|delete|list`: the table operations beyond append and delete, each
//! journaled by the engine.

use crate::cli::{BranchCommand, ColumnsCommand, IndexCommand, UpdateArgs};
use crate::commands::{open_lake, print_json};
use crate::error::CliError;
use lake::lance::index::IndexKind;
use lake::lance::update::Assignment;
use serde_json::json;

/// Runs `lake update`.
///
/// # Errors
/// Usage errors for a malformed --set; engine errors (an invalid expression or predicate, the
/// guard's refusal, a conflicting concurrent write).
pub(crate) async fn update(args: &UpdateArgs) -> Result<(), CliError> {
    let assignments = args
        .assignments
        .iter()
        .map(|a| a.parse::<Assignment>().map_err(|e| CliError::Usage(format!("--set: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let outcome = engine.update(&args.table.table, &assignments, args.predicate.as_deref()).await?;
    let table = &args.table.table;
    match (outcome, args.table.json) {
        (Some(o), true) => print_json(&json!({
            "table": o.table, "version": o.version, "rows_updated": o.rows,
            "references_added": o.references_added, "references_removed": o.references_removed,
        })),
        (None, true) => print_json(
            &json!({"table": table, "version": null, "rows_updated": 0, "references_added": 0, "references_removed": 0}),
        ),
        (Some(o), false) => println!(
            "updated {} rows of `{}` as version {} ({} references added, {} removed)",
            o.rows, o.table, o.version, o.references_added, o.references_removed
        ),
        (None, false) => println!("no rows of `{table}` matched; no new version"),
    }
    Ok(())
}

/// Runs `lake index create|drop|list`.
///
/// # Errors
/// Usage errors for an unknown kind; engine errors (an unknown column or index name, a column
/// type the kind does not support).
pub(crate) async fn index(command: &IndexCommand) -> Result<(), CliError> {
    match command {
        IndexCommand::Create(a) => {
            let kind: IndexKind = a.kind.parse().map_err(|e| CliError::Usage(format!("--kind: {e}")))?;
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let o = engine.create_index(&a.table.table, &a.column, kind, a.name.as_deref(), a.replace).await?;
            if a.table.json {
                print_json(&json!({"table": o.table, "version": o.version, "column": a.column, "kind": kind.name()}));
            } else {
                println!("built a {} index on `{}` of `{}` as version {}", kind.name(), a.column, o.table, o.version);
            }
        }
        IndexCommand::Drop(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let o = engine.drop_index(&a.table.table, &a.name).await?;
            if a.table.json {
                print_json(&json!({"table": o.table, "version": o.version, "dropped": a.name}));
            } else {
                println!("dropped index `{}` of `{}` as version {}", a.name, o.table, o.version);
            }
        }
        IndexCommand::List(a) => {
            let (_, _, engine) = open_lake(&a.root).await?;
            let indexes = engine.indexes(&a.table).await?;
            if a.json {
                print_json(&json!({"table": a.table, "indexes": indexes}));
            } else if indexes.is_empty() {
                println!("`{}` has no index", a.table);
            } else {
                for i in indexes {
                    println!("{}\t{}\t{}", i.name, i.kind, i.columns.join(","));
                }
            }
        }
    }
    Ok(())
}

/// Runs `lake columns add-files|drop|rename`.
///
/// # Errors
/// As `lake ingest` for add-files; engine errors (an unknown column, a name in use).
pub(crate) async fn columns(command: &ColumnsCommand) -> Result<(), CliError> {
    let (table, outcome, what) = match command {
        ColumnsCommand::AddFiles(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let mode = lake::lance::ingest::IngestMode::AddColumn { column: a.name.clone() };
            let options = crate::commands::ingest::options(&a.dir, mode);
            let (o, _) = lake::lance::ingest::ingest_dir_with(&engine, &a.table.table, &a.dir, &options).await?;
            (&a.table, o, format!("added column `{}`", a.name))
        }
        ColumnsCommand::Drop(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let names: Vec<&str> = a.columns.iter().map(String::as_str).collect();
            let o = engine.drop_columns(&a.table.table, &names).await?;
            (&a.table, o, format!("dropped {}", a.columns.join(", ")))
        }
        ColumnsCommand::Rename(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let o = engine.rename_column(&a.table.table, &a.from, &a.to).await?;
            (&a.table, o, format!("renamed `{}` to `{}`", a.from, a.to))
        }
    };
    if table.json {
        print_json(&json!({
            "table": outcome.table, "version": outcome.version,
            "references_added": outcome.references_added, "references_removed": outcome.references_removed,
        }));
    } else {
        println!(
            "{what} in `{}` as version {} ({} references added, {} removed)",
            outcome.table, outcome.version, outcome.references_added, outcome.references_removed
        );
    }
    Ok(())
}

/// Runs `lake branch create|delete|list`.
///
/// # Errors
/// Engine errors (no such version or tag, a branch of that name, a tag still on the branch).
pub(crate) async fn branch(command: &BranchCommand) -> Result<(), CliError> {
    match command {
        BranchCommand::Create(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            let from: lake::lance::branch::BranchSource = match a.from.parse() {
                Ok(from) => from,
                Err(never) => match never {},
            };
            let o = engine.create_branch(&a.table.table, &a.name, &from).await?;
            if a.table.json {
                print_json(&json!({"table": o.table, "version": o.version, "references": o.references_added}));
            } else {
                println!(
                    "created branch `{}` (write to it as table `{}`) at version {} with {} references",
                    a.name, o.table, o.version, o.references_added
                );
            }
        }
        BranchCommand::Delete(a) => {
            let (_, _, engine) = open_lake(&a.table.root).await?;
            engine.delete_branch(&a.table.table, &a.name).await?;
            if a.table.json {
                print_json(&json!({"table": a.table.table, "deleted": a.name}));
            } else {
                println!("deleted branch `{}` of `{}`", a.name, a.table.table);
            }
        }
        BranchCommand::List(a) => {
            let (_, _, engine) = open_lake(&a.root).await?;
            let branches = engine.branches(&a.table).await?;
            if a.json {
                print_json(&json!({"table": a.table, "branches": branches}));
            } else {
                for b in branches {
                    println!("{b}");
                }
            }
        }
    }
    Ok(())
}
