//! The managed key grammar: `objects/<ULID>/<name>`.
//!
//! - `<ULID>`: 26 characters of Crockford base32 (uppercase), minted when an upload starts;
//!   its first 48 bits are the start time in milliseconds since the Unix epoch (UTC). Keys
//!   therefore sort by upload start time, so a listing can stop at the first key younger than
//!   the GC cutoff.
//! - `<name>`: 1 to 200 characters of `[A-Za-z0-9._-]`, not starting with `.`; derived from the
//!   uploaded file's name, for operators.
//!
//! GC never considers a key that does not match this grammar exactly.

use crate::layout::OBJECTS_PREFIX;
use chrono::{DateTime, Utc};
use ulid::Ulid;

/// A key relative to the lake root, as a store lists it (`objects/<ULID>/<name>`,
/// `tables/<t>.lance/...`): what a GC plan names. Any listed key is one; [`ObjectKey::is_collectable`]
/// says whether GC may ever delete it. Serialised as its text.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ObjectKey(String);

impl ObjectKey {
    /// The key `key` (relative to the lake root, no leading `/`).
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Bytes the key's text holds on the heap (its allocation, for memory budgets).
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// The key's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// See [`is_collectable`].
    pub fn is_collectable(&self) -> bool {
        is_collectable(&self.0)
    }

    /// See [`minted_at`]: `None` for a key that is not collectable.
    pub fn minted_at(&self) -> Option<DateTime<Utc>> {
        minted_at(&self.0)
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<String> for ObjectKey {
    fn from(key: String) -> Self {
        Self(key)
    }
}

impl From<&str> for ObjectKey {
    fn from(key: &str) -> Self {
        Self(key.to_string())
    }
}

/// A parsed managed key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedKey {
    /// The upload's ULID.
    pub ulid: Ulid,
    /// The name part.
    pub name: String,
}

impl ManagedKey {
    /// Upload start time embedded in the ULID (UTC, millisecond precision).
    pub fn minted_at(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(self.ulid.timestamp_ms() as i64).unwrap_or(DateTime::<Utc>::MIN_UTC)
    }
}

/// Turns a file name into a grammar-conforming name: other characters become `_`, a leading
/// `.` becomes `_`, the result is cut to 200 bytes, and an empty name becomes `object`.
pub fn sanitize_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' { c } else { '_' })
        .take(200)
        .collect();
    if out.starts_with('.') {
        out.replace_range(0..1, "_");
    }
    if out.is_empty() {
        out.push_str("object");
    }
    out
}

/// Mints a new key for an upload of `name` (sanitised) with a fresh ULID.
pub fn mint_key(name: &str) -> (String, Ulid) {
    let ulid = Ulid::new();
    (format!("{OBJECTS_PREFIX}/{ulid}/{}", sanitize_name(name)), ulid)
}

/// Parses `key` (relative to the lake root) as a managed key; `None` when it does not match
/// the grammar exactly.
pub fn parse_managed_key(key: &str) -> Option<ManagedKey> {
    // The grammar is lake-common's, the one writes are checked against.
    if !lake_common::is_managed_key(key) {
        return None;
    }
    let rest = key.strip_prefix(OBJECTS_PREFIX)?.strip_prefix('/')?;
    let (ulid_text, name) = rest.split_once('/')?;
    let ulid = Ulid::from_string(ulid_text).ok()?;
    // Round-trip to reject non-canonical spellings (I, L, O, U are not Crockford digits).
    if ulid.to_string() != ulid_text {
        return None;
    }
    Some(ManagedKey { ulid, name: name.to_string() })
}

/// Parses `key` as a managed folder, `objects/<ULID>/` (a key ending with `/`, as a local
/// inventory lists an empty folder); its ULID, or `None`.
pub fn parse_managed_folder(key: &str) -> Option<Ulid> {
    let ulid_text = key.strip_prefix(OBJECTS_PREFIX)?.strip_prefix('/')?.strip_suffix('/')?;
    let ulid = Ulid::from_string(ulid_text).ok()?;
    (ulid.to_string() == ulid_text).then_some(ulid)
}

/// A reference log of a table's journal, or a staged upload of one, as GC collects it when no
/// journal entry names it (a write that never committed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalFileKey {
    /// The write's ULID (the log's name).
    pub write_id: Ulid,
    /// How the file is staged, when it is not a finished log.
    pub staged: Option<Staged>,
}

/// An upload that never finished, named by a key of the file it was writing followed by `#`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Staged {
    /// object_store's local staging file, `<key>#<digits>` (`LocalFileSystem` writes an upload,
    /// a multipart upload or a copy there and renames it over `<key>` when it finishes; a
    /// process killed in between leaves it).
    LocalPart(String),
    /// An incomplete S3 multipart upload of `<key>`, named in a key as `<key>#upload=<id>`.
    Upload(String),
}

/// Splits `key` into the key being uploaded and how its upload is staged: `<key>#<digits>` (a
/// local staging file) or `<key>#upload=<id>` (an S3 multipart upload, `<id>` without `/`);
/// `None` for a key without such a suffix. The part before `#` is not checked.
pub fn split_staged(key: &str) -> Option<(&str, Staged)> {
    let (base, suffix) = key.split_once('#')?;
    let staged = match suffix.strip_prefix("upload=") {
        Some(id) if !id.is_empty() && !id.contains('/') => Staged::Upload(id.to_string()),
        Some(_) => return None,
        None if !suffix.is_empty() && suffix.bytes().all(|b| b.is_ascii_digit()) => {
            Staged::LocalPart(suffix.to_string())
        }
        None => return None,
    };
    Some((base, staged))
}

/// Parses `key` as `tables/<table>.lance/_lake/object_ref_logs/<ULID>.arrows` (or the same
/// under a branch's `tree/<branch>/`), optionally
/// followed by `#<digits>` (a local staged upload) or `#upload=<id>` (an S3 multipart upload).
pub fn parse_journal_file(key: &str) -> Option<JournalFileKey> {
    let rest = key.strip_prefix(crate::layout::TABLES_PREFIX)?.strip_prefix('/')?;
    let (dataset, rest) = rest.split_once('/')?;
    let table = dataset.strip_suffix(crate::layout::DATASET_SUFFIX)?;
    crate::layout::validate_table_name(table).ok()?;
    // A branch's journal sits in its own dataset, `tree/<branch>/`.
    let rest = match rest.strip_prefix("tree/") {
        Some(branch_rest) => {
            let (branch, rest) = branch_rest.split_once('/')?;
            crate::layout::validate_table_name(&crate::layout::branch_lineage(table, branch)).ok()?;
            rest
        }
        None => rest,
    };
    let file = rest.strip_prefix("_lake/object_ref_logs/")?;
    let (name, staged) = match file.contains('#') {
        false => (file, None),
        true => split_staged(file).map(|(name, staged)| (name, Some(staged)))?,
    };
    let text = name.strip_suffix(".arrows")?;
    let write_id = Ulid::from_string(text).ok().filter(|u| u.to_string() == text)?;
    Some(JournalFileKey { write_id, staged })
}

/// An upload of a managed object that never finished: `objects/<ULID>/<name>#<digits>` (the
/// local staging file of a `lake ingest` or a `copy_fresh` killed mid-way) or
/// `objects/<ULID>/<name>#upload=<id>` (an S3 multipart upload of an object above
/// [`crate::writer::PART_SIZE`], never completed nor aborted). No reference can name one (a
/// reference with `#` is refused), so it is GC's own garbage once its upload was minted before
/// the cutoff: the publication guard refuses to publish an object minted that long ago, whether
/// or not its upload ever finishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedObject {
    /// The managed key being uploaded.
    pub key: ManagedKey,
    /// How it is staged.
    pub staged: Staged,
}

/// Parses `key` as a staged upload of a managed object (see [`StagedObject`]); `None` otherwise.
pub fn parse_staged_object(key: &str) -> Option<StagedObject> {
    let (base, staged) = split_staged(key)?;
    Some(StagedObject { key: parse_managed_key(base)?, staged })
}

/// Parses `key` as a store-clock probe, `_lake/clock/<ULID>` ([`crate::clock`]), or the local
/// staging file of one (`#<digits>`); its ULID (minted by the GC host that wrote it), or `None`.
/// A probe lives for one clock reading: one left behind (a dry run killed between writing and
/// deleting it, or whose delete failed) is GC's own garbage once minted before the cutoff.
pub fn parse_clock_probe(key: &str) -> Option<Ulid> {
    let rest = key.strip_prefix(crate::layout::CLOCK_PREFIX)?.strip_prefix('/')?;
    let text = match rest.contains('#') {
        false => rest,
        true => match split_staged(rest)? {
            (text, Staged::LocalPart(_)) => text,
            (_, Staged::Upload(_)) => return None,
        },
    };
    Ulid::from_string(text).ok().filter(|u| u.to_string() == text)
}

/// What kind of key a plan's candidate is, by its grammar (for reports: the key is the kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GarbageKind {
    /// An orphan managed object, `objects/<ULID>/<name>`.
    Object,
    /// An empty managed folder, `objects/<ULID>/`.
    EmptyFolder,
    /// An upload of a managed object that never finished ([`StagedObject`]).
    StagedUpload,
    /// A store-clock probe left behind ([`parse_clock_probe`]).
    ClockProbe,
    /// A reference log (or a staged upload of one) that no journal entry names
    /// ([`parse_journal_file`]).
    ReferenceLog,
}

impl GarbageKind {
    /// Every kind, in report order.
    pub const ALL: [GarbageKind; 5] = [
        GarbageKind::Object,
        GarbageKind::EmptyFolder,
        GarbageKind::StagedUpload,
        GarbageKind::ClockProbe,
        GarbageKind::ReferenceLog,
    ];

    /// The kind's name in reports (`staged_upload`, ...).
    pub fn name(self) -> &'static str {
        match self {
            GarbageKind::Object => "object",
            GarbageKind::EmptyFolder => "empty_folder",
            GarbageKind::StagedUpload => "staged_upload",
            GarbageKind::ClockProbe => "clock_probe",
            GarbageKind::ReferenceLog => "reference_log",
        }
    }
}

/// The kind of the collectable `key`; `None` for a key GC never deletes.
pub fn garbage_kind(key: &str) -> Option<GarbageKind> {
    if parse_managed_key(key).is_some() {
        Some(GarbageKind::Object)
    } else if parse_managed_folder(key).is_some() {
        Some(GarbageKind::EmptyFolder)
    } else if parse_staged_object(key).is_some() {
        Some(GarbageKind::StagedUpload)
    } else if parse_clock_probe(key).is_some() {
        Some(GarbageKind::ClockProbe)
    } else if parse_journal_file(key).is_some() {
        Some(GarbageKind::ReferenceLog)
    } else {
        None
    }
}

/// True for the only keys GC ever deletes: managed objects (`objects/<ULID>/<name>`), managed
/// folders (`objects/<ULID>/`), unfinished uploads of managed objects ([`parse_staged_object`]),
/// clock probes left behind ([`parse_clock_probe`]) and reference logs of writes that never
/// committed ([`parse_journal_file`]). Deleters refuse every other key, whatever a plan says.
pub fn is_collectable(key: &str) -> bool {
    garbage_kind(key).is_some()
}

/// The time a collectable key was minted (the time in its ULID, UTC).
pub fn minted_at(key: &str) -> Option<DateTime<Utc>> {
    let ulid = parse_managed_key(key)
        .map(|k| k.ulid)
        .or_else(|| parse_managed_folder(key))
        .or_else(|| parse_staged_object(key).map(|s| s.key.ulid))
        .or_else(|| parse_clock_probe(key))
        .or_else(|| parse_journal_file(key).map(|f| f.write_id))?;
    DateTime::<Utc>::from_timestamp_millis(ulid.timestamp_ms() as i64)
}

/// The smallest managed key whose ULID time is at or after `cutoff`: every managed key that
/// sorts at or after it was minted at or after the cutoff, so listing can stop there.
pub fn first_key_at(cutoff: DateTime<Utc>) -> String {
    let ms = u64::try_from(cutoff.timestamp_millis()).unwrap_or(0);
    let ulid = Ulid::from_parts(ms, 0);
    format!("{OBJECTS_PREFIX}/{ulid}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_keys_parse_and_sort_by_time() {
        let (a, ua) = mint_key("episode 1.mcap");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let (b, _) = mint_key(".hidden");
        assert!(a < b);
        let parsed = parse_managed_key(&a).unwrap();
        assert_eq!(parsed.ulid, ua);
        assert_eq!(parsed.name, "episode_1.mcap");
        assert_eq!(parse_managed_key(&b).unwrap().name, "_hidden");
        assert!(first_key_at(parsed.minted_at()).as_str() <= a.as_str());
        assert!(first_key_at(parsed.minted_at() + chrono::Duration::milliseconds(1)).as_str() > a.as_str());
    }

    #[test]
    fn keys_outside_the_grammar_are_rejected() {
        let ulid = Ulid::new().to_string();
        for bad in [
            format!("objectsx/{ulid}/a"),
            format!("objects/{ulid}"),
            format!("objects/{ulid}/"),
            format!("objects/{ulid}/a/b"),
            format!("objects/{ulid}/.a"),
            format!("objects/{}/a", ulid.to_lowercase()),
            format!("objects/{}/a", &ulid[..25]),
            format!("tables/{ulid}/a"),
            format!("objects/{ulid}/a b"),
            "objects/0000000000000000000000000I/a".to_string(),
        ] {
            assert!(parse_managed_key(&bad).is_none(), "{bad}");
        }
        assert!(parse_managed_folder(&format!("objects/{ulid}/")).is_some());
        for bad in
            [format!("objects/{ulid}"), format!("objects/{ulid}/a/"), format!("objects/{}/", ulid.to_lowercase())]
        {
            assert!(parse_managed_folder(&bad).is_none() && !is_collectable(&bad), "{bad}");
        }
        for bad in ["tables/t.lance/data/x.lance", "_lake/lake.json", "objects/", "objects/x/"] {
            assert!(!is_collectable(bad), "{bad}");
        }
        // Unfinished uploads of managed objects and clock probes left behind.
        let object = format!("objects/{ulid}/big.bin");
        for (good, kind) in [
            (format!("{object}#1"), GarbageKind::StagedUpload),
            (format!("{object}#upload=2~abc.DEF-1"), GarbageKind::StagedUpload),
            (format!("_lake/clock/{ulid}"), GarbageKind::ClockProbe),
            (format!("_lake/clock/{ulid}#3"), GarbageKind::ClockProbe),
            (object.clone(), GarbageKind::Object),
            (format!("objects/{ulid}/"), GarbageKind::EmptyFolder),
        ] {
            assert_eq!(garbage_kind(&good), Some(kind), "{good}");
            assert_eq!(minted_at(&good), minted_at(&object), "{good}");
        }
        for bad in [
            format!("{object}#"),
            format!("{object}#x"),
            format!("{object}#1/x"),
            format!("{object}#upload="),
            format!("{object}#upload=a/b"),
            format!("objects/{ulid}/.big#1"),
            format!("objects/{ulid}#1"),
            format!("objects/{ulid}/#1"),
            format!("_lake/clock/{ulid}#upload=1"),
            format!("_lake/clock/{}", ulid.to_lowercase()),
            format!("_lake/clock/{ulid}/x"),
            format!("_lake/registry/{ulid}"),
            "_lake/clock/".to_string(),
        ] {
            assert!(!is_collectable(&bad), "{bad}");
        }
        let log = format!("tables/t.lance/_lake/object_ref_logs/{ulid}.arrows");
        for good in [log.clone(), format!("{log}#12"), format!("{log}#upload=abc.DEF-1")] {
            assert!(is_collectable(&good) && minted_at(&good).is_some(), "{good}");
        }
        for bad in [
            format!("tables/t.lance/_lake/object_refs/{ulid}.arrows"),
            format!("tables/t/_lake/object_ref_logs/{ulid}.arrows"),
            format!("tables/t.lance/_lake/object_ref_logs/{ulid}.arrows#"),
            format!("tables/t.lance/_lake/object_ref_logs/{ulid}.arrows#x"),
            format!("tables/t.lance/_lake/object_ref_logs/{ulid}.json"),
            format!("tables/t.lance/_lake/object_ref_logs/x/{ulid}.arrows"),
        ] {
            assert!(!is_collectable(&bad), "{bad}");
        }
    }
}
