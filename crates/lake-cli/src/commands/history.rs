//! `lake restore`, `lake tag`.

use crate::cli::{RestoreArgs, TagArgs};
use crate::commands::{open_lake, print_json};
use crate::error::CliError;
use serde_json::json;

/// Runs `lake restore`.
///
/// # Errors
/// Engine errors (a version that no longer exists, an incomplete journal).
pub(crate) async fn restore(args: &RestoreArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let o = engine.restore(&args.table.table, args.version).await?;
    if args.table.json {
        print_json(
            &json!({"table": o.table, "restored_version": args.version, "version": o.version, "references": o.references_added}),
        );
    } else {
        println!(
            "restored `{}` version {} as version {} ({} references)",
            o.table, args.version, o.version, o.references_added
        );
    }
    Ok(())
}

/// Runs `lake tag`.
///
/// # Errors
/// Engine errors (an existing or unknown tag, a missing version).
pub(crate) async fn tag(args: &TagArgs) -> Result<(), CliError> {
    let (_, _, engine) = open_lake(&args.table.root).await?;
    let table = &args.table.table;
    match (args.delete, args.version) {
        (true, _) => {
            engine.delete_tag(table, &args.tag).await?;
            if args.table.json {
                print_json(&json!({"table": table, "tag": args.tag, "deleted": true}));
            } else {
                println!("deleted tag `{}` of `{table}`", args.tag);
            }
        }
        (false, Some(v)) => {
            engine.create_tag(table, v, &args.tag).await?;
            if args.table.json {
                print_json(&json!({"table": table, "tag": args.tag, "version": v}));
            } else {
                println!("tagged `{table}` version {v} as `{}`", args.tag);
            }
        }
        (false, None) => return Err(CliError::Usage("give --version N to tag, or --delete to remove the tag".into())),
    }
    Ok(())
}
