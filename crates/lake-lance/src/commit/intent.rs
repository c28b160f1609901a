//! The write intent of one change (step 2 of the protocol, docs/protocol.md): written by the
//! gate right before the change's first manifest write, removed once the version's journal
//! entry is written, or by a resolver once the write can no longer land.

use crate::commit::change::{Adds, Named};
use crate::error::LanceEngineError;
use lake_common::intent::{IntentLog, IntentOperation, IntentReferences, WriteIntent, INLINE_INTENT_LIMIT};
use lake_common::{ObjectIdentity, ReferenceLogEncoder};
use lake_store::guard::PublicationGuard;
use lake_store::intents;
use lake_store::layout::reference_log_key;
use lake_store::store::LakeStore;
use std::time::Duration;

/// Shortest deadline a write gets by default (the guard's margin is used when longer).
pub const MIN_COMMIT_DEADLINE: Duration = Duration::from_secs(30);
/// Longest deadline a write gets by default.
pub const MAX_COMMIT_DEADLINE: Duration = Duration::from_secs(300);

/// The default deadline of a write under `guard`: its margin, at least [`MIN_COMMIT_DEADLINE`]
/// and at most [`MAX_COMMIT_DEADLINE`]. It counts from the intent's store time (written right
/// before the first manifest write, after the data phase) and only says when a resolver may
/// revoke the write: safety never depends on it (docs/protocol.md, "Clocks").
pub fn default_commit_deadline(guard: &PublicationGuard) -> Duration {
    guard.margin().clamp(MIN_COMMIT_DEADLINE, MAX_COMMIT_DEADLINE)
}

/// What the gate writes as the intent of a change.
pub(crate) struct IntentSpec {
    pub(crate) operation: IntentOperation,
    pub(crate) read_version: u64,
    pub(crate) named: Named,
    pub(crate) restored_version: Option<u64>,
    /// A create's schema, as the intent records it (`lake_common::intent::schema_to_hex`).
    pub(crate) schema: Option<String>,
    pub(crate) deadline: Duration,
    /// The lake policy's publication guard.
    pub(crate) guard: PublicationGuard,
}

impl IntentSpec {
    /// The spec of a change that adds `adds`, under `guard`, with `deadline`.
    ///
    /// # Errors
    /// [`LanceEngineError::InvalidInput`] for a create's schema Arrow cannot encode.
    pub(crate) fn new(adds: Adds, guard: PublicationGuard, deadline: Duration) -> Result<Self, LanceEngineError> {
        let schema = match &adds.schema {
            Some(schema) => Some(lake_common::intent::schema_to_hex(schema).map_err(|e| {
                LanceEngineError::InvalidInput(format!("the table's schema cannot be recorded in a write intent: {e}"))
            })?),
            None => None,
        };
        Ok(Self {
            operation: adds.operation,
            read_version: adds.read_version,
            named: adds.named,
            restored_version: adds.restored_version,
            schema: schema.filter(|_| adds.operation == IntentOperation::Create),
            deadline,
            guard,
        })
    }

    /// Writes the intent of write `write_id` of `table` create-only, naming `uuid` (the Lance
    /// transaction's, as the manifest about to be published carries it). Identities beyond
    /// [`INLINE_INTENT_LIMIT`] are written as a reference log of the write first.
    ///
    /// # Errors
    /// Storage errors (nothing was published; a log written here is removed again).
    pub(crate) async fn write(
        &self,
        store: &LakeStore,
        table: &str,
        write_id: &str,
        uuid: Option<String>,
    ) -> Result<IntentWrite, LanceEngineError> {
        let (references, own_log) = match &self.named {
            Named::Log { totals, .. } => (
                IntentReferences::Log(IntentLog {
                    references: totals.references,
                    bytes: totals.bytes,
                    sha256: totals.sha256.clone(),
                }),
                false,
            ),
            Named::Identities { named, .. } => {
                let mut ids = named.clone();
                ids.sort();
                ids.dedup();
                if ids.len() <= INLINE_INTENT_LIMIT {
                    (IntentReferences::Inline(ids), false)
                } else {
                    (IntentReferences::Log(write_intent_log(store, table, write_id, &ids).await?), true)
                }
            }
        };
        let intent = WriteIntent {
            format_version: lake_common::intent::INTENT_FORMAT_VERSION,
            table: table.to_string(),
            write_id: write_id.to_string(),
            operation: self.operation,
            transaction_uuid: uuid.clone(),
            read_version: self.read_version,
            deadline_ms: u64::try_from(self.deadline.as_millis()).unwrap_or(u64::MAX),
            restored_version: self.restored_version,
            references,
            schema: self.schema.clone(),
        };
        let key = match intents::write(store, &intent).await {
            Ok(key) => key,
            Err(e) => {
                if own_log {
                    crate::journaling::discard_log(store, &reference_log_key(table, write_id)).await;
                }
                return Err(e.into());
            }
        };
        Ok(IntentWrite {
            table: table.to_string(),
            write_id: write_id.to_string(),
            key,
            read_version: self.read_version,
            transaction_uuid: uuid,
        })
    }
}

/// Writes `ids` (sorted) as the reference log of write `write_id`, for its intent.
async fn write_intent_log(
    store: &LakeStore,
    table: &str,
    write_id: &str,
    ids: &[ObjectIdentity],
) -> Result<IntentLog, LanceEngineError> {
    let log_error = |e: &dyn std::fmt::Display| LanceEngineError::JournalLog {
        table: table.into(),
        message: format!("the write intent's reference log: {e}"),
    };
    let mut encoder = ReferenceLogEncoder::new(table, write_id).map_err(|e| log_error(&e))?;
    let mut bytes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        encoder.push(id);
        if (i + 1) % 8192 == 0 {
            encoder.flush_batch().map_err(|e| log_error(&e))?;
            bytes.extend(encoder.take_bytes());
        }
    }
    let (rest, totals) = encoder.finish().map_err(|e| log_error(&e))?;
    bytes.extend(rest);
    store.put(&reference_log_key(table, write_id), bytes).await?;
    Ok(IntentLog { references: totals.references, bytes: totals.bytes, sha256: totals.sha256 })
}

/// A change whose intent is written.
#[derive(Debug, Clone)]
pub(crate) struct IntentWrite {
    /// The lineage.
    pub(crate) table: String,
    /// The write id (the intent's file name, and its log's).
    pub(crate) write_id: String,
    /// The intent's key.
    pub(crate) key: String,
    /// The version the write read.
    pub(crate) read_version: u64,
    /// The transaction's UUID the intent names.
    pub(crate) transaction_uuid: Option<String>,
}

impl IntentWrite {
    /// Removes the intent (and a revocation marker a resolver created meanwhile): the last step
    /// of a committed write, once its journal entry is written. A failure is logged: the intent
    /// then stays until a resolver finds the version journaled.
    pub(crate) async fn end(&self, store: &LakeStore) {
        if let Err(e) = intents::remove_own(store, &self.table, &self.write_id).await {
            tracing::warn!(intent = %self.key, "could not remove the write intent of a journaled version: {e}");
        }
    }
}
