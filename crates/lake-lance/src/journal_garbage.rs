//! GC's own garbage in a table's journal: reference logs that no journal entry names.
//!
//! A streamed write finishes its reference log before the Lance commit and writes the sidecar
//! head naming it after the commit. A write that fails deletes its log; a write killed before
//! its commit leaves it, or on S3 an incomplete multipart upload of it, or locally object_store's
//! staging file `<log>#<n>`. Such a file is garbage when neither a sidecar nor a write intent
//! names its write and it was last written before the GC cutoff. A write's intent is written
//! after its log is finished and before its commit, and is removed only once the version is
//! journaled (its head names the log) or the commit is proven never to land
//! (`crate::commit::resolve`): a log whose commit may still land is always named. A log that no intent
//! names either was never committed (its intent was never written, or its write was
//! abandoned), or its version was journaled by another entry (the logs written for upserts and
//! for the intents of other operations, removed with the intent but left by a crash).
//!
//! The sidecars and intents are read only when a file old enough is found (the common case
//! costs one listing of the log folder). Any sidecar (or the reference checkpoint) that
//! mentions the write's id protects its log, even one that does not decode; so does any intent
//! of the table, even an unreadable one. Entries that are not streamed writes' (a large delta,
//! repair's snapshot, the checkpoint) have logs of their own, uploaded before their head is
//! written: a crash between the two leaves a log no document names, garbage by the same rule.

use crate::engine::LanceEngine;
use crate::error::LanceEngineError;
use lake_engine::UnreferencedFile;
use lake_store::keys::parse_journal_file;
use lake_store::layout::{journal_prefix, reference_log_prefix};
use std::collections::BTreeSet;

/// A journal file old enough to be garbage, with its write's id.
struct OldFile {
    file: UnreferencedFile,
    write_id: String,
}

impl LanceEngine {
    /// See [`lake_engine::Engine::unreferenced_journal_files`].
    ///
    /// # Errors
    /// Storage errors.
    pub(crate) async fn journal_garbage(
        &self,
        table: &str,
        cutoff_ms: i64,
    ) -> Result<Vec<UnreferencedFile>, LanceEngineError> {
        let mut old = self.old_log_files(table, cutoff_ms).await?;
        if old.is_empty() {
            return Ok(Vec::new());
        }
        // Intents first, then the sidecars: a writer writes its head before it removes its
        // intent, so a log whose intent is gone at the first listing is named by a head the
        // second listing sees (the other order missed a head written between the two).
        let (intents, _) = lake_store::intents::list(self.store(), Some(table)).await?;
        let mut named = self.named_write_ids(table).await?;
        named.extend(intents.into_iter().map(|i| i.write_id));
        old.retain(|f| !named.contains(&f.write_id));
        let mut files: Vec<UnreferencedFile> = old.into_iter().map(|f| f.file).collect();
        files.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(files)
    }

    /// The files of `table`'s log folder (finished logs, local staging files, S3 multipart
    /// uploads) minted and last written before `cutoff_ms`.
    async fn old_log_files(&self, table: &str, cutoff_ms: i64) -> Result<Vec<OldFile>, LanceEngineError> {
        let prefix = reference_log_prefix(table);
        let mut found: Vec<(String, u64, i64)> = Vec::new();
        match self.store().local_dir() {
            Some(dir) => {
                // object_store does not list its staging files: read the folder itself.
                let folder = dir.join(&prefix);
                let entries = match std::fs::read_dir(&folder) {
                    Ok(entries) => entries,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(lake_store::StoreError::storage(&prefix, e).into()),
                };
                for entry in entries {
                    let entry = entry.map_err(|e| lake_store::StoreError::storage(&prefix, e))?;
                    let Ok(name) = entry.file_name().into_string() else { continue };
                    let Ok(meta) = std::fs::symlink_metadata(entry.path()) else { continue };
                    if !meta.is_file() {
                        continue;
                    }
                    let modified = meta.modified().map(chrono::DateTime::<chrono::Utc>::from);
                    let ms = modified.map(|t| t.timestamp_millis()).unwrap_or(i64::MAX);
                    found.push((format!("{prefix}/{name}"), meta.len(), ms));
                }
            }
            None => {
                for (key, meta) in self.store().list_all(&prefix).await? {
                    found.push((key, meta.size, meta.last_modified.timestamp_millis()));
                }
                if let Some(requests) = self.store().s3_requests() {
                    let full = self.store().path(&format!("{prefix}/")).to_string() + "/";
                    let root = self.store().prefix().to_string();
                    for upload in requests.list_multipart_uploads(&full).await? {
                        let key = if root.is_empty() {
                            upload.key.clone()
                        } else {
                            upload.key.strip_prefix(&format!("{root}/")).unwrap_or(&upload.key).to_string()
                        };
                        found.push((
                            format!("{key}#upload={}", upload.upload_id),
                            0,
                            upload.initiated.timestamp_millis(),
                        ));
                    }
                }
            }
        }
        Ok(found
            .into_iter()
            .filter_map(|(key, size, last_modified_ms)| {
                let parsed = parse_journal_file(&key)?;
                let minted = i64::try_from(parsed.write_id.timestamp_ms()).unwrap_or(i64::MAX);
                (minted < cutoff_ms && last_modified_ms < cutoff_ms).then(|| OldFile {
                    write_id: parsed.write_id.to_string(),
                    file: UnreferencedFile { key, size, last_modified_ms },
                })
            })
            .collect())
    }

    /// The write ids any sidecar of `table`, or its reference checkpoint, mentions: every
    /// ULID-shaped word of each document, decodable or not (a head names its log, and its log
    /// of removals, by their write ids; so does the checkpoint's snapshot).
    async fn named_write_ids(&self, table: &str) -> Result<BTreeSet<String>, LanceEngineError> {
        let mut named = BTreeSet::new();
        let mut keys: Vec<String> =
            self.store().list_all(&journal_prefix(table)).await?.into_iter().map(|(key, _)| key).collect();
        keys.push(crate::refs_checkpoint::checkpoint_key(table));
        for key in keys {
            let Some(bytes) = self.store().get(&key).await? else { continue };
            let text = String::from_utf8_lossy(&bytes);
            named.extend(
                text.split(|c: char| !c.is_ascii_alphanumeric())
                    .filter(|w| w.len() == 26 && ulid::Ulid::from_string(w).is_ok())
                    .map(str::to_string),
            );
        }
        Ok(named)
    }
}
