//! Sidecar storage: `tables/<name>.lance/_lake/object_refs/<version>.json`.
//!
//! Lance's cleanup lists only its own subtrees (`_versions`, `data`, `_deletions`, ...), so the
//! journal survives version cleanup (a test proves it); sidecars of cleaned-up versions are what
//! lets replay compute the counts of later versions.
//!
//! Size: about 625 lines, no unit tests; the writer and every reader of both entry formats (inline
//! JSON, and a head naming reference logs streamed block by block, their length, SHA-256 and row
//! count checked) and the journal's listing: one file, so that writer and readers agree.

use crate::error::LanceEngineError;
use crate::log_upload::upload_sorted;
use lake_common::{
    DecodeError, DeltaKind, EntryList, LogDecoder, LogHead, ObjectIdentity, ObjectReferenceDelta, SidecarDocument,
};
use lake_engine::LineageProblem;
use lake_store::layout::{journal_prefix, reference_log_key, sidecar_key};
use lake_store::store::{CreateOutcome, LakeStore};
use std::collections::BTreeMap;

/// Entries with at most this many identities (`added` and `removed` together) are written
/// inline, as one JSON document; larger ones as a head naming sorted reference logs, which every
/// reader streams in bounded memory (`docs/journal-format.md`, "Head and reference log"). An
/// inline entry costs about 150 bytes a reference to parse whole; at 1,024 that is 150 KB.
pub const INLINE_MAX_IDENTITIES: usize = 1024;

/// Writes the entry `delta` create-only: inline when it has at most [`INLINE_MAX_IDENTITIES`]
/// identities, else as sorted logs (uploaded first) and a head naming them. Writing the same
/// entry again is a no-op (idempotent retry: the same bytes, or a head whose logs hold the same
/// counts); a different entry is a conflict, and the logs just uploaded are deleted.
///
/// # Errors
/// [`LanceEngineError::SidecarConflict`], [`LanceEngineError::SidecarWrite`].
pub async fn write(store: &LakeStore, delta: &ObjectReferenceDelta) -> Result<(), LanceEngineError> {
    if delta.added.len() + delta.removed.len() <= INLINE_MAX_IDENTITIES {
        return match create(store, &delta.table, delta.version, delta.encode()).await? {
            None => Ok(()),
            Some(existing) => same_entry(store, delta, &existing).await,
        };
    }
    let (table, version) = (delta.table.as_str(), delta.version);
    fn entries(list: &[lake_common::ReferenceCount]) -> impl Iterator<Item = (&ObjectIdentity, u64)> {
        list.iter().map(|e| (&e.identity, e.count))
    }
    let added = upload_sorted(store, table, version, entries(&delta.added)).await?;
    let removed = match delta.removed.is_empty() {
        true => None,
        false => match upload_sorted(store, table, version, entries(&delta.removed)).await {
            Ok(log) => Some(log),
            Err(e) => {
                crate::log_upload::discard(store, table, &added).await;
                return Err(e);
            }
        },
    };
    let mut head = LogHead::new(table, version, delta.kind, added);
    head.parent = delta.parent;
    if let Some(removed) = removed {
        head = head.with_removed(removed);
    }
    if let Some(binding) = delta.binding.clone() {
        head = head.bound(binding);
    }
    // Our head did not land (another is there): its logs are named by nothing and deleted. A
    // failed write is not known not to have landed (a timed-out PUT may have): its logs stay
    // (GC collects them past the cutoff when nothing names them).
    let existing = create(store, table, version, head.encode()).await?;
    let Some(existing) = existing else { return Ok(()) };
    let outcome = same_entry(store, delta, &existing).await;
    for log in head.logs() {
        crate::log_upload::discard(store, table, log).await;
    }
    outcome
}

/// Writes a head whose logs are already complete (a streamed write's, or repair's) create-only,
/// with the same idempotence as [`write`].
///
/// # Errors
/// As [`write`].
pub async fn write_head(store: &LakeStore, head: &LogHead) -> Result<(), LanceEngineError> {
    let bytes = head.encode();
    let Some(existing) = create(store, &head.table, head.version, bytes.clone()).await? else {
        return Ok(());
    };
    // Another shape or other log names: the same entry only if both read to the same counts
    // (read whole: a retry's rare path).
    let outcome = match decode(store, &head.table, head.version, &bytes).await? {
        Ok(ours) => same_entry(store, &ours, &existing).await,
        Err(_) => Err(LanceEngineError::SidecarConflict { table: head.table.clone(), version: head.version }),
    };
    // The same entry under other log names: this head's logs that the existing entry does not
    // name are named by nothing now, and deleted (on a conflict they are left: a write intent
    // may still name them; GC collects them once nothing does).
    if outcome.is_ok() {
        let named = String::from_utf8_lossy(&existing);
        for log in head.logs().filter(|l| !named.contains(l.write_id.as_str())) {
            crate::log_upload::discard(store, &head.table, log).await;
        }
    }
    outcome
}

/// Creates the sidecar of `version`; `Some(existing bytes)` when a sidecar with other bytes is
/// there (the same bytes are a no-op).
async fn create(
    store: &LakeStore,
    table: &str,
    version: u64,
    bytes: Vec<u8>,
) -> Result<Option<bytes::Bytes>, LanceEngineError> {
    // Bytes: the create-only write and the comparison share one buffer.
    let bytes = bytes::Bytes::from(bytes);
    let key = sidecar_key(table, version);
    match store.put_create(&key, bytes.clone()).await {
        Ok(CreateOutcome::Created) => Ok(None),
        Ok(CreateOutcome::Exists(existing)) if existing == bytes => Ok(None),
        Ok(CreateOutcome::Exists(existing)) => Ok(Some(existing)),
        Err(e) => Err(LanceEngineError::SidecarWrite { table: table.into(), version, source: e }),
    }
}

/// Whether the sidecar bytes `existing` hold the entry `delta` (the same counts, kind and
/// binding, whatever its shape): a retry that wrote its logs under new names.
async fn same_entry(store: &LakeStore, delta: &ObjectReferenceDelta, existing: &[u8]) -> Result<(), LanceEngineError> {
    let conflict = || LanceEngineError::SidecarConflict { table: delta.table.clone(), version: delta.version };
    match decode(store, &delta.table, delta.version, existing).await? {
        Ok(found) if found == *delta => Ok(()),
        _ => Err(conflict()),
    }
}

/// A journal entry's head as a streamed read reports it: what is known before its references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHead {
    /// The version the entry describes.
    pub version: u64,
    /// Delta or snapshot.
    pub kind: DeltaKind,
    /// The parent version the entry names (`version - 1`; a snapshot may name none).
    pub parent: Option<u64>,
    /// The Lance version the entry is bound to (`None` for format 3 and implied entries).
    pub binding: Option<lake_common::VersionBinding>,
}

/// What a streamed read of a table's journal reports, entry by entry in ascending version
/// order: [`EntrySink::begin`], the entry's references, then [`EntrySink::end`]. A reader never
/// holds a whole entry: references come one batch of a log at a time.
pub trait EntrySink: Send {
    /// The entry of `head.version` begins (its document decoded).
    ///
    /// # Errors
    /// Whatever the sink fails with; the read stops.
    fn begin(&mut self, head: &EntryHead) -> Result<(), LanceEngineError>;

    /// `count` references to `identity` in list `list` of the entry of `version`, in any order
    /// (a row log repeats an identity; an inline entry and a sorted log do not).
    ///
    /// # Errors
    /// Whatever the sink fails with; the read stops.
    fn reference(
        &mut self,
        version: u64,
        list: EntryList,
        identity: ObjectIdentity,
        count: u64,
    ) -> Result<(), LanceEngineError>;

    /// The entry of `version` ended: its head when it decoded whole, or the defect that makes
    /// the version a lineage problem (references handed over before it must be disregarded;
    /// `begin` was called or not).
    ///
    /// # Errors
    /// Whatever the sink fails with; the read stops.
    fn end(&mut self, version: u64, entry: Result<EntryHead, DecodeError>) -> Result<(), LanceEngineError>;

    /// The references this sink needs: a reader may skip the blocks of an indexed log that hold
    /// none the range concerns (`None`, the default: every reference).
    fn range(&self) -> Option<&lake_engine::UriRange> {
        None
    }

    /// Whether this sink needs the references of `list`: a reader does not fetch the logs of a
    /// list it does not need (true, the default: both lists). The entry still begins and ends
    /// as its document decodes; only the unread logs' own checks (length, SHA-256) are not made.
    fn wants(&self, list: EntryList) -> bool {
        let _ = list;
        true
    }

    /// `bytes` of the journal were read (documents and logs), for the engine's counter.
    fn read_bytes(&mut self, bytes: u64) {
        let _ = bytes;
    }
}

/// A sink that keeps only whether each version's entry decoded (its references are read and
/// checked, not kept).
#[derive(Debug, Default)]
pub struct Decoded(BTreeMap<u64, bool>);

impl Decoded {
    /// True when the entry of `version` was read and decoded whole.
    pub fn ok(&self, version: u64) -> bool {
        self.0.get(&version).copied().unwrap_or(false)
    }
}

impl EntrySink for Decoded {
    fn begin(&mut self, _: &EntryHead) -> Result<(), LanceEngineError> {
        Ok(())
    }

    fn reference(&mut self, _: u64, _: EntryList, _: ObjectIdentity, _: u64) -> Result<(), LanceEngineError> {
        Ok(())
    }

    fn end(&mut self, version: u64, entry: Result<EntryHead, DecodeError>) -> Result<(), LanceEngineError> {
        self.0.insert(version, entry.is_ok());
        Ok(())
    }
}

/// A sink that builds each entry whole and hands it to a visitor: for the callers that need
/// entries in memory (small ranges of versions, tests).
struct Collect<F> {
    table: String,
    added: lake_common::ReferenceCounts,
    removed: lake_common::ReferenceCounts,
    visit: F,
}

impl<F> EntrySink for Collect<F>
where
    F: FnMut(u64, Result<ObjectReferenceDelta, DecodeError>) -> Result<(), LanceEngineError> + Send,
{
    fn begin(&mut self, _: &EntryHead) -> Result<(), LanceEngineError> {
        self.added = Default::default();
        self.removed = Default::default();
        Ok(())
    }

    fn reference(
        &mut self,
        _: u64,
        list: EntryList,
        identity: ObjectIdentity,
        count: u64,
    ) -> Result<(), LanceEngineError> {
        match list {
            EntryList::Added => self.added.add(identity, count),
            EntryList::Removed => self.removed.add(identity, count),
        }
        Ok(())
    }

    fn end(&mut self, version: u64, entry: Result<EntryHead, DecodeError>) -> Result<(), LanceEngineError> {
        let (added, removed) = (std::mem::take(&mut self.added), std::mem::take(&mut self.removed));
        let entry = entry.map(|head| entry_of(&self.table, &head, added, removed));
        (self.visit)(version, entry)
    }
}

/// The entry of `head` holding `added` and `removed`, canonical.
fn entry_of(
    table: &str,
    head: &EntryHead,
    added: lake_common::ReferenceCounts,
    removed: lake_common::ReferenceCounts,
) -> ObjectReferenceDelta {
    let mut delta = match head.kind {
        DeltaKind::Snapshot => ObjectReferenceDelta::snapshot(table, head.version, &added),
        DeltaKind::Delta => ObjectReferenceDelta::delta(table, head.version, &added, &removed),
    };
    delta.parent = head.parent;
    delta.binding = head.binding.clone();
    delta
}

/// Decodes the sidecar file of `version` whole, streaming the reference logs a head names into
/// memory (for a single entry: recovery, tests). Every defect is a [`DecodeError`] (the
/// version's lineage is then incomplete); only a failed read is an `Err` of the outer result.
///
/// # Errors
/// Storage errors.
pub async fn decode(
    store: &LakeStore,
    table: &str,
    version: u64,
    bytes: &[u8],
) -> Result<Result<ObjectReferenceDelta, DecodeError>, LanceEngineError> {
    let mut found = None;
    let mut sink = Collect {
        table: table.into(),
        added: Default::default(),
        removed: Default::default(),
        visit: |_, entry: Result<ObjectReferenceDelta, DecodeError>| {
            found = Some(entry);
            Ok(())
        },
    };
    stream_entry(store, table, version, bytes, &mut sink).await?;
    Ok(found.unwrap_or(Err(DecodeError::CorruptJson("no entry".into()))))
}

/// Reads one sidecar document (`bytes`, already read) into `sink`, streaming the logs a head
/// names.
///
/// # Errors
/// Storage errors and the sink's.
pub(crate) async fn stream_entry(
    store: &LakeStore,
    table: &str,
    version: u64,
    bytes: &[u8],
    sink: &mut dyn EntrySink,
) -> Result<(), LanceEngineError> {
    sink.read_bytes(bytes.len() as u64);
    let head = match SidecarDocument::decode(bytes, table, version) {
        Ok(SidecarDocument::Inline(delta)) => {
            let head = EntryHead { version, kind: delta.kind, parent: delta.parent, binding: delta.binding.clone() };
            sink.begin(&head)?;
            for e in delta.removed {
                sink.reference(version, EntryList::Removed, e.identity, e.count)?;
            }
            for e in delta.added {
                sink.reference(version, EntryList::Added, e.identity, e.count)?;
            }
            return sink.end(version, Ok(head));
        }
        Ok(SidecarDocument::Log(head)) => head,
        Err(e) => return sink.end(version, Err(e)),
    };
    let entry = EntryHead { version, kind: head.kind, parent: head.parent, binding: head.lance.clone() };
    sink.begin(&entry)?;
    for (log, list) in
        std::iter::once((&head.log, EntryList::Added)).chain(head.removed.iter().map(|r| (r, EntryList::Removed)))
    {
        if !sink.wants(list) {
            continue;
        }
        if let Err(e) = stream_log(store, table, version, log, list, sink).await? {
            return sink.end(version, Err(e));
        }
    }
    sink.end(version, Ok(entry))
}

/// Streams the reference log `log` of the entry of `version` into `sink` as list `list`,
/// checking its length, SHA-256 (first: an edited log is a digest mismatch) and row count.
///
/// # Errors
/// Storage errors and the sink's; a defect of the log is the inner `Err`.
async fn stream_log(
    store: &LakeStore,
    table: &str,
    version: u64,
    log: &lake_common::LogRef,
    list: EntryList,
    sink: &mut dyn EntrySink,
) -> Result<Result<(), DecodeError>, LanceEngineError> {
    use futures::StreamExt;
    let key = reference_log_key(table, &log.write_id);
    if let (Some(range), Some(index)) = (sink.range().filter(|r| !r.is_all()).cloned(), log.index.as_ref()) {
        return stream_blocks(store, table, version, log, index, list, &range, sink).await;
    }
    let Some(mut chunks) = store.get_stream(&key).await? else {
        return Ok(Err(DecodeError::LogMissing { key }));
    };
    let mut decoder = LogDecoder::new(table, &log.write_id, log.sorted);
    let mut stopped: Option<LanceEngineError> = None;
    let mut defect: Option<DecodeError> = None;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        sink.read_bytes(chunk.len() as u64);
        let mut visit = |identity: ObjectIdentity, count: u64| {
            sink.reference(version, list, identity, count).map_err(|e| {
                stopped = Some(e);
                DecodeError::CorruptLog("the reader stopped".into())
            })
        };
        if let Err(e) = decoder.feed(arrow_buffer::Buffer::from(chunk), &mut visit) {
            if let Some(e) = stopped.take() {
                return Err(e);
            }
            defect.get_or_insert(e);
        }
        // A log longer than its head says is refused without reading the rest.
        if decoder.bytes() > log.bytes {
            break;
        }
    }
    let totals = decoder.totals();
    if totals.bytes != log.bytes || totals.sha256 != log.sha256 {
        return Ok(log.check(&totals));
    }
    if let Some(e) = defect {
        return Ok(Err(e));
    }
    Ok(decoder.finish().and_then(|totals| log.check(&totals)))
}

/// Streams only the blocks of the indexed log `log` that may hold references `range` concerns
/// (ranged reads: the schema message, then each such block), each checked against its own
/// SHA-256 and row count from the (sealed) head's index. The log must exist with its recorded
/// length even when no block is read.
///
/// # Errors
/// Storage errors and the sink's; a defect of the log is the inner `Err`.
#[allow(clippy::too_many_arguments)]
async fn stream_blocks(
    store: &LakeStore,
    table: &str,
    version: u64,
    log: &lake_common::LogRef,
    index: &lake_common::LogIndex,
    list: EntryList,
    range: &lake_engine::UriRange,
    sink: &mut dyn EntrySink,
) -> Result<Result<(), DecodeError>, LanceEngineError> {
    let key = reference_log_key(table, &log.write_id);
    match store.head(&key).await? {
        None => return Ok(Err(DecodeError::LogMissing { key })),
        Some(meta) if meta.size != log.bytes => {
            return Ok(Err(DecodeError::LogSize { what: "bytes", expected: log.bytes, found: meta.size }))
        }
        Some(_) => {}
    }
    let mut schema: Option<bytes::Bytes> = None;
    let mut offset = 0u64;
    for (i, block) in index.blocks.iter().enumerate() {
        let start = offset;
        offset += block.bytes;
        if block.rows == 0 || !(block.unmanaged || range.overlaps(&block.first, &block.last)) {
            continue;
        }
        let Some(bytes) = store.get_range(&key, start..offset).await? else {
            return Ok(Err(DecodeError::LogMissing { key }));
        };
        sink.read_bytes(bytes.len() as u64);
        let actual = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        if actual != block.sha256 {
            return Ok(Err(DecodeError::LogDigestMismatch { recorded: block.sha256.clone(), actual }));
        }
        // A block after the first is read after the schema message that starts the log.
        let prefix = match (i, &schema) {
            (0, _) => None,
            (_, Some(prefix)) => Some(prefix.clone()),
            (_, None) => {
                let Some(prefix) = store.get_range(&key, 0..index.schema_bytes).await? else {
                    return Ok(Err(DecodeError::LogMissing { key }));
                };
                schema = Some(prefix.clone());
                Some(prefix)
            }
        };
        let mut decoder = LogDecoder::new(table, &log.write_id, log.sorted);
        let mut stopped: Option<LanceEngineError> = None;
        let mut visit = |identity: ObjectIdentity, count: u64| {
            sink.reference(version, list, identity, count).map_err(|e| {
                stopped = Some(e);
                DecodeError::CorruptLog("the reader stopped".into())
            })
        };
        let fed = match prefix {
            Some(prefix) => decoder.feed(arrow_buffer::Buffer::from(prefix), &mut visit),
            None => Ok(()),
        }
        .and_then(|()| decoder.feed(arrow_buffer::Buffer::from(bytes), &mut visit));
        if let Some(e) = stopped {
            return Err(e);
        }
        if let Err(e) = fed {
            return Ok(Err(e));
        }
        match decoder.finish_block() {
            Ok(rows) if rows == block.rows => {}
            Ok(rows) => {
                return Ok(Err(DecodeError::LogSize {
                    what: "references in a block",
                    expected: block.rows,
                    found: rows,
                }))
            }
            Err(e) => return Ok(Err(e)),
        }
    }
    Ok(Ok(()))
}

/// Reads and decodes the sidecar of `version` (and the reference log it names); `None` when the
/// version has no sidecar.
///
/// # Errors
/// Storage errors.
pub async fn read(
    store: &LakeStore,
    table: &str,
    version: u64,
) -> Result<Option<Result<ObjectReferenceDelta, DecodeError>>, LanceEngineError> {
    match store.get(&sidecar_key(table, version)).await? {
        Some(bytes) => Ok(Some(decode(store, table, version, &bytes).await?)),
        None => Ok(None),
    }
}

/// Sidecar documents read concurrently by [`stream_listed`] (their reference logs are streamed
/// one after the other): the documents of at most this many versions are held at once.
pub const READ_AHEAD: usize = 8;

/// The journal folder of a table as one listing saw it: every sidecar file by version with its
/// store metadata, and the files whose names are not `<version>.json`.
#[derive(Debug, Default)]
pub struct JournalListing {
    /// Sidecar files by version: key and metadata.
    pub files: BTreeMap<u64, (String, object_store::ObjectMeta)>,
    /// File names that are not `<version>.json`, as [`LineageProblem::VersionMismatch`].
    pub problems: Vec<LineageProblem>,
    /// Versions without a sidecar whose Lance transaction is content-preserving, by version:
    /// the operation's name (`crate::foreign`). Read as empty deltas.
    pub implied: BTreeMap<u64, &'static str>,
}

impl JournalListing {
    /// The identity of every sidecar file (size, ETag and last-modified from the store), and
    /// `implied:<operation>` for an implied entry, for a [`lake_engine::LineageStamp`].
    pub fn identities(&self) -> BTreeMap<u64, String> {
        let files = self.files.iter().map(|(v, (_, m))| {
            let identity =
                format!("{}:{}:{}", m.size, m.e_tag.as_deref().unwrap_or(""), m.last_modified.timestamp_micros());
            (*v, identity)
        });
        let implied = self.implied.iter().map(|(v, operation)| (*v, format!("implied:{operation}")));
        files.chain(implied).collect()
    }
}

/// Lists the journal folder of `table` (one listing).
///
/// # Errors
/// Storage errors.
pub async fn list(store: &LakeStore, table: &str) -> Result<JournalListing, LanceEngineError> {
    let prefix = journal_prefix(table);
    let mut listing = JournalListing::default();
    for (key, meta) in store.list_all(&prefix).await? {
        let file = key.rsplit('/').next().unwrap_or(&key).to_string();
        let version = file
            .strip_suffix(".json")
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) && !v.starts_with('0'))
            .and_then(|v| v.parse::<u64>().ok());
        match version {
            Some(version) => {
                listing.files.insert(version, (key, meta));
            }
            None => listing.problems.push(LineageProblem::VersionMismatch {
                table: table.into(),
                file: key.clone(),
                reason: "file name is not `<version>.json`".into(),
            }),
        }
    }
    Ok(listing)
}

/// Hands every entry of `listing` whose version is in `versions` to `visit`, in ascending
/// version order: its sidecars,
/// and its implied entries as empty deltas, merged in version order. Each entry is built whole
/// in memory before `visit` gets it: for small ranges; a whole journal is read with
/// [`stream_listed`].
///
/// # Errors
/// Storage errors, and whatever `visit` returns.
pub async fn visit_listed(
    store: &LakeStore,
    table: &str,
    listing: &JournalListing,
    versions: std::ops::RangeInclusive<u64>,
    visit: impl FnMut(u64, Result<ObjectReferenceDelta, DecodeError>) -> Result<(), LanceEngineError> + Send,
) -> Result<(), LanceEngineError> {
    let mut sink = Collect { table: table.into(), added: Default::default(), removed: Default::default(), visit };
    stream_listed(store, table, listing, versions, &mut sink).await
}

/// Streams the entries of `listing` whose versions are in `versions` into `sink`, in ascending
/// version order: its sidecars (the documents read [`READ_AHEAD`] at a time, the reference
/// logs of a head streamed one after the other), and its implied entries as empty deltas.
/// Memory: the documents read ahead (inline entries are small, except those of earlier builds)
/// and one batch of one log.
///
/// # Errors
/// Storage errors, and whatever `sink` returns.
pub async fn stream_listed(
    store: &LakeStore,
    table: &str,
    listing: &JournalListing,
    versions: std::ops::RangeInclusive<u64>,
    sink: &mut dyn EntrySink,
) -> Result<(), LanceEngineError> {
    use futures::StreamExt;
    // An empty range (a checkpoint at the latest version) reads nothing; `BTreeMap::range`
    // refuses a start past the end.
    if versions.is_empty() {
        return Ok(());
    }
    let mut wanted: Vec<(u64, String)> = Vec::new();
    for (v, (key, _)) in listing.files.range(versions.clone()) {
        wanted.push((*v, key.clone()));
    }
    let implied: Vec<u64> = listing.implied.range(versions).map(|(v, _)| *v).collect();
    let mut implied = implied.into_iter().peekable();
    let read = |(version, key): (u64, String)| async move {
        let bytes = store
            .get(&key)
            .await?
            .ok_or_else(|| lake_store::StoreError::storage(&key, "sidecar vanished while reading"))?;
        Ok::<_, LanceEngineError>((version, bytes))
    };
    let empty = |sink: &mut dyn EntrySink, v: u64| {
        let head = EntryHead {
            version: v,
            kind: DeltaKind::Delta,
            parent: v.checked_sub(1).filter(|p| *p > 0),
            binding: None,
        };
        sink.begin(&head)?;
        sink.end(v, Ok(head))
    };
    let mut documents = futures::stream::iter(wanted).map(read).buffered(READ_AHEAD);
    while let Some(document) = documents.next().await {
        let (version, bytes) = document?;
        while let Some(v) = implied.next_if(|v| *v < version) {
            empty(sink, v)?;
        }
        stream_entry(store, table, version, &bytes, sink).await?;
    }
    for v in implied {
        empty(sink, v)?;
    }
    Ok(())
}
