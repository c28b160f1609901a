//! The keys of a lake, relative to its root.
//!
//! ```text
//! _lake/lake.json                                lake descriptor (GC policy)
//! _lake/registry/<table>/<seq:020>.json          table registry, one create-only document per advance
//! _lake/clock/<ulid>                             short-lived probes that read the store's clock
//! tables/<table>.lance/                          one Lance dataset per table
//! tables/<table>.lance/_lake/object_refs/<v>.json  the reference journal of version v
//! objects/<ULID>/<name>                          managed objects (see [`crate::keys`])
//! ```

use crate::error::ObjectsError;

/// The lake descriptor.
pub const DESCRIPTOR_KEY: &str = "_lake/lake.json";
/// Folder of the table registry.
pub const REGISTRY_PREFIX: &str = "_lake/registry";
/// Folder of clock probes.
pub const CLOCK_PREFIX: &str = "_lake/clock";
/// Folder of the Lance datasets.
pub const TABLES_PREFIX: &str = "tables";
/// Folder of managed objects (no trailing slash).
pub const OBJECTS_PREFIX: &str = lake_common::MANAGED_PREFIX;
/// Suffix of a dataset folder.
pub const DATASET_SUFFIX: &str = ".lance";

/// Checks a table name: 1 to 64 of `[A-Za-z0-9_-]`.
///
/// # Errors
/// [`ObjectsError::TableName`].
pub fn validate_table_name(name: &str) -> Result<(), ObjectsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ObjectsError::TableName(name.to_string()))
    }
}

/// Key of a table's dataset folder: `tables/<name>.lance`.
pub fn dataset_key(table: &str) -> String {
    format!("{TABLES_PREFIX}/{table}{DATASET_SUFFIX}")
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

/// Folder of a table's registry documents.
pub fn registry_table_prefix(table: &str) -> String {
    format!("{REGISTRY_PREFIX}/{table}")
}
