//! [`StoreError`]: every refusal of the lake on its store (the root, documents, the registry, the
//! managed writer, the store's clock), each naming what was wrong and what to do.
//!
//! Errors keep what they came from: [`StoreError::Storage`] carries the store's error (an
//! `object_store::Error`, an I/O error, a failed raw S3 request) as its source, and
//! [`is_transient_error`] classifies any error chain as transient or permanent.

use lake_common::ErrorKind;
use lake_engine::EngineError;
use object_store::client::{HttpError, HttpErrorKind};
use std::error::Error as StdError;
use thiserror::Error;

pub use lake_engine::error::BoxError;

/// Errors of the lake on its store.
///
/// # Transient or permanent
///
/// [`StoreError::kind`] maps each error to its [`ErrorKind`] once, and
/// [`StoreError::is_transient`] answers from it whether retrying the same operation can help:
/// - [`StoreError::Storage`] and [`StoreError::Io`]: as [`is_transient_error`] classifies
///   their source: throttling (HTTP 429, 503 `SlowDown`, other 5xx), timeouts, connection
///   failures and resets, and other failures the store's client reports as retryable.
/// - [`StoreError::Registry`]: transient ([`ErrorKind::Conflict`]). The registry's
///   compare-and-swap lost to other writers every time it tried; the race passes once they
///   are done.
/// - [`StoreError::Engine`]: as [`EngineError::is_transient`].
/// - Everything else is permanent: a store that cannot prove create-only writes, corrupt documents, policy and bad names fail the
///   same way until someone changes the lake or the request; so do missing, mismatched and
///   unreachable objects ([`StoreError::ObjectMissing`], [`StoreError::ObjectMismatch`],
///   [`StoreError::ObjectUnreachable`]): the store answered, and its answer is final.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A storage request failed. `source` is the store's error (an `object_store::Error`, an I/O
    /// error, a raw S3 request's failure, or a message where there is no other error).
    #[error("storage error at `{path}`: {source}")]
    Storage {
        /// The key or URL that failed.
        path: String,
        /// What failed.
        #[source]
        source: BoxError,
    },
    /// The lake root is unusable.
    #[error("lake root `{root}`: {message}")]
    Root {
        /// The lake root as shown (or, for raw S3 requests, the bucket as `s3://bucket`).
        root: String,
        /// What is wrong with it, and what to do.
        message: String,
    },
    /// No lake descriptor at the root.
    #[error("no lake at `{root}` (missing {key}); create one there first (`init`)")]
    NotALake {
        /// The lake root as shown to the operator.
        root: String,
        /// The descriptor's key, relative to the root (`_lake/lake.json`).
        key: String,
    },
    /// A document (descriptor, registry entry, write intent, and on the GC side a plan or a
    /// checkpoint) failed to decode.
    #[error("`{path}` is not a valid {what}: {message}")]
    Corrupt {
        /// Where the document is: its key relative to the lake root, its local path, or how it was named.
        path: String,
        /// What kind of document it should be (e.g. `registry document`, `GC plan`).
        what: &'static str,
        /// What is wrong with it (often the decoder's message).
        message: String,
    },
    /// The store overwrites on a create-only write, so the write protocol's proofs do not
    /// hold on it; nothing was written.
    #[error("{message}")]
    Capability {
        /// What the store did, and what to do.
        message: String,
    },
    /// A value the caller gave is unusable (a lake's policy floor, ...); nothing was written.
    #[error("{0}")]
    InvalidInput(String),
    /// A table name breaks the naming rule.
    #[error("invalid table name `{0}`: use 1 to 64 characters of A-Z, a-z, 0-9, `_` and `-` (and `<table>@<branch>` for a branch, the branch name alike)")]
    TableName(String),
    /// The registry could not be advanced.
    #[error("registry of table `{table}`: {message}")]
    Registry {
        /// The table (lineage name: `t` or `t@b`).
        table: String,
        /// What happened, and what to do.
        message: String,
    },
    /// A failure injected by a crash test (never in production builds).
    #[error("injected failure at `{0}` (a simulated crash)")]
    Injected(&'static str),
    /// The engine's rules refused or failed (a write intent's references, read through
    /// `lake_engine`'s visitor).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// An object a reference names does not exist: deleted (by GC, or outside lake), or never
    /// written. Read by [`crate::reader::ObjectReader`].
    #[error("object `{key}` does not exist (it was deleted, or never written)")]
    ObjectMissing {
        /// The key relative to the lake root, or the external URI, that was read.
        key: String,
    },
    /// An object's bytes differ from what its reference records: its size in bytes or its
    /// SHA-256 (an object rewritten, truncated or corrupted outside lake). Read by
    /// [`crate::reader::ObjectReader`]'s verified reads.
    #[error(
        "object `{key}` does not match its reference: expected {expected_size} bytes with SHA-256 {}, found {}",
        hex::encode(.expected_sha256),
        found_bytes(*.actual_size, .actual_sha256.as_ref())
    )]
    ObjectMismatch {
        /// The key relative to the lake root, or the external URI, that was read.
        key: String,
        /// The size in bytes the reference records.
        expected_size: u64,
        /// The size in bytes found: the size the store reports, the bytes received when the
        /// object ended, or (when more bytes arrived than expected, and reading stopped there)
        /// the bytes received so far, a lower bound.
        actual_size: u64,
        /// The SHA-256 the reference records.
        expected_sha256: [u8; 32],
        /// The SHA-256 of the bytes found, when the whole object was read; `None` when reading
        /// stopped as soon as the size was known to differ.
        actual_sha256: Option<[u8; 32]>,
    },
    /// A reference names an object the lake's store cannot read: outside the lake root and out
    /// of the store's reach (another bucket, another host, a local path outside the root
    /// folder), or not a valid reference at all. Reads use the lake's own store and settings,
    /// never other credentials.
    #[error("cannot read `{uri}`: {reason}")]
    ObjectUnreachable {
        /// The reference's `uri` as given.
        uri: String,
        /// Why the store cannot read it.
        reason: String,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The local path (or, where there is none, what was read or written, e.g. an upload's name).
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// How [`StoreError::ObjectMismatch`] shows what was found.
fn found_bytes(size: u64, sha256: Option<&[u8; 32]>) -> String {
    match sha256 {
        Some(sha) => format!("{size} bytes with SHA-256 {}", hex::encode(sha)),
        None => format!("{size} bytes"),
    }
}

/// A spill folder (the temporary folder of an external sort, which the engine's bounded scans
/// use) that failed is a local file error.
impl From<lake_engine::spill::SpillError> for StoreError {
    fn from(e: lake_engine::spill::SpillError) -> Self {
        StoreError::Io { path: e.path, source: e.source }
    }
}

impl StoreError {
    /// The error's kind ([`ErrorKind`]), mapped once here: [`ErrorKind::Unavailable`] or
    /// [`ErrorKind::Storage`] for a failed request or local file (as [`is_transient_error`]
    /// classifies its source), [`ErrorKind::Conflict`] for a registry race, the engine's
    /// kind for [`StoreError::Engine`], else the variant's own.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Storage { source, .. } => ErrorKind::store_failure(is_transient_error(source.as_ref())),
            StoreError::Io { source, .. } => ErrorKind::store_failure(is_transient_error(source)),
            StoreError::Registry { .. } => ErrorKind::Conflict,
            StoreError::Engine(e) => e.kind(),
            StoreError::Capability { .. } => ErrorKind::StoreCapability,
            StoreError::InvalidInput(_) => ErrorKind::InvalidInput,
            StoreError::Root { .. } => ErrorKind::Root,
            StoreError::NotALake { .. } => ErrorKind::NotALake,
            StoreError::Corrupt { .. } => ErrorKind::Corrupt,
            StoreError::TableName(_) => ErrorKind::TableName,
            StoreError::Injected(_) => ErrorKind::Internal,
            StoreError::ObjectMissing { .. } => ErrorKind::ObjectMissing,
            StoreError::ObjectMismatch { .. } => ErrorKind::ObjectMismatch,
            StoreError::ObjectUnreachable { .. } => ErrorKind::ObjectUnreachable,
        }
    }

    /// A storage error for `path`, keeping `e` as its source: an error (`object_store::Error`,
    /// `std::io::Error`, ...) or a message (`&str`, `String`) where no error caused it.
    pub fn storage(path: impl Into<String>, e: impl Into<BoxError>) -> Self {
        Self::Storage { path: path.into(), source: e.into() }
    }

    /// Whether retrying the failed operation can help, as its kind says (the rule is on
    /// [`StoreError`]).
    pub fn is_transient(&self) -> bool {
        self.kind().is_transient()
    }
}

/// Whether retrying can help with `error`, judged by the first error in its source chain (itself
/// first) whose type decides:
/// - [`StoreError`] and [`EngineError`]: their own `is_transient` (the GC crate's error adds
///   itself through [`transient_verdict`]).
/// - `object_store::Error`: `Generic` (the store client's own error) is judged by its source;
///   every other variant (`NotFound`, `AlreadyExists`, `Precondition`, `PermissionDenied`,
///   `Unauthenticated`, `InvalidPath`, `NotSupported`, ...) is permanent.
/// - An HTTP transport error (`object_store::client::HttpError`): transient for the kinds
///   object_store's retry loop retries: `Connect`, `Request`, `Timeout`, `Interrupted` (which
///   covers connection resets, aborts and broken pipes); permanent for `Decode` and `Unknown`.
/// - An HTTP status that object_store's client gave up on (its `RequestError`): transient for
///   5xx (503 `SlowDown` among them), 429 and 408, and for a 200 whose body is an S3
///   `InternalError` or `SlowDown`; permanent for other statuses. A DeleteObjects per-key error
///   is transient for the codes `SlowDown`, `InternalError`, `ServiceUnavailable` and
///   `RequestTimeout`.
/// - A raw S3 request ([`crate::s3_requests`]): the classification its retry loop used
///   (5xx, 429, those codes, connection errors and timeouts).
/// - `std::io::Error`: transient for `TimedOut`, `Interrupted`, `WouldBlock`,
///   `ConnectionReset`, `ConnectionAborted`, `ConnectionRefused`, `NotConnected` and
///   `BrokenPipe`; otherwise as the error it wraps, if any; else permanent.
///
/// An error no rule decides (a message, a JSON error, a join error) is permanent.
pub fn is_transient_error(error: &(dyn StdError + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(verdict) = transient_verdict(e) {
            return verdict;
        }
        current = e.source();
    }
    false
}

/// The verdict of `e` alone by the rules of [`is_transient_error`], or `None` when its source
/// decides: for an error type that wraps this crate's (the GC crate's error) to classify a chain
/// with its own rule first.
pub fn transient_verdict(e: &(dyn StdError + 'static)) -> Option<bool> {
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return Some(e.is_transient());
    }
    if let Some(e) = e.downcast_ref::<EngineError>() {
        return Some(e.is_transient());
    }
    if let Some(f) = e.downcast_ref::<crate::s3_requests::Failure>() {
        return Some(f.transient);
    }
    if let Some(e) = e.downcast_ref::<object_store::Error>() {
        return match e {
            object_store::Error::Generic { .. } => None,
            _ => Some(false),
        };
    }
    if let Some(e) = e.downcast_ref::<HttpError>() {
        return Some(matches!(
            e.kind(),
            HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
        ));
    }
    if let Some(e) = e.downcast_ref::<std::io::Error>() {
        return Some(io_is_transient(e));
    }
    http_status_verdict(&e.to_string())
}

fn io_is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::TimedOut
        | K::Interrupted
        | K::WouldBlock
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::ConnectionRefused
        | K::NotConnected
        | K::BrokenPipe => true,
        // `io::Error::source` skips the error it wraps: judge that one here.
        _ => e.get_ref().is_some_and(|inner| is_transient_error(inner)),
    }
}

/// object_store's client names its failed-request errors by type only inside the crate
/// (`client::retry::RequestError`, `aws::client::Error::DeleteFailed`); their messages carry
/// the status and the S3 error code. The formats are those of object_store 0.14 (pinned in
/// the workspace), checked against real responses by the tests below.
fn http_status_verdict(text: &str) -> Option<bool> {
    if let Some(rest) = text.strip_prefix("Server returned non-2xx status code: ") {
        let status: u16 = rest.get(..3)?.parse().ok()?;
        return Some(status >= 500 || status == 429 || status == 408);
    }
    if text.starts_with("Server returned error response: ") {
        // Only built for a 2xx body carrying an S3 `InternalError` or `SlowDown`.
        return Some(true);
    }
    if text.starts_with("DeleteObjects request failed for key ") {
        let code = text.rsplit("(code: ").next()?.trim_end_matches(')');
        return Some(matches!(code, "SlowDown" | "InternalError" | "ServiceUnavailable" | "RequestTimeout"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::aws::AmazonS3Builder;
    use object_store::path::Path;
    use object_store::{ClientOptions, ObjectStoreExt, RetryConfig};
    use std::io::{ErrorKind, Read, Write};
    use std::time::Duration;

    fn io(kind: ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, format!("{kind:?}"))
    }

    fn generic(source: impl StdError + Send + Sync + 'static) -> object_store::Error {
        object_store::Error::Generic { store: "S3", source: Box::new(source) }
    }

    #[test]
    fn storage_keeps_its_source_and_message() {
        let e = StoreError::storage("objects/k", io(ErrorKind::ConnectionReset));
        assert_eq!(e.to_string(), "storage error at `objects/k`: ConnectionReset");
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the I/O error is kept");
        assert_eq!(source.kind(), ErrorKind::ConnectionReset);

        let e = StoreError::storage("_lake/clock/x", "clock probe vanished after writing");
        assert_eq!(e.to_string(), "storage error at `_lake/clock/x`: clock probe vanished after writing");
        assert!(!e.is_transient(), "a message is not a retryable failure");

        let not_found = object_store::Error::NotFound { path: "k".into(), source: "gone".into() };
        let e = StoreError::storage("k", not_found);
        assert!(e.source().is_some_and(|s| s.is::<object_store::Error>()), "the object_store error is kept");
    }

    #[test]
    fn transport_failures_are_transient() {
        for kind in [HttpErrorKind::Connect, HttpErrorKind::Request, HttpErrorKind::Timeout, HttpErrorKind::Interrupted]
        {
            let e = StoreError::storage("k", generic(HttpError::new(kind, io(ErrorKind::Other))));
            assert!(e.is_transient(), "{kind:?}");
        }
        for kind in [HttpErrorKind::Decode, HttpErrorKind::Unknown] {
            let e = StoreError::storage("k", generic(HttpError::new(kind, io(ErrorKind::Other))));
            assert!(!e.is_transient(), "{kind:?}");
        }
    }

    #[test]
    fn io_errors_by_kind() {
        for kind in [
            ErrorKind::TimedOut,
            ErrorKind::Interrupted,
            ErrorKind::WouldBlock,
            ErrorKind::ConnectionReset,
            ErrorKind::ConnectionAborted,
            ErrorKind::ConnectionRefused,
            ErrorKind::NotConnected,
            ErrorKind::BrokenPipe,
        ] {
            assert!(StoreError::storage("k", io(kind)).is_transient(), "{kind:?}");
            assert!(StoreError::Io { path: "f".into(), source: io(kind) }.is_transient(), "{kind:?}");
        }
        for kind in [ErrorKind::NotFound, ErrorKind::PermissionDenied, ErrorKind::InvalidData, ErrorKind::Other] {
            assert!(!StoreError::storage("k", io(kind)).is_transient(), "{kind:?}");
            assert!(!StoreError::Io { path: "f".into(), source: io(kind) }.is_transient(), "{kind:?}");
        }
        // An I/O error wrapping a store error is judged by the store error.
        let wrapped = std::io::Error::other(generic(HttpError::new(HttpErrorKind::Timeout, io(ErrorKind::Other))));
        assert!(StoreError::storage("k", wrapped).is_transient());
        let wrapped = std::io::Error::other(object_store::Error::NotFound { path: "k".into(), source: "gone".into() });
        assert!(!StoreError::storage("k", wrapped).is_transient());
    }

    #[test]
    fn store_refusals_are_permanent() {
        let refusals = [
            object_store::Error::NotFound { path: "k".into(), source: "gone".into() },
            object_store::Error::AlreadyExists { path: "k".into(), source: "exists".into() },
            object_store::Error::Precondition { path: "k".into(), source: "etag".into() },
            object_store::Error::PermissionDenied { path: "k".into(), source: "403".into() },
            object_store::Error::Unauthenticated { path: "k".into(), source: "401".into() },
            object_store::Error::NotSupported { source: "no".into() },
            // A store error whose cause is a timeout is still a refusal when the store says so.
            object_store::Error::PermissionDenied { path: "k".into(), source: Box::new(io(ErrorKind::TimedOut)) },
            generic(io(ErrorKind::InvalidData)),
        ];
        for e in refusals {
            let text = e.to_string();
            assert!(!StoreError::storage("k", e).is_transient(), "{text}");
        }
    }

    #[test]
    fn raw_s3_failures_keep_their_retry_classification() {
        use crate::s3_requests::Failure;
        assert!(StoreError::storage("s3://b/p", Failure::for_test(true, "HTTP 503: SlowDown")).is_transient());
        assert!(!StoreError::storage("s3://b/p", Failure::for_test(false, "HTTP 403: AccessDenied")).is_transient());
    }

    #[test]
    fn http_status_messages() {
        let v = |t: &str| http_status_verdict(t);
        assert_eq!(
            v("Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>"),
            Some(true)
        );
        assert_eq!(v("Server returned non-2xx status code: 500 Internal Server Error: "), Some(true));
        assert_eq!(v("Server returned non-2xx status code: 429 Too Many Requests: "), Some(true));
        assert_eq!(v("Server returned non-2xx status code: 408 Request Timeout: "), Some(true));
        assert_eq!(v("Server returned non-2xx status code: 400 Bad Request: "), Some(false));
        assert_eq!(v("Server returned error response: <Code>InternalError</Code>"), Some(true));
        assert_eq!(
            v("DeleteObjects request failed for key k: Please reduce your request rate. (code: SlowDown)"),
            Some(true)
        );
        assert_eq!(v("DeleteObjects request failed for key k: Access Denied (code: AccessDenied)"), Some(false));
        assert_eq!(v("something else"), None);
    }

    #[test]
    fn lake_errors_by_class() {
        assert!(StoreError::Registry { table: "t".into(), message: "lost".into() }.is_transient());
        let storage =
            EngineError::Storage { path: "k".into(), source: Box::new(io(ErrorKind::TimedOut)), transient: true };
        assert!(StoreError::storage("k", storage).is_transient(), "an engine error decides for itself");
        let permanent = [
            StoreError::Root { root: "r".into(), message: "m".into() },
            StoreError::NotALake { root: "r".into(), key: "k".into() },
            StoreError::Corrupt { path: "p".into(), what: "plan", message: "m".into() },
            StoreError::Capability { message: "m".into() },
            StoreError::InvalidInput("m".into()),
            StoreError::TableName("a b".into()),
            StoreError::Injected("x"),
            StoreError::ObjectMissing { key: "objects/k".into() },
            StoreError::ObjectMismatch {
                key: "objects/k".into(),
                expected_size: 1,
                actual_size: 2,
                expected_sha256: [0; 32],
                actual_sha256: None,
            },
            StoreError::ObjectUnreachable { uri: "s3://other/k".into(), reason: "another bucket".into() },
        ];
        for e in permanent {
            assert!(!e.is_transient(), "{e}");
        }
        // Nested: a StoreError boxed as another error's source decides for it.
        let nested = StoreError::storage("k", StoreError::Registry { table: "t".into(), message: "lost".into() });
        assert!(nested.is_transient());
    }

    #[test]
    fn object_errors_have_stable_kinds_and_name_the_object() {
        let missing = StoreError::ObjectMissing { key: "objects/k/a".into() };
        assert_eq!(missing.kind().as_str(), "object_missing");
        assert!(missing.to_string().contains("objects/k/a"));
        let mismatch = StoreError::ObjectMismatch {
            key: "objects/k/a".into(),
            expected_size: 3,
            actual_size: 4,
            expected_sha256: [0xab; 32],
            actual_sha256: Some([0xcd; 32]),
        };
        assert_eq!(mismatch.kind().as_str(), "object_mismatch");
        assert_eq!(
            mismatch.to_string(),
            format!(
                "object `objects/k/a` does not match its reference: expected 3 bytes with SHA-256 {}, found 4 bytes with SHA-256 {}",
                "ab".repeat(32),
                "cd".repeat(32)
            )
        );
        let unreachable = StoreError::ObjectUnreachable { uri: "s3://other/k".into(), reason: "another bucket".into() };
        assert_eq!(unreachable.kind().as_str(), "object_unreachable");
        assert_eq!(unreachable.to_string(), "cannot read `s3://other/k`: another bucket");
    }

    /// A one-request-per-connection HTTP server answering every request with `response`
    /// (`None`: accept and never answer).
    fn serve(response: Option<&'static str>) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                match response {
                    Some(r) => {
                        let _ = stream.write_all(r.as_bytes());
                    }
                    None => held.push(stream),
                }
            }
        });
        format!("http://{addr}")
    }

    fn response(status: &str, body: &str) -> &'static str {
        let text = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        Box::leak(text.into_boxed_str())
    }

    /// The error object_store's S3 client returns for one GET against `endpoint`, without retries.
    async fn s3_get_error(endpoint: &str) -> StoreError {
        let store = AmazonS3Builder::new()
            .with_bucket_name("bucket")
            .with_region("us-east-1")
            .with_access_key_id("key")
            .with_secret_access_key("secret")
            .with_endpoint(endpoint)
            .with_retry(RetryConfig { max_retries: 0, retry_timeout: Duration::from_secs(5), ..Default::default() })
            .with_client_options(ClientOptions::new().with_allow_http(true).with_timeout(Duration::from_millis(500)))
            .build()
            .unwrap();
        let e = store.get(&Path::from("objects/k")).await.expect_err("the server refuses");
        StoreError::storage("objects/k", e)
    }

    #[tokio::test]
    async fn real_s3_client_failures() {
        let slow_down = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
        let cases = [
            ("503 Service Unavailable", slow_down, true),
            ("500 Internal Server Error", "<Error><Code>InternalError</Code></Error>", true),
            ("429 Too Many Requests", "", true),
            ("403 Forbidden", "<Error><Code>AccessDenied</Code></Error>", false),
            ("404 Not Found", "<Error><Code>NoSuchKey</Code></Error>", false),
            ("400 Bad Request", "<Error><Code>InvalidRequest</Code></Error>", false),
        ];
        for (status, body, transient) in cases {
            let e = s3_get_error(&serve(Some(response(status, body)))).await;
            assert_eq!(e.is_transient(), transient, "{status}: {e}");
        }
        // A server that never answers: the client's timeout.
        let e = s3_get_error(&serve(None)).await;
        assert!(e.is_transient(), "timeout: {e}");
        // Nothing listening: the connection is refused.
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}", listener.local_addr().unwrap())
        };
        let e = s3_get_error(&closed).await;
        assert!(e.is_transient(), "connection refused: {e}");
    }
}
