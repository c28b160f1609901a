//! Write intents on storage: `_lake/intents/<table>/<write_id>.json` ([`WriteIntent`]), and the
//! revocation marker `_lake/intents/<table>/<write_id>.revoked` a resolver creates before it
//! proves that the write can no longer land (docs/protocol.md).
//!
//! The writer writes its intent create-only before its publication guard check; GC lists every
//! intent after fixing its cutoff and before reading any lineage, and keeps the references each
//! names live ([`read_all`]); the engine removes an intent once the version's journal entry is
//! written or once it is proven that the commit can no longer land (`lake-lance`'s resolution).
//! Right before each of its manifest writes the writer asks [`liveness`] whether it may still
//! publish: not once its intent is revoked or gone. This module knows nothing of Lance: it
//! reads, writes and removes the documents and reads the references they name.
//!
//! Files of earlier builds are still understood: attempt markers
//! (`<write_id>.<uuid>.attempt`, the UUID of a commit made inside Lance) are read as the
//! intent's UUIDs and removed with it.
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

/// Key of the revocation marker of write `write_id` of `table` (empty; its existence is the
/// whole message: "this write may no longer publish").
pub fn revoke_key(table: &str, write_id: &str) -> String {
    format!("{}/{write_id}.revoked", intent_prefix(table))
}

/// Whether a write may still publish a manifest ([`liveness`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Its intent exists and is not revoked.
    Live,
    /// A resolver revoked it: it must not publish.
    Revoked,
    /// Its intent is gone (resolved): it must not publish.
    Gone,
}

/// Asks the store whether write `write_id` of `table` may still publish: first whether its
/// revocation marker exists, then whether its intent does (two HEADs, in that order). A resolver
/// creates the marker before it proves the write can no longer land, and removes the intent
/// before the marker, so a writer that passes both checks started its manifest write before the
/// marker existed (docs/protocol.md, "Revocation").
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn liveness(store: &LakeStore, table: &str, write_id: &str) -> Result<Liveness, StoreError> {
    if store.head(&revoke_key(table, write_id)).await?.is_some() {
        return Ok(Liveness::Revoked);
    }
    if store.head(&intent_key(table, write_id)).await?.is_none() {
        return Ok(Liveness::Gone);
    }
    Ok(Liveness::Live)
}

/// Revokes write `write_id` of `table`: creates its revocation marker (create-only; an existing
/// one is kept). From the moment this returns, every [`liveness`] check of the write answers
/// [`Liveness::Revoked`] (or [`Liveness::Gone`]); returns when the store last wrote the marker.
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn revoke(store: &LakeStore, table: &str, write_id: &str) -> Result<DateTime<Utc>, StoreError> {
    let key = revoke_key(table, write_id);
    store.put_create(&key, Vec::<u8>::new()).await?;
    let meta = store.head(&key).await?.ok_or_else(|| StoreError::storage(&key, "revocation marker vanished"))?;
    Ok(meta.last_modified)
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
    /// Transaction UUIDs recorded by attempt markers of this write (earlier builds), sorted.
    pub attempts: Vec<String>,
    /// When the store wrote the write's revocation marker, if it is revoked.
    pub revoked: Option<DateTime<Utc>>,
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
/// nor a marker of one, and markers whose intent is gone (left by a resolver that stopped
/// between removing the intent and its markers: [`remove`] removes the intent first).
#[derive(Debug, Clone, Default)]
pub struct Strays {
    /// Keys of revocation or attempt markers whose intent document does not exist.
    pub orphan_markers: Vec<String>,
    /// Keys of other files, each a problem GC reports (it cannot know what they protect).
    pub unknown: Vec<String>,
}

/// A marker as listed: key, table, write id, the UUID of an attempt marker (`None`: a
/// revocation), and when the store wrote it.
type Marker = (String, String, String, Option<String>, DateTime<Utc>);

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
    let mut markers: Vec<Marker> = Vec::new();
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
                revoked: None,
            });
            continue;
        }
        if let Some(write_id) = file.strip_suffix(".revoked").filter(|w| is_ulid(w)) {
            markers.push((key.clone(), folder.to_string(), write_id.to_string(), None, meta.last_modified));
            continue;
        }
        let marker =
            file.strip_suffix(".attempt").and_then(|m| m.split_once('.')).filter(|(w, u)| is_ulid(w) && is_uuid(u));
        match marker {
            Some((write_id, uuid)) => markers.push((
                key.clone(),
                folder.to_string(),
                write_id.to_string(),
                Some(uuid.to_string()),
                meta.last_modified,
            )),
            None => strays.unknown.push(key),
        }
    }
    for (key, table, write_id, uuid, written) in markers {
        match (intents.iter_mut().find(|i| i.table == table && i.write_id == write_id), uuid) {
            (Some(intent), Some(uuid)) => intent.attempts.push(uuid),
            (Some(intent), None) => intent.revoked = Some(written),
            (None, _) => strays.orphan_markers.push(key),
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

/// Removes the intent of write `write_id` of `table`: the document first (its absence means
/// "resolved", and [`liveness`] reads it after the revocation marker), then its revocation
/// marker and any attempt markers of earlier builds (found by listing the table's intents).
/// Missing files are not an error.
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn remove(store: &LakeStore, table: &str, write_id: &str) -> Result<(), StoreError> {
    store.delete(&intent_key(table, write_id)).await?;
    let marker_prefix = format!("{}/{write_id}.", intent_prefix(table));
    for (key, _) in store.list_all(&format!("{}/", intent_prefix(table))).await? {
        if key.starts_with(&marker_prefix) && (key.ends_with(".attempt") || key.ends_with(".revoked")) {
            store.delete(&key).await?;
        }
    }
    if let Some(dir) = store.local_dir() {
        // A local store keeps emptied folders; an empty one is removed (another writer's new
        // intent in it makes this fail harmlessly).
        let _ = std::fs::remove_dir(dir.join(intent_prefix(table)));
    }
    Ok(())
}

/// As [`remove`], for the writer itself, which knows it wrote no marker (no listing): the
/// document, then a revocation marker a resolver may have created meanwhile.
///
/// # Errors
/// [`StoreError::Storage`].
pub async fn remove_own(store: &LakeStore, table: &str, write_id: &str) -> Result<(), StoreError> {
    store.delete(&intent_key(table, write_id)).await?;
    store.delete(&revoke_key(table, write_id)).await?;
    if let Some(dir) = store.local_dir() {
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
                "write intent {} cannot be read ({why}): GC cannot know which objects its write may still reference; restore it from a backup, or, once no writer of table `{}` can still commit it, resolve it with `refs recover`",
                intent.key, intent.table
            ));
        }
        found.intents.push(intent.info());
    }
    for key in strays.unknown {
        found.problems.push(format!(
            "{key} in the write intents folder is not a write intent (`<table>/<write_id>.json`) or a marker of one: GC cannot know what it protects; move it out of `{INTENTS_PREFIX}/`"
        ));
    }
    Ok(found)
}
