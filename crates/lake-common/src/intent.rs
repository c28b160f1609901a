//! [`WriteIntent`]: the record a writer leaves before it may publish references, so that garbage
//! collection keeps the objects of a commit that may still land.
//!
//! A Lance commit that lake reports as failed (a timeout, a lost response) can still become a
//! version later: a timeout stops the waiting, not the write (an S3 PUT already sent, a rename
//! in a blocking thread). Every engine operation that can add references therefore writes, before
//! its publication guard check, one intent document (`_lake/intents/<table>/<write_id>.json`,
//! create-only) naming the references the commit may add. GC reads every intent after fixing its
//! cutoff and before reading lineage, and treats their references as live. The intent is removed
//! once the version's journal entry is written, or once it is proven that the commit can no
//! longer land (`docs/safety.md`, "Commits that land late").
//!
//! The document is canonical compact JSON, fields in declaration order, sealed by the SHA-256 of
//! those bytes (`sha256`, the last field), like a sidecar. Decoding fails closed: unknown fields,
//! another format version, a broken seal, a malformed write id, uuid or digest are refused.
//!
//! ```text
//! {"format_version":2,"table":"t","write_id":"01J...","operation":"append",
//!  "transaction_uuid":"6f1c...","read_version":3,"deadline_ms":30000,"restored_version":null,
//!  "references":{"log":{"references":1300,"bytes":91230,"sha256":"ab12..."}},"sha256":"..."}
//! ```

use crate::delta::{check_seal, seal};
use crate::error::DecodeError;
use crate::identity::ObjectIdentity;
use serde::{Deserialize, Serialize};

/// The intent format this build writes. Format 2 added `schema` (a create's Arrow schema, so a
/// resolver can fence a create that never landed); format 1 documents of earlier builds, which
/// never carry it, are still read.
pub const INTENT_FORMAT_VERSION: u64 = 2;

/// The oldest intent format this build reads.
pub const OLDEST_INTENT_FORMAT_VERSION: u64 = 1;

/// Most identities an intent lists inline; a write that may add more names a reference log
/// instead (about 150 bytes each: an inline intent stays under about 150 KiB).
pub const INLINE_INTENT_LIMIT: usize = 1000;

/// The engine operation that wrote an intent: it says how the version is journaled if the
/// commit is found to have landed without its journal entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntentOperation {
    /// A streamed append to an existing table: journaled by a delta head naming the write's log.
    Append,
    /// A streamed overwrite: journaled by a snapshot head naming the write's log.
    Overwrite,
    /// A streamed first write that creates the table (version 1 only): a snapshot head.
    Create,
    /// A merge insert: journaled from the two manifests.
    Upsert,
    /// `UPDATE ... SET`: journaled from the two manifests.
    Update,
    /// Columns added from a stream (`Dataset::merge`): journaled from the two manifests.
    AddColumns,
    /// A restore of `restored_version`: journaled as a snapshot of that version's references.
    Restore,
    /// A branch's first version (a shallow clone of `restored_version` of the main line):
    /// journaled as a snapshot of that version's references.
    CreateBranch,
}

impl IntentOperation {
    /// The operation's name as written in the document (`add_columns`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            IntentOperation::Append => "append",
            IntentOperation::Overwrite => "overwrite",
            IntentOperation::Create => "create",
            IntentOperation::Upsert => "upsert",
            IntentOperation::Update => "update",
            IntentOperation::AddColumns => "add_columns",
            IntentOperation::Restore => "restore",
            IntentOperation::CreateBranch => "create_branch",
        }
    }

    /// True for the streamed writes whose journal entry is a head naming the intent's log.
    pub fn is_streamed(&self) -> bool {
        matches!(self, IntentOperation::Append | IntentOperation::Overwrite | IntentOperation::Create)
    }
}

/// A reference log's size and digest, as an intent binds it. The log is the table's reference
/// log of the intent's write id (`<journal folder>/object_ref_logs/<write_id>.arrows`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntentLog {
    /// Rows (references) in the log.
    pub references: u64,
    /// The log's length in bytes.
    pub bytes: u64,
    /// SHA-256 of the log's bytes, 64 lowercase hex characters.
    pub sha256: String,
}

/// The references a commit may add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum IntentReferences {
    /// At most [`INLINE_INTENT_LIMIT`] identities, sorted strictly ascending.
    Inline(Vec<ObjectIdentity>),
    /// A reference log of the intent's write id (a streamed write's own log, or one written for
    /// the intent).
    Log(IntentLog),
}

/// One write intent (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteIntent {
    /// Always [`INTENT_FORMAT_VERSION`].
    pub format_version: u64,
    /// The lineage written, as the registry spells it (`t`, or `t@b` for a branch).
    pub table: String,
    /// The write's ULID (26 Crockford base-32 characters, upper case): the document's file name
    /// and, for a log, the log's.
    pub write_id: String,
    /// What wrote it.
    pub operation: IntentOperation,
    /// The UUID of the Lance transaction the commit publishes (the manifest of the version it
    /// lands as carries it; Lance keeps it through every retry and rebase of one commit). The
    /// writer reads it from the manifest it is about to publish; `None` only in documents of
    /// earlier builds, which recorded it in attempt markers (`<write_id>.<uuid>.attempt`). It
    /// serves to report which version was the write's, never to journal one: anyone can read it
    /// and put it in a transaction of their own (docs/protocol.md).
    pub transaction_uuid: Option<String>,
    /// The version the write read (0 for a create): a landed commit is a version above it.
    pub read_version: u64,
    /// Milliseconds after `last_modified(intent)` (the store's clock) until a resolver may revoke
    /// the write (a liveness rule only: safety never depends on it, docs/protocol.md).
    pub deadline_ms: u64,
    /// The version a restore restores, or a branch starts from (else none).
    pub restored_version: Option<u64>,
    /// The references the commit may add.
    pub references: IntentReferences,
    /// A create's Arrow schema (an Arrow IPC stream holding only the schema, as lowercase hex):
    /// what a resolver creates an empty version 1 with when it fences a create that never
    /// landed. `None` for every other operation (and in format 1); not written when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
}

/// The wire form: the intent and its seal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SealedIntent {
    format_version: u64,
    table: String,
    write_id: String,
    operation: IntentOperation,
    transaction_uuid: Option<String>,
    read_version: u64,
    deadline_ms: u64,
    restored_version: Option<u64>,
    references: IntentReferences,
    #[serde(default)]
    schema: Option<String>,
    sha256: String,
}

impl WriteIntent {
    /// The canonical bytes (compact JSON, fields in declaration order), sealed by their SHA-256.
    pub fn encode(&self) -> Vec<u8> {
        // Serialising strings, integers and identities cannot fail.
        seal(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decodes and checks an intent document.
    ///
    /// # Errors
    /// [`DecodeError::CorruptJson`] for bytes that are not an intent (unknown fields, a bad
    /// write id, UUID or digest, inline identities out of order or too many);
    /// [`DecodeError::UnknownFormatVersion`]; [`DecodeError::SealMismatch`] for an edited one.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        #[derive(Deserialize)]
        struct FormatProbe {
            format_version: Option<serde_json::Value>,
        }
        let probe: FormatProbe = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        match probe.format_version.as_ref().and_then(serde_json::Value::as_u64) {
            Some(OLDEST_INTENT_FORMAT_VERSION..=INTENT_FORMAT_VERSION) => {}
            Some(found) => return Err(DecodeError::UnknownFormatVersion { found, supported: INTENT_FORMAT_VERSION }),
            None => return Err(DecodeError::CorruptJson("missing or non-integer `format_version`".into())),
        }
        let wire: SealedIntent = serde_json::from_slice(bytes).map_err(|e| DecodeError::CorruptJson(e.to_string()))?;
        let intent = WriteIntent {
            format_version: wire.format_version,
            table: wire.table,
            write_id: wire.write_id,
            operation: wire.operation,
            transaction_uuid: wire.transaction_uuid,
            read_version: wire.read_version,
            deadline_ms: wire.deadline_ms,
            restored_version: wire.restored_version,
            references: wire.references,
            schema: wire.schema,
        };
        intent.validate()?;
        check_seal(&serde_json::to_vec(&intent).unwrap_or_default(), &wire.sha256)?;
        Ok(intent)
    }

    fn validate(&self) -> Result<(), DecodeError> {
        let bad = |what: String| Err(DecodeError::CorruptJson(what));
        if self.table.is_empty() || self.table.contains('/') {
            return bad(format!("`table` {:?} is not a table name", self.table));
        }
        if !is_ulid(&self.write_id) {
            return bad(format!("`write_id` {:?} is not a ULID", self.write_id));
        }
        if let Some(schema) = &self.schema {
            if self.format_version < 2 || self.operation != IntentOperation::Create {
                return bad("`schema` is only recorded by a create, from format 2".into());
            }
            if schema.is_empty()
                || schema.len() % 2 != 0
                || !schema.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return bad("`schema` is not lowercase hex".into());
            }
        }
        if let Some(uuid) = &self.transaction_uuid {
            if !is_uuid(uuid) {
                return bad(format!("`transaction_uuid` {uuid:?} is not a UUID"));
            }
        }
        match &self.references {
            IntentReferences::Log(log) if !is_sha256_hex(&log.sha256) => {
                bad(format!("`references.log.sha256` {:?} is not 64 lowercase hex characters", log.sha256))
            }
            IntentReferences::Inline(ids) if ids.len() > INLINE_INTENT_LIMIT => {
                bad(format!("{} inline references, more than {INLINE_INTENT_LIMIT}", ids.len()))
            }
            IntentReferences::Inline(ids) => match ids.windows(2).position(|w| w[0] >= w[1]) {
                Some(i) => {
                    bad(format!("inline reference {} ({}) is not after the one before it", i + 1, ids[i + 1].uri))
                }
                None => Ok(()),
            },
            IntentReferences::Log(_) => Ok(()),
        }
    }
}

/// A schema as an intent records it ([`WriteIntent::schema`]): an Arrow IPC stream holding only
/// `schema` (no batch), as lowercase hex.
///
/// # Errors
/// Arrow's, for a schema IPC cannot encode.
pub fn schema_to_hex(schema: &arrow_schema::Schema) -> Result<String, arrow_schema::ArrowError> {
    let mut bytes = Vec::new();
    let mut writer = arrow_ipc::writer::StreamWriter::try_new(&mut bytes, schema)?;
    writer.finish()?;
    drop(writer);
    Ok(hex::encode(bytes))
}

/// The schema [`schema_to_hex`] wrote.
///
/// # Errors
/// [`DecodeError::CorruptJson`] when `text` is not hex of an Arrow IPC stream.
pub fn schema_from_hex(text: &str) -> Result<arrow_schema::SchemaRef, DecodeError> {
    let bytes = hex::decode(text).map_err(|e| DecodeError::CorruptJson(format!("`schema` is not hex: {e}")))?;
    let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .map_err(|e| DecodeError::CorruptJson(format!("`schema` is not an Arrow IPC schema: {e}")))?;
    Ok(reader.schema())
}

/// True for a canonical ULID: 26 characters of Crockford base 32, upper case.
pub fn is_ulid(s: &str) -> bool {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    s.len() == 26 && s.bytes().all(|b| CROCKFORD.contains(&b)) && s.as_bytes()[0] <= b'7'
}

/// True for a UUID in its hyphenated lower-case form (`8-4-4-4-12` hex digits), as Lance writes
/// transaction UUIDs.
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(references: IntentReferences) -> WriteIntent {
        WriteIntent {
            format_version: INTENT_FORMAT_VERSION,
            table: "t@b".into(),
            write_id: "01J9Z3K8Q4W5X6Y7Z8A9B0C1D2".into(),
            operation: IntentOperation::Append,
            transaction_uuid: Some("6f1c2a3b-0d4e-4f5a-8b9c-0123456789ab".into()),
            read_version: 3,
            deadline_ms: 30_000,
            restored_version: None,
            references,
            schema: None,
        }
    }

    #[test]
    fn intents_round_trip_and_are_sealed() {
        let log = IntentLog { references: 3, bytes: 10, sha256: "ab".repeat(32) };
        let ids = vec![ObjectIdentity::new("objects/a/x", [1; 32], 1), ObjectIdentity::new("objects/b/x", [2; 32], 2)];
        for intent in [sample(IntentReferences::Log(log)), sample(IntentReferences::Inline(ids))] {
            let bytes = intent.encode();
            assert_eq!(WriteIntent::decode(&bytes).unwrap(), intent);
            let text = String::from_utf8(bytes.clone()).unwrap();
            assert!(text.starts_with("{\"format_version\":2,\"table\":\"t@b\""), "{text}");
            // Any edit breaks the seal.
            let edited = text.replacen("\"read_version\":3", "\"read_version\":4", 1);
            assert!(matches!(WriteIntent::decode(edited.as_bytes()), Err(DecodeError::SealMismatch { .. })));
        }
    }

    #[test]
    fn a_schema_round_trips_through_hex() {
        let schema = arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("episode", arrow_schema::DataType::Utf8, false),
            crate::data_location_field("file", true),
        ]);
        let text = schema_to_hex(&schema).unwrap();
        assert_eq!(schema_from_hex(&text).unwrap().as_ref(), &schema);
        assert!(schema_from_hex("zz").is_err());
        assert!(schema_from_hex("00").is_err());
    }

    #[test]
    fn malformed_intents_are_refused() {
        let good = sample(IntentReferences::Inline(vec![]));
        let mut other_format = good.clone();
        other_format.format_version = 3;
        assert!(matches!(
            WriteIntent::decode(&other_format.encode()),
            Err(DecodeError::UnknownFormatVersion { found: 3, .. })
        ));
        // Format 1 (earlier builds) is read; it never carries a schema.
        let mut first = good.clone();
        first.format_version = 1;
        assert_eq!(WriteIntent::decode(&first.encode()).unwrap(), first);
        let create = WriteIntent { operation: IntentOperation::Create, schema: Some("0a0b".into()), ..good.clone() };
        assert_eq!(WriteIntent::decode(&create.encode()).unwrap(), create);
        for schema in ["0A0B", "abc", ""] {
            let broken = WriteIntent { schema: Some(schema.into()), ..create.clone() };
            assert!(WriteIntent::decode(&broken.encode()).is_err(), "{schema}");
        }
        let not_a_create = WriteIntent { schema: Some("0a0b".into()), ..good.clone() };
        assert!(WriteIntent::decode(&not_a_create.encode()).is_err());
        for broken in [
            WriteIntent { write_id: "not-a-ulid".into(), ..good.clone() },
            WriteIntent { transaction_uuid: Some("xyz".into()), ..good.clone() },
            WriteIntent { table: "a/b".into(), ..good.clone() },
            WriteIntent {
                references: IntentReferences::Inline(vec![
                    ObjectIdentity::new("objects/b/x", [2; 32], 2),
                    ObjectIdentity::new("objects/a/x", [1; 32], 1),
                ]),
                ..good.clone()
            },
            WriteIntent {
                references: IntentReferences::Log(IntentLog { references: 1, bytes: 1, sha256: "AB".repeat(32) }),
                ..good.clone()
            },
        ] {
            assert!(matches!(WriteIntent::decode(&broken.encode()), Err(DecodeError::CorruptJson(_))), "{broken:?}");
        }
        let unknown_field = String::from_utf8(good.encode()).unwrap().replacen('{', "{\"extra\":1,", 1);
        assert!(WriteIntent::decode(unknown_field.as_bytes()).is_err());
        assert!(WriteIntent::decode(b"{\"format_version\":1}").is_err());
        assert!(WriteIntent::decode(b"garbage").is_err());
    }
}
