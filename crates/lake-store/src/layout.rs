//! The keys of a lake, relative to its root.
//!
//! ```text
//! _lake/lake.json                                lake descriptor (GC policy)
//! _lake/registry/<table>/<seq:020>.json          table registry, one create-only document per advance
//! _lake/clock/<ulid>                             short-lived probes that read the store's clock
//! _lake/intents/<table>/<write_id>.json          write intents of commits that may still land
//! _lake/deleted-branches/<table>@<branch>.json   a branch deleted by the engine: its name is spent
//! tables/<table>.lance/                          one Lance dataset per table
//! tables/<table>.lance/_lake/object_refs/<v>.json  the reference journal of version v
//! tables/<table>.lance/tree/<branch>/            a Lance branch of the table (its own dataset)
//! tables/<table>.lance/tree/<branch>/_lake/...   the branch's journal, as a table's
//! objects/<ULID>/<name>                          managed objects (see [`crate::keys`])
//! ```

use crate::error::StoreError;

/// The lake descriptor.
pub const DESCRIPTOR_KEY: &str = "_lake/lake.json";
/// Folder of the table registry.
pub const REGISTRY_PREFIX: &str = "_lake/registry";
/// Folder of clock probes.
pub const CLOCK_PREFIX: &str = "_lake/clock";
/// Folder of write intents (`crate::intents`), one folder per lineage name.
pub const INTENTS_PREFIX: &str = "_lake/intents";
/// Folder of deleted-branch documents ([`deleted_branch_key`]).
pub const DELETED_BRANCHES_PREFIX: &str = "_lake/deleted-branches";
/// Folder of the Lance datasets.
pub const TABLES_PREFIX: &str = "tables";
/// Folder of managed objects (no trailing slash).
pub const OBJECTS_PREFIX: &str = lake_common::MANAGED_PREFIX;
/// Suffix of a dataset folder.
pub const DATASET_SUFFIX: &str = ".lance";

/// Separates a table from one of its Lance branches in a lineage name: `episodes@relabel` is
/// branch `relabel` of table `episodes`. Everything the engine and the registry key by table
/// (journal, registry pin, dataset folder) a branch has under its lineage name.
pub const BRANCH_SEPARATOR: char = '@';

/// Checks a table name, 1 to 64 of `[A-Za-z0-9_-]`, or a branch's lineage name
/// `<table>@<branch>` whose branch name has the same alphabet and length.
///
/// # Errors
/// [`StoreError::TableName`].
pub fn validate_table_name(name: &str) -> Result<(), StoreError> {
    let plain = |n: &str| {
        !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let ok = match split_lineage(name) {
        (table, None) => plain(table),
        (table, Some(branch)) => plain(table) && plain(branch),
    };
    if ok {
        Ok(())
    } else {
        Err(StoreError::TableName(name.to_string()))
    }
}

/// A lineage name's table and branch (`None` for the table's main line).
pub fn split_lineage(name: &str) -> (&str, Option<&str>) {
    match name.split_once(BRANCH_SEPARATOR) {
        Some((table, branch)) => (table, Some(branch)),
        None => (name, None),
    }
}

/// The lineage name of `branch` of `table`.
pub fn branch_lineage(table: &str, branch: &str) -> String {
    format!("{table}{BRANCH_SEPARATOR}{branch}")
}

/// Key of a table's dataset folder: `tables/<name>.lance`, or for a branch's lineage name
/// `tables/<name>.lance/tree/<branch>` (where Lance 14 keeps a branch's dataset).
pub fn dataset_key(table: &str) -> String {
    match split_lineage(table) {
        (table, None) => format!("{TABLES_PREFIX}/{table}{DATASET_SUFFIX}"),
        (table, Some(branch)) => format!("{TABLES_PREFIX}/{table}{DATASET_SUFFIX}/tree/{branch}"),
    }
}

/// Folder of a table's reference journal.
pub fn journal_prefix(table: &str) -> String {
    format!("{}/_lake/object_refs", dataset_key(table))
}

/// Key of the sidecar of `version`: `tables/<name>.lance/_lake/object_refs/<version>.json`.
pub fn sidecar_key(table: &str, version: u64) -> String {
    format!("{}/{version}.json", journal_prefix(table))
}

/// Folder of a table's reference logs (the payloads of format-2 sidecars), beside the journal
/// so that listing the journal lists only sidecar heads.
pub fn reference_log_prefix(table: &str) -> String {
    format!("{}/_lake/object_ref_logs", dataset_key(table))
}

/// Key of the reference log of the write `write_id` (a ULID):
/// `tables/<name>.lance/_lake/object_ref_logs/<write_id>.arrows`.
pub fn reference_log_key(table: &str, write_id: &str) -> String {
    format!("{}/{write_id}.arrows", reference_log_prefix(table))
}

/// Key of the document that says the engine deleted branch lineage `lineage` (`t@b`):
/// `_lake/deleted-branches/<t@b>.json`, written create-only before Lance deletes the branch and
/// never removed. A branch name is used once: a write to the deleted branch suspended between its
/// last check and its manifest write could otherwise land in a new branch of the same name, whose
/// versions start below the deleted branch's (docs/protocol.md, "Branches").
pub fn deleted_branch_key(lineage: &str) -> String {
    format!("{DELETED_BRANCHES_PREFIX}/{lineage}.json")
}

/// Folder of a table's registry documents.
pub fn registry_table_prefix(table: &str) -> String {
    format!("{REGISTRY_PREFIX}/{table}")
}
