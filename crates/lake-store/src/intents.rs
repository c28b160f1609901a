//! Write intents on storage: `_lake/intents/<table>/<write_id>.json` ([`WriteIntent`]), and the
//! attempt markers `_lake/intents/<table>/<write_id>.<uuid>.attempt` that record the Lance
//! transaction UUID of an operation that commits inside Lance, written before each of its
//! manifest writes.
//!
//! The writer writes its intent create-only before its publication guard check; GC lists every
//! intent after fixing its cutoff and before reading any lineage, and keeps the references each
//! names live ([`read_all`]); the engine removes an intent once the version's journal entry is
//! written or once it is proven that the commit can no longer land (`lake-lance`'s resolution).
//! This module knows nothing of Lance: it reads, writes and removes the documents and reads the
//! references they name.
//!
//! The table folder is the lineage name as the registry spells it (`t`, or `t@b` for branch `b`
//! of `t`): table and branch names are `[A-Za-z0-9_-]`, so the one `@` separates them and no
//! folder of one lineage is a prefix of another's once the `/` is added.

use crate::error::StoreError;
use crate::layout::{reference_log_key, validate_table_name, INTENTS_PREFIX};
use crate::store::{CreateOutcome, LakeStore};
use chrono::{DateTime, Utc};
use lake_common::intent::{is_ulid, is_uuid, IntentReferences, WriteIntent};
use lake_common::{visit_reference_log, DecodeError, ObjectIdentity};
use lake_engine::{EngineError, IntentInfo, WriteIntents};

/// The folder of `table`'s intents.
pub fn intent_prefix(table: &str) -> String {
    format!("{INTENTS_PREFIX}/{table}")
}

/// Key of the intent of write `write_id` of `table`.
pub fn intent_key(table: &str, write_id: &str) -> String {
    format!("{}/{write_id}.json", intent_prefix(table))
}

/// Key of the attempt marker recording transaction `uuid` of write `write_id` of `table`.
pub fn attempt_key(table: &str, write_id: &str, uuid: &str) -> String {
    format!("{}/{write_id}.{uuid}.attempt", intent_prefix(table))
}

/// One intent as listed.
#[derive(Debug, Clone)]
pub struct ListedIntent {
    /// The document's key.
    pub key: String,
    /// The lineage, from the folder name.
    pub table: String,
    /// The write id, from the file name.
    pub write_id: String,
    /// When the store last wrote the document (the store's clock).
    pub last_modified: DateTime<Utc>,
    /// The decoded document, or why it cannot be trusted.
    pub intent: Result<WriteIntent, String>,
    /// Transaction UUIDs recorded by attempt markers of this write, sorted.
    pub attempts: Vec<String>,
}

impl ListedIntent {
    /// Every transaction UUID the write may have published: the intent's and its markers'.
    pub fn transaction_uuids(&self) -> Vec<String> {
        let mut uuids = self.attempts.clone();
        if let Ok(intent) = &self.intent {
            uuids.extend(intent.transaction_uuid.clone());
        }
        uuids.sort();
        uuids.dedup();
        uuids
    }

    /// The summary GC reports.
    pub fn info(&self) -> IntentInfo {
        let (operation, deadline_ms, references) = match &self.intent {
            Ok(i) => (
                i.operation.as_str().to_string(),
                i.deadline_ms,
                match &i.references {
                    IntentReferences::Inline(ids) => ids.len() as u64,
                    IntentReferences::Log(log) => log.references,
                },
            ),
            Err(_) => ("unreadable".to_string(), 0, 0),
        };
        IntentInfo {
            key: self.key.clone(),
            table: self.table.clone(),
            operation,
            last_modified_ms: self.last_modified.timestamp_millis(),
            deadline_ms,
            references,
        }
    }
}

/// What [`list`] found besides intents: files in the intents folder that are neither an intent
/// nor an attempt marker of one, and markers whose intent is gone (left by a resolver that
/// stopped between removing the intent and its markers; [`remove`] removes markers first).
#[derive(Debug, Clone, Default)]
pub struct Strays {
    /// Keys of attempt markers whose intent document does not exist.
    pub orphan_markers: Vec<String>,
    /// Keys of other files, each a problem GC reports (it cannot know what they protect).
    pub unknown: Vec<String>,
}

/// Lists the intents of `table` (every table's when `None`), each decoded, sorted by key.
///
/// # Errors
/// [`StoreError::Storage`] when the folder or a document cannot be read.
pub async fn list(store: &LakeStore, table: Option<&str>) -> Result<(Vec<ListedIntent>, Strays), StoreError> {
    let prefix = match table {
        Some(t) => format!("{}/", intent_prefix(t)),
        None => format!("{INTENTS_PREFIX}/"),
    };
    let mut listed = store.list_all(&prefix).await?;
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut intents: Vec<ListedIntent> = Vec::new();
    let mut markers: Vec<(String, String, String, String)> = Vec::new();
    let mut strays = Strays::default();
    for (key, meta) in listed {
        let Some(rest) = key.strip_prefix(INTENTS_PREFIX).and_then(|r| r.strip_prefix('/')) else {
            strays.unknown.push(key);
            continue;
        };
        let Some((folder, file)) =
            rest.split_once('/').filter(|(f, name)| validate_table_name(f).is_ok() && !name.contains('/'))
        else {
            strays.unknown.push(key);
            continue;
        };
        if let Some(write_id) = file.strip_suffix(".json").filter(|w| is_ulid(w)) {
            let intent = match store.get(&key).await? {
                Some(bytes) => decode(&bytes, folder, write_id),
                None => continue, // removed since the listing: resolved
            };
            intents.push(ListedIntent {
                key: key.clone(),
                table: folder.to_string(),
                write_id: write_id.to_string(),
                last_modified: meta.last_modified,
                intent,
                attempts: Vec::new(),
            });
            continue;
        }
        let marker =
            file.strip_suffix(".attempt").and_then(|m| m.split_once('.')).filter(|(w, u)| is_ulid(w) && is_uuid(u));
        match marker {
            Some((write_id, uuid)) => {
                markers.push((key.clone(), folder.to_string(), write_id.to_string(), uuid.to_string()))
            }
            None => strays.unknown.push(key),
        }
    }
    for (key, table, write_id, uuid) in markers {
        match intents.iter_mut().find(|i| i.table == table && i.write_id == write_id) {
            Some(intent) => intent.attempts.push(uuid),
            None => strays.orphan_markers.push(key),
        }
    }
    for intent in &mut intents {
        intent.attempts.sort();
    }
    Ok((intents, strays))
}

/// Decodes an intent read at `_lake/intents/<table>/<write_id>.json`: its seal, and the table and
/// write id its key names.
fn decode(bytes: &[u8], table: &str, write_id: &str) -> Result<WriteIntent, String> {
    let intent = WriteIntent::decode(bytes).map_err(|e| e.to_string())?;
    if intent.table != table || intent.write_id != write_id {
        return Err(format!(
            "the document is of table `{}` write {}, but its key names table `{table}` write {write_id}",
            intent.table, intent.write_id
        ));
    }
    Ok(intent)
}

/// Writes `intent` create-only; returns its key.
///
/// # Errors
/// [`StoreError::Storage`], and [`StoreError::Corrupt`] when a document is already at its
/// key (a write id minted twice, which a ULID makes practically impossible).
pub async fn write(store: &LakeStore, intent: &WriteIntent) -> Result<String, StoreError> {
    let key = intent_key(&intent.table, &intent.write_id);
    match store.put_create(&key, intent.encode()).await? {
        CreateOutcome::Created => Ok(key),
        CreateOutcome::Exists(existing) if existing.as_ref() == intent.encode().as_slice() => Ok(key),
        CreateOutcome::Exists(_) => Err(StoreError::Corrupt {
            path: key,
            what: "write intent",
            message: "another intent already has this write id".into(),
        }),
    }
}

/// Records that write `write_id` of `table` is about to publish Lance transaction `uuid`
/// (create-only; the same marker again is a no-op).
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn record_attempt(store: &LakeStore, table: &str, write_id: &str, uuid: &str) -> Result<(), StoreError> {
    store.put_create(&attempt_key(table, write_id, uuid), Vec::<u8>::new()).await.map(|_| ())
}

/// Removes the intent of write `write_id` of `table`: its attempt markers first (found by
/// listing the table's intents), then the document (whose absence means "resolved"). Missing
/// files are not an error.
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn remove(store: &LakeStore, table: &str, write_id: &str) -> Result<(), StoreError> {
    let marker_prefix = format!("{}/{write_id}.", intent_prefix(table));
    let mut markers = Vec::new();
    for (key, _) in store.list_all(&format!("{}/", intent_prefix(table))).await? {
        if key.starts_with(&marker_prefix) && key.ends_with(".attempt") {
            markers.push(key);
        }
    }
    remove_known(store, table, write_id, &markers).await
}

/// As [`remove`], for a writer that knows its attempt markers' keys (no listing).
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn remove_known(
    store: &LakeStore,
    table: &str,
    write_id: &str,
    markers: &[String],
) -> Result<(), StoreError> {
    for key in markers {
        store.delete(key).await?;
    }
    store.delete(&intent_key(table, write_id)).await?;
    if let Some(dir) = store.local_dir() {
        // A local store keeps emptied folders; an empty one is removed (another writer's new
        // intent in it makes this fail harmlessly).
        let _ = std::fs::remove_dir(dir.join(intent_prefix(table)));
    }
    Ok(())
}

/// Hands every reference `intent` names to `visit`: its inline identities, or the rows of its
/// reference log (checked against the length and SHA-256 the intent records, then decoded one
/// record batch at a time). Returns `Ok(Err(problem))` when the log is missing or does not match.
///
/// # Errors
/// [`StoreError::Storage`] when the log cannot be read; whatever `visit` returns.
pub async fn visit_references(
    store: &LakeStore,
    intent: &WriteIntent,
    mut visit: impl FnMut(ObjectIdentity) -> Result<(), EngineError>,
) -> Result<Result<u64, String>, StoreError> {
    let log = match &intent.references {
        IntentReferences::Inline(ids) => {
            for id in ids {
                visit(id.clone())?;
            }
            return Ok(Ok(ids.len() as u64));
        }
        IntentReferences::Log(log) => log,
    };
    let key = reference_log_key(&intent.table, &intent.write_id);
    let Some(bytes) = store.get(&key).await? else {
        return Ok(Err(format!("the reference log {key} it names is missing")));
    };
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    if bytes.len() as u64 != log.bytes || digest != log.sha256 {
        return Ok(Err(format!(
            "the reference log {key} it names has {} bytes hashing to {digest}, but the intent records {} bytes hashing to {}",
            bytes.len(),
            log.bytes,
            log.sha256
        )));
    }
    // The visitor's error travels through the log reader as a decode error and is taken back.
    let mut failed: Option<EngineError> = None;
    let read = visit_reference_log(&bytes, &intent.table, &intent.write_id, |id| {
        visit(id).map_err(|e| {
            failed = Some(e);
            DecodeError::CorruptLog("stopped by the reader".into())
        })
    });
    if let Some(e) = failed {
        return Err(e.into());
    }
    match read {
        Ok(n) if n == log.references => Ok(Ok(n)),
        Ok(n) => Ok(Err(format!(
            "the reference log {key} it names has {n} references, the intent records {}",
            log.references
        ))),
        Err(e) => Ok(Err(format!("the reference log {key} it names: {e}"))),
    }
}

/// Every intent of the lake with its references handed to `visit`: what
/// [`lake_engine::Engine::write_intents`] answers for a store-backed engine. An intent that does
/// not decode, names a log that is missing or does not match, or a file in the intents folder
/// that is no intent, is a problem (GC then plans nothing).
///
/// # Errors
/// [`StoreError::Storage`]; whatever `visit` returns.
pub async fn read_all(
    store: &LakeStore,
    visit: &mut (dyn FnMut(ObjectIdentity) -> Result<(), EngineError> + Send),
) -> Result<WriteIntents, StoreError> {
    let (listed, strays) = list(store, None).await?;
    let mut found = WriteIntents::default();
    for intent in &listed {
        let read = match &intent.intent {
            Ok(doc) => visit_references(store, doc, &mut *visit).await?,
            Err(why) => Err(why.clone()),
        };
        if let Err(why) = read {
            found.problems.push(format!(
                "write intent {} cannot be read ({why}): GC cannot know which objects its write may still reference; restore it from a backup, or, once no writer of table `{}` can still commit it, resolve it with `lake refs recover`",
                intent.key, intent.table
            ));
        }
        found.intents.push(intent.info());
    }
    for key in strays.unknown {
        found.problems.push(format!(
            "{key} in the write intents folder is not a write intent (`<table>/<write_id>.json`) or an attempt marker: GC cannot know what it protects; move it out of `{INTENTS_PREFIX}/`"
        ));
    }
    Ok(found)
}
