//! The table registry: which tables exist and the newest version the engine journaled.
//!
//! Each table has a folder `_lake/registry/<table>/` of create-only documents
//! `<seq:020>.json` = `{"table", "seq", "version"}`. Advancing is a compare-and-swap built from
//! create-only writes (the object_store fact that `LocalFileSystem` has no `PutMode::Update`;
//! Lance publishes its manifests the same way): read the newest document `seq`, then create
//! `seq + 1`; if another writer created it first, re-read and retry (after a backoff with jitter,
//! bounded in attempts and total delay). The pinned version only moves forward.

use crate::error::StoreError;
use crate::layout::{registry_table_prefix, validate_table_name, REGISTRY_PREFIX};
use crate::store::{CreateOutcome, LakeStore};
use backon::{ExponentialBuilder, Retryable};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

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

/// Retries of a lost compare-and-swap before giving up (so at most `MAX_RETRIES + 1` attempts).
const MAX_RETRIES: usize = 100;
/// The first wait after a lost compare-and-swap; each later one doubles, up to [`MAX_DELAY`].
const MIN_DELAY: Duration = Duration::from_millis(2);
/// The longest single wait between two attempts.
const MAX_DELAY: Duration = Duration::from_millis(250);
/// The most time spent waiting between the attempts of one advance.
const MAX_TOTAL_DELAY: Duration = Duration::from_secs(20);

/// The backoff between compare-and-swap attempts: exponential from [`MIN_DELAY`] to
/// [`MAX_DELAY`], each wait with random jitter (up to its own length again) so that writers who
/// lost the same race do not retry in lockstep; at most [`MAX_RETRIES`] retries and
/// [`MAX_TOTAL_DELAY`] of waiting.
fn cas_backoff() -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_jitter()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .with_max_times(MAX_RETRIES)
        .with_total_delay(Some(MAX_TOTAL_DELAY))
}

/// How one compare-and-swap attempt ended, when it did not advance or find the pin.
enum Attempt {
    /// Another writer created the next document first: re-read and retry.
    Lost,
    /// Anything else: returned at once.
    Failed(StoreError),
}

impl From<StoreError> for Attempt {
    fn from(e: StoreError) -> Self {
        Attempt::Failed(e)
    }
}

fn entry_key(table: &str, seq: u64) -> String {
    format!("{}/{seq:020}.json", registry_table_prefix(table))
}

/// Registered table names, sorted.
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn tables(store: &LakeStore) -> Result<Vec<String>, StoreError> {
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
/// [`StoreError::Storage`]; [`StoreError::Corrupt`] for an undecodable document.
pub async fn current(store: &LakeStore, table: &str) -> Result<Option<RegistryEntry>, StoreError> {
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
    let bytes = store.get(&key).await?.ok_or_else(|| StoreError::storage(&key, "registry document vanished"))?;
    let entry: RegistryEntry = serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
        path: key.clone(),
        what: "registry document",
        message: e.to_string(),
    })?;
    if entry.seq != seq || entry.table != table {
        return Err(StoreError::Corrupt {
            path: key,
            what: "registry document",
            message: format!("names table `{}` seq {} but sits at seq {seq} of `{table}`", entry.table, entry.seq),
        });
    }
    Ok(Some(entry))
}

/// Advances the pin of `table` to `version`. A pin already at or beyond `version` is left alone:
/// the pin only moves forward. A table (`t`) is registered on first use; a branch lineage
/// (`t@b`) only by [`register_branch`]: advancing a branch whose registry folder is gone (the
/// branch was deleted while a write to it committed) is refused, so a late write cannot bring
/// a deleted branch back half-made.
///
/// A compare-and-swap lost to another writer is retried after a backoff with jitter (see
/// [`cas_backoff`]): bounded in attempts and in total waiting.
///
/// # Errors
/// [`StoreError::Registry`] when the compare-and-swap keeps losing (transient: retry the
/// operation) or the branch is not registered; storage errors.
pub async fn advance(store: &LakeStore, table: &str, version: u64) -> Result<RegistryEntry, StoreError> {
    let first = if crate::layout::split_lineage(table).1.is_some() { First::Refuse } else { First::Register };
    advance_with(store, table, version, first).await
}

/// Registers branch lineage `table` (`t@b`) at its first `version` (or advances it, when it is
/// registered already): what creating the branch does.
///
/// # Errors
/// As [`advance`].
pub async fn register_branch(store: &LakeStore, table: &str, version: u64) -> Result<RegistryEntry, StoreError> {
    advance_with(store, table, version, First::Register).await
}

/// What an advance does when the lineage has no registry document.
#[derive(Clone, Copy, PartialEq, Eq)]
enum First {
    Register,
    Refuse,
}

async fn advance_with(store: &LakeStore, table: &str, version: u64, first: First) -> Result<RegistryEntry, StoreError> {
    validate_table_name(table)?;
    let started = Instant::now();
    let mut lost = 0usize;
    let result = (|| attempt(store, table, version, first))
        .retry(cas_backoff())
        .when(|a: &Attempt| matches!(a, Attempt::Lost))
        .notify(|_: &Attempt, _| lost += 1)
        .await;
    match result {
        Ok(entry) => Ok(entry),
        Err(Attempt::Failed(e)) => Err(e),
        Err(Attempt::Lost) => Err(StoreError::Registry {
            table: table.into(),
            message: format!(
                "compare-and-swap lost {} times in a row over {:.1?}; retry the operation",
                lost + 1,
                started.elapsed()
            ),
        }),
    }
}

/// One compare-and-swap: read the newest document, then create the next one.
async fn attempt(store: &LakeStore, table: &str, version: u64, first: First) -> Result<RegistryEntry, Attempt> {
    let cur = current(store, table).await?;
    if let Some(c) = &cur {
        if c.version >= version {
            return Ok(c.clone());
        }
    }
    if cur.is_none() && first == First::Refuse {
        return Err(Attempt::Failed(StoreError::Registry {
            table: table.into(),
            message: format!(
                "the branch is not registered (deleted while this write committed?); version {version} is not journaled into it. Check the table's versions and delete what is left of the branch with `branch delete`"
            ),
        }));
    }
    let seq = cur.as_ref().map(|c| c.seq + 1).unwrap_or(1);
    let entry = RegistryEntry { table: table.to_string(), seq, version };
    let bytes = serde_json::to_vec(&entry).map_err(|e| StoreError::storage(entry_key(table, seq), e))?;
    match store.put_create(&entry_key(table, seq), bytes).await? {
        CreateOutcome::Created => Ok(entry),
        CreateOutcome::Exists(_) => Err(Attempt::Lost),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Every registry document of `table`, by sequence number.
    async fn documents(store: &LakeStore, table: &str) -> Vec<RegistryEntry> {
        let (_, objects) = store.list_dir(&registry_table_prefix(table)).await.unwrap();
        let mut entries = Vec::new();
        for m in objects {
            let key = store.key_of(&m.location).unwrap();
            let bytes = store.get(&key).await.unwrap().unwrap();
            entries.push(serde_json::from_slice::<RegistryEntry>(&bytes).unwrap());
        }
        entries.sort_by_key(|e| e.seq);
        entries
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 8)]
    async fn concurrent_advances_of_one_table_all_land_and_only_move_forward() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LakeStore::open(dir.path().join("lake").to_str().unwrap()).unwrap());
        const WRITERS: u64 = 48;
        // Every writer starts at once; the versions arrive out of order.
        let barrier = Arc::new(tokio::sync::Barrier::new(WRITERS as usize));
        let tasks: Vec<_> = (1..=WRITERS)
            .map(|i| {
                let version = (i * 7) % WRITERS + 1;
                let (store, barrier) = (Arc::clone(&store), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    (version, advance(&store, "episodes", version).await)
                })
            })
            .collect();
        for task in tasks {
            let (version, result) = task.await.unwrap();
            let entry = result.unwrap_or_else(|e| panic!("advance to {version} failed: {e}"));
            assert!(entry.version >= version, "advance to {version} returned the pin at {}", entry.version);
        }
        let pin = current(&store, "episodes").await.unwrap().unwrap();
        assert_eq!(pin.version, WRITERS, "the newest version landed");
        let docs = documents(&store, "episodes").await;
        assert_eq!(docs.last(), Some(&pin));
        for (i, d) in docs.iter().enumerate() {
            assert_eq!(d.seq, i as u64 + 1, "sequence numbers have no gaps");
        }
        assert!(docs.windows(2).all(|w| w[0].version < w[1].version), "the pin only moved forward: {docs:?}");
        // An advance to an older version leaves the pin alone.
        assert_eq!(advance(&store, "episodes", 3).await.unwrap(), pin);
    }

    #[test]
    fn the_backoff_is_bounded() {
        use backon::BackoffBuilder;
        let delays: Vec<Duration> = cas_backoff().build().collect();
        assert!(!delays.is_empty() && delays.len() <= MAX_RETRIES);
        assert!(delays.iter().all(|d| *d <= MAX_DELAY * 2), "jitter adds at most one delay");
        assert!(delays.iter().sum::<Duration>() <= MAX_TOTAL_DELAY);
    }
}
