//! Typed errors of the domain rules. Each names what was wrong and what to do.
//!
//! All of them are permanent: they judge bytes, schemas and URIs already in hand, so the same
//! input fails the same way again. Each says so through `is_transient` (always false), like the
//! error types of the crates above, which a caller asks whether retrying can help.

use thiserror::Error;

/// Why a reference sidecar (an [`crate::ObjectReferenceDelta`] document) was refused.
///
/// Decoding fails closed: any of these makes the version's lineage incomplete, and GC apply
/// refuses to run until the sidecar is repaired (`lake refs repair`).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes are not valid JSON for the sidecar schema (truncated, corrupt, wrong field types).
    #[error("sidecar is not valid JSON for the reference journal schema: {0}")]
    CorruptJson(String),
    /// The document declares a format version this build does not understand.
    #[error("sidecar format version {found} is not supported (this build reads version {supported}); upgrade lake")]
    UnknownFormatVersion {
        /// The `format_version` the document declares.
        found: u64,
        /// The format version this build reads.
        supported: u64,
    },
    /// A sidecar of a format written by earlier builds, which bound nothing by a digest.
    #[error("sidecar format version {found} was written by an earlier lake build and is not sealed by a digest, so an edited entry or reference log could not be detected; verify it against the table (`refs verify`), then move it aside and rebuild it with `refs repair`")]
    Unsealed {
        /// The `format_version` the document declares (one of the unsealed formats 1 and 2).
        found: u64,
    },
    /// The document's content does not hash to the seal it records: it was edited.
    #[error("sidecar does not match its seal (recorded sha256 {recorded}, content hashes to {actual}): it was edited or damaged; restore it from a backup, or move it aside and rebuild it with `refs repair`")]
    SealMismatch {
        /// The seal the document records in its `sha256` field (lowercase hex).
        recorded: String,
        /// The SHA-256 the document's content hashes to (lowercase hex).
        actual: String,
    },
    /// A reference log does not hash to the digest its head records.
    #[error("the sidecar's reference log does not match the SHA-256 its head records (recorded {recorded}, log hashes to {actual}): the log was edited or damaged")]
    LogDigestMismatch {
        /// The SHA-256 the head records for the log, or for the block of it read (lowercase hex).
        recorded: String,
        /// The SHA-256 of the bytes read (lowercase hex).
        actual: String,
    },
    /// `added` or `removed` is not sorted strictly ascending by identity (unsorted or duplicated).
    #[error("sidecar list `{list}` is not in canonical order: entry {index} ({uri}) is not strictly greater than the one before it")]
    NotCanonical {
        /// The list: `added` or `removed`.
        list: &'static str,
        /// The entry's position in the list (0-based).
        index: usize,
        /// The entry's identity URI.
        uri: String,
    },
    /// An entry has a reference count of zero.
    #[error("sidecar list `{list}` has a zero count for {uri}; counts must be at least 1")]
    ZeroCount {
        /// The list: `added` or `removed`.
        list: &'static str,
        /// The entry's identity URI.
        uri: String,
    },
    /// One identity appears in both `added` and `removed`; canonical deltas carry net counts.
    #[error("sidecar has {uri} in both `added` and `removed`; a canonical delta carries net counts")]
    AddedAndRemoved {
        /// The identity URI listed in both.
        uri: String,
    },
    /// The parent is not exactly `version - 1` (Lance history is linear), or a delta has no parent.
    #[error("sidecar for version {version} names parent {parent:?}; expected {expected}")]
    BadParent {
        /// The document's version (Lance's version number).
        version: u64,
        /// The parent version the document names, if any.
        parent: Option<u64>,
        /// The parent expected, as text (e.g. `4 (version - 1)`, or none for version 1).
        expected: String,
    },
    /// A snapshot carries `removed` entries; a snapshot is the full reference set.
    #[error("snapshot sidecar for version {version} has `removed` entries; a snapshot lists only its full reference set in `added`")]
    SnapshotWithRemovals {
        /// The snapshot's version (Lance's version number).
        version: u64,
    },
    /// The document's version is not the version its file name says.
    #[error("sidecar file is for version {expected} but the document says version {found}")]
    VersionMismatch {
        /// The version the file name says.
        expected: u64,
        /// The version the document says.
        found: u64,
    },
    /// The document's table is not the table it was read for.
    #[error("sidecar belongs to table `{found}` but was read for table `{expected}`")]
    TableMismatch {
        /// The table the sidecar was read for.
        expected: String,
        /// The table the document names.
        found: String,
    },
    /// A version number is zero (Lance versions start at 1).
    #[error("sidecar has version 0; Lance versions start at 1")]
    ZeroVersion,
    /// A format-2 sidecar's reference log is not a valid log (truncated, wrong schema, corrupt).
    #[error("the sidecar's reference log is corrupt: {0}")]
    CorruptLog(String),
    /// A reference log belongs to another table or write than its head names.
    #[error("the sidecar's reference log has {field} `{found}` but its head names `{expected}`")]
    LogMismatch {
        /// The log's schema metadata key that differs: `lake.table` or `lake.write_id`.
        field: &'static str,
        /// The value the head names.
        expected: String,
        /// The value the log carries (empty when the key is absent).
        found: String,
    },
    /// A format-2 sidecar names a reference log that is not in the store.
    #[error("the sidecar's reference log {key} is missing")]
    LogMissing {
        /// The log's key, relative to the lake root.
        key: String,
    },
    /// A reference log's length or row count differs from what its head records.
    #[error("the sidecar's reference log has {found} {what} but its head records {expected}")]
    LogSize {
        /// What differs: `bytes` (the log's length), `references` (its row count) or `references in a block`.
        what: &'static str,
        /// The value the head records.
        expected: u64,
        /// The value of the log as read.
        found: u64,
    },
}

/// Why a DataLocation column or value was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum LocationError {
    /// A field carries the DataLocation extension name but not its exact layout.
    #[error("column `{column}` is marked as a DataLocation but its type is {found}; expected Struct{{uri: Utf8, sha256: FixedSizeBinary(32), size: UInt64}} (or a List of it), all children non-nullable")]
    BadLayout {
        /// The column's name.
        column: String,
        /// Its actual type (or, for a value, what is wrong with it), as text.
        found: String,
    },
    /// An unmarked struct has the DataLocation's child names but not its layout.
    #[error("column `{column}` looks like a DataLocation (two of uri, sha256, size) but its type is {found}, not Struct{{uri: Utf8, sha256: FixedSizeBinary(32), size: UInt64}}: lake cannot tell whether its rows reference managed objects. Cast it to the DataLocation layout (or rename its fields if it holds no references)")]
    LocationLike {
        /// The column's name.
        column: String,
        /// Its actual type, as text.
        found: String,
    },
    /// A DataLocation (or a look-alike) below the top level of the schema.
    #[error("column `{column}` ({found}) is a DataLocation nested inside another column; only top-level DataLocation or List<DataLocation> columns are supported, and lake cannot journal references it cannot reach")]
    Nested {
        /// The nested field's path, dot-separated from the top-level column (e.g. `outer.loc`).
        column: String,
        /// The nested field's type, as text.
        found: String,
    },
    /// A column kind that can reference objects outside the journal.
    #[error("column `{column}` is not supported: {reason}")]
    Unsupported {
        /// The column's name.
        column: String,
        /// Why it is not supported, one sentence.
        reason: String,
    },
    /// A non-null DataLocation value has an unusable `uri`.
    #[error("column `{column}` row {row}: {source}")]
    BadUri {
        /// The column's name.
        column: String,
        /// The row in the batch (0-based).
        row: usize,
        /// What is wrong with the `uri`.
        source: UriError,
    },
    /// The column named in the schema is not in the batch.
    #[error("reference column `{column}` is missing from the batch")]
    MissingColumn {
        /// The column's name.
        column: String,
    },
}

/// Why a reference URI could not be normalised. Lake never guesses: an ambiguous URI is refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UriError {
    /// The `uri` is the empty string.
    #[error("empty uri")]
    Empty,
    /// A path segment is `.` or `..`.
    #[error("uri `{uri}` contains `{segment}` segments; write the key without `.` or `..`")]
    DotSegment {
        /// The URI as written.
        uri: String,
        /// The offending segment, decoded: `.` or `..`.
        segment: String,
    },
    /// A key has an empty segment (`//` or a trailing `/`).
    #[error("uri `{uri}` has an empty path segment (`//` or a trailing `/`); object keys name files, not folders")]
    EmptySegment {
        /// The URI as written.
        uri: String,
    },
    /// An absolute local path not written as a `file://` URL.
    #[error("uri `{uri}` is an absolute local path outside a `file://` URL; give the key relative to the lake root or a file:// URL")]
    BareAbsolutePath {
        /// The URI as written.
        uri: String,
    },
    /// A percent-escape is malformed or does not decode to UTF-8.
    #[error("uri `{uri}` has an invalid percent-encoding")]
    BadPercentEncoding {
        /// The URI as written.
        uri: String,
    },
    /// The URI contains a control character or a backslash, or a segment decodes to one or to `/`.
    #[error("uri `{uri}` contains a control character or a backslash")]
    BadCharacter {
        /// The URI as written.
        uri: String,
    },
    /// The URI has a `?` query or `#` fragment.
    #[error("uri `{uri}` carries a query or fragment (a signed URL?); references must be plain object locations without credentials")]
    QueryOrFragment {
        /// The URI as written.
        uri: String,
    },
    /// The URL carries a user name or password.
    #[error("uri `{uri}` carries user information (credentials); references must not")]
    Credentials {
        /// The URI as written.
        uri: String,
    },
    /// The URI has a scheme but does not parse as a URL.
    #[error("uri `{uri}` is not a valid URL: {reason}")]
    Invalid {
        /// The URI as written.
        uri: String,
        /// The URL parser's message.
        reason: String,
    },
    /// The lake root (or the local folder bound to it) is not usable.
    #[error("lake root `{root}` is not usable: {reason}")]
    BadRoot {
        /// The root as given (or an alias of it, or the local folder bound to it).
        root: String,
        /// Why it is not usable, one sentence.
        reason: String,
    },
    /// A URL lake cannot map to one object unambiguously.
    #[error("uri `{uri}` is refused because lake cannot tell which object it names: {reason}; write the key relative to the lake root (objects/<ULID>/<name>)")]
    Ambiguous {
        /// The URI as written.
        uri: String,
        /// Why lake cannot tell which object it names, one phrase.
        reason: String,
    },
    /// A reference a write adds names a key inside the lake root that is not a managed object
    /// key (`crate::managed`): GC could not tell which object it names. `uri` is the row's value,
    /// `key` the key it names.
    #[error("uri {uri:?} names {key:?} inside the lake root, which is not a managed object key; a reference into the lake root must be {grammar}, and anything else must be an absolute URL outside the lake root. Upload the file through lake and reference the key it returns", grammar = crate::managed::MANAGED_KEY_GRAMMAR)]
    NotManaged {
        /// The row's value as written.
        uri: String,
        /// The key it names, relative to the lake root.
        key: String,
    },
}

impl DecodeError {
    /// The error's kind: [`crate::ErrorKind::Corrupt`] (a journal entry that cannot be decoded is a damaged document of the lake).
    pub const fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::Corrupt
    }

    /// Whether retrying can help: never. The input itself is wrong; see the module documentation.
    pub const fn is_transient(&self) -> bool {
        false
    }
}

impl LocationError {
    /// The error's kind: [`crate::ErrorKind::InvalidInput`] (a reference column or value the caller gave).
    pub const fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::InvalidInput
    }

    /// Whether retrying can help: never. The input itself is wrong; see the module documentation.
    pub const fn is_transient(&self) -> bool {
        false
    }
}

impl UriError {
    /// The error's kind: [`crate::ErrorKind::InvalidInput`] (a URI the caller gave).
    pub const fn kind(&self) -> crate::ErrorKind {
        crate::ErrorKind::InvalidInput
    }

    /// Whether retrying can help: never. The input itself is wrong; see the module documentation.
    pub const fn is_transient(&self) -> bool {
        false
    }
}
