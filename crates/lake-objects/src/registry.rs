//! The table registry: which tables exist and the newest version the engine journaled.
//!
//! Each table has a folder `_lake/registry/<table>/` of create-only documents
//! `<seq:020>.json` = `{"table", "seq", "version"}`. Advancing is a compare-and-swap built from
//! create-only writes (the object_store fact that `LocalFileSystem` has no `PutMode::Update`;
//! Lance publishes its manifests the same way): read the newest document `seq`, then create
//! `seq + 1`; if another writer created it first, re-read and retry. The pinned version only
//! moves forward.

use crate::error::ObjectsError;
use crate::layout::{registry_table_prefix, validate_table_name, REGISTRY_PREFIX};
use crate::store::{CreateOutcome, LakeStore};
use serde::{Deserialize, Serialize};

/// One registry document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryEntry {
    /// Table name.
    pub table: String,
    /// Sequence number of this document (1, 2, ...).
    pub seq: u64,
    /// The newest version whose sidecar the engine wrote.
    pub version: u64,
}

/// Maximum compare-and-swap attempts before giving up.
const MAX_ATTEMPTS: usize = 64;

fn entry_key(table: &str, seq: u64) -> String {
    format!("{}/{seq:020}.json", registry_table_prefix(table))
}

/// Registered table names, sorted.
///
/// # Errors
/// [`ObjectsError::Storage`].
pub async fn tables(store: &LakeStore) -> Result<Vec<String>, ObjectsError> {
    let (dirs, _) = store.list_dir(REGISTRY_PREFIX).await?;
    let mut names: Vec<String> = dirs
        .iter()
        .filter_map(|d| d.trim_end_matches('/').rsplit('/').next().map(str::to_string))
        .filter(|n| validate_table_name(n).is_ok())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// The newest registry document of `table`, or `None` for an unknown table.
///
/// # Errors
/// [`ObjectsError::Storage`]; [`ObjectsError::Corrupt`] for an undecodable document.
pub async fn current(store: &LakeStore, table: &str) -> Result<Option<RegistryEntry>, ObjectsError> {
    let prefix = registry_table_prefix(table);
    let (_, objects) = store.list_dir(&prefix).await?;
    let newest = objects
        .iter()
        .filter_map(|m| store.key_of(&m.location))
        .filter_map(|k| {
            let name = k.rsplit('/').next()?.strip_suffix(".json")?.to_string();
            (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit())).then(|| (name.parse::<u64>().ok(), k))
        })
        .filter_map(|(seq, k)| seq.map(|s| (s, k)))
        .max();
    let Some((seq, key)) = newest else {
        return Ok(None);
    };
    let bytes = store.get(&key).await?.ok_or_else(|| ObjectsError::storage(&key, "registry document vanished"))?;
    let entry: RegistryEntry = serde_json::from_slice(&bytes).map_err(|e| ObjectsError::Corrupt {
        path: key.clone(),
        what: "registry document",
        message: e.to_string(),
    })?;
    if entry.seq != seq || entry.table != table {
        return Err(ObjectsError::Corrupt {
            path: key,
            what: "registry document",
            message: format!("names table `{}` seq {} but sits at seq {seq} of `{table}`", entry.table, entry.seq),
        });
    }
    Ok(Some(entry))
}

/// Advances the pin of `table` to `version` (registering the table on first use). A pin already
/// at or beyond `version` is left alone: the pin only moves forward.
///
/// # Errors
/// [`ObjectsError::Registry`] when the compare-and-swap keeps losing; storage errors.
pub async fn advance(store: &LakeStore, table: &str, version: u64) -> Result<RegistryEntry, ObjectsError> {
    validate_table_name(table)?;
    for _ in 0..MAX_ATTEMPTS {
        let cur = current(store, table).await?;
        if let Some(c) = &cur {
            if c.version >= version {
                return Ok(c.clone());
            }
        }
        let seq = cur.as_ref().map(|c| c.seq + 1).unwrap_or(1);
        let entry = RegistryEntry { table: table.to_string(), seq, version };
        let bytes = serde_json::to_vec(&entry).map_err(|e| ObjectsError::storage(entry_key(table, seq), e))?;
        match store.put_create(&entry_key(table, seq), bytes).await? {
            CreateOutcome::Created => return Ok(entry),
            CreateOutcome::Exists(_) => continue,
        }
    }
    Err(ObjectsError::Registry {
        table: table.into(),
        message: format!("compare-and-swap lost {MAX_ATTEMPTS} times in a row; retry the operation"),
    })
}
