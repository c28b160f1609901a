//! [`ObjectsError`]: every refusal of this crate, each naming what was wrong and what to do.
//!
//! Errors keep what they came from: [`ObjectsError::Storage`] carries the store's error (an
//! `object_store::Error`, an I/O error, a failed raw S3 request) as its source, and
//! [`is_transient_error`] classifies any error chain as transient or permanent.

use lake_engine::{EngineError, LineageProblem};
use object_store::client::{HttpError, HttpErrorKind};
use std::error::Error as StdError;
use thiserror::Error;

pub use lake_engine::error::BoxError;

/// Errors of storage, planning and apply.
///
/// # Transient or permanent
///
/// [`ObjectsError::is_transient`] says whether retrying the same operation can help:
/// - [`ObjectsError::Storage`] and [`ObjectsError::Io`]: as [`is_transient_error`] classifies
///   their source: throttling (HTTP 429, 503 `SlowDown`, other 5xx), timeouts, connection
///   failures and resets, and other failures the store's client reports as retryable.
/// - [`ObjectsError::Registry`]: transient. The registry's compare-and-swap lost to other
///   writers every time it tried; the race passes once they are done.
/// - [`ObjectsError::Engine`]: as [`EngineError::is_transient`].
/// - Everything else is permanent: refusals, corrupt documents, policy, lineage problems, bad
///   names, checkpoints and inventory reports fail the same way until someone changes the lake
///   or the request.
#[derive(Debug, Error)]
pub enum ObjectsError {
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
    Root { root: String, message: String },
    /// No lake descriptor at the root.
    #[error("no lake at `{root}` (missing {key}); create one with `lake init {root}`")]
    NotALake { root: String, key: String },
    /// A document (descriptor, registry entry, plan, checkpoint) failed to decode.
    #[error("`{path}` is not a valid {what}: {message}")]
    Corrupt { path: String, what: &'static str, message: String },
    /// The GC policy refused the request.
    #[error("{0}")]
    Policy(String),
    /// A table name breaks the naming rule.
    #[error("invalid table name `{0}`: use 1 to 64 characters of A-Z, a-z, 0-9, `_` and `-` (and `<table>@<branch>` for a branch, the branch name alike)")]
    TableName(String),
    /// The registry could not be advanced.
    #[error("registry of table `{table}`: {message}")]
    Registry { table: String, message: String },
    /// Lineage is incomplete: apply refuses.
    #[error("lineage is incomplete; nothing was deleted. Problems:\n  - {}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n  - "))]
    LineageIncomplete { problems: Vec<LineageProblem> },
    /// The plan was made on incomplete lineage: apply refuses it.
    #[error("the plan was made on incomplete lineage and cannot be applied; nothing was deleted. Fix these, then plan again:\n  - {}", problems.join("\n  - "))]
    PlanIncomplete { problems: Vec<String> },
    /// The checkpoint belongs to another plan or another format.
    #[error("checkpoint `{path}`: {message}")]
    Checkpoint { path: String, message: String },
    /// A failure injected by a crash test (never in production builds).
    #[error("injected failure at `{0}` (a simulated crash)")]
    Injected(&'static str),
    /// The engine failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A document lake writes for an operator (a plan, a sharded plan's folder, a metrics
    /// file) may not be written there: over a file of another kind, a folder, a device, or in a
    /// folder that does not exist ([`crate::output`]; a destination inside the lake root is an
    /// [`ObjectsError::Root`]). Nothing was written.
    #[error("`{path}`: {message}")]
    Output { path: String, message: String },
    /// Apply met a version committed since its plan whose journal entry is not there: most
    /// likely a writer between its Lance commit and its journal entry (which it writes right
    /// after), else a writer that crashed there. Nothing more was deleted; the checkpoint
    /// records the progress. Transient: the same command, run again once the writer finished,
    /// resumes ([`crate::apply`]).
    #[error("{}", journal_pending_message(pending))]
    JournalPending {
        /// The tables and versions without a journal entry, each committed since the plan.
        pending: Vec<(String, u64)>,
    },
    /// An S3 Inventory report was refused ([`crate::inventory::report`]); nothing was planned
    /// from it.
    #[error("S3 Inventory report `{manifest}` refused; nothing was planned: {problem}")]
    InventoryReport {
        /// The manifest's URL, `s3://bucket/.../manifest.json`.
        manifest: String,
        /// What was wrong, and what to do (boxed: the error stays small).
        problem: Box<crate::inventory::report::ReportProblem>,
    },
}

/// What [`ObjectsError::JournalPending`] says: the versions, and what to do in each case, without
/// advising a repair that would race a live writer.
fn journal_pending_message(pending: &[(String, u64)]) -> String {
    let versions: Vec<String> = pending.iter().map(|(t, v)| format!("table `{t}` version {v}")).collect();
    let repairs: Vec<String> =
        pending.iter().map(|(t, v)| format!("`lake refs repair ROOT --table {t} --version {v}`")).collect();
    format!(
        "apply stopped: {} was committed since the plan and has no journal entry yet; nothing more was deleted (the checkpoint records the progress). If a writer is running on that table, it is between its Lance commit and its journal entry, which it writes next: run the same command again once it has finished, and the apply resumes (do not repair: a repair now would race the writer). Only if no writer is running (one crashed after its commit, or the version was written around the engine) repair it with {}, then run the same command again",
        versions.join(", "),
        repairs.join(", ")
    )
}

/// A spill folder (the temporary folder of an external sort) that failed is a local file error.
impl From<lake_engine::spill::SpillError> for ObjectsError {
    fn from(e: lake_engine::spill::SpillError) -> Self {
        ObjectsError::Io { path: e.path, source: e.source }
    }
}

impl ObjectsError {
    /// A storage error for `path`, keeping `e` as its source: an error (`object_store::Error`,
    /// `std::io::Error`, ...) or a message (`&str`, `String`) where no error caused it.
    pub fn storage(path: impl Into<String>, e: impl Into<BoxError>) -> Self {
        Self::Storage { path: path.into(), source: e.into() }
    }

    /// The refusal of the S3 Inventory report at `manifest` (its URL) for `problem`.
    pub fn report(manifest: impl Into<String>, problem: crate::inventory::report::ReportProblem) -> Self {
        Self::InventoryReport { manifest: manifest.into(), problem: Box::new(problem) }
    }

    /// Why an S3 Inventory report was refused, for an [`ObjectsError::InventoryReport`].
    pub fn report_problem(&self) -> Option<&crate::inventory::report::ReportProblem> {
        match self {
            Self::InventoryReport { problem, .. } => Some(problem),
            _ => None,
        }
    }

    /// Whether retrying the failed operation can help (the rule is on [`ObjectsError`]).
    pub fn is_transient(&self) -> bool {
        match self {
            ObjectsError::Storage { source, .. } => is_transient_error(source.as_ref()),
            ObjectsError::Io { source, .. } => is_transient_error(source),
            ObjectsError::Registry { .. } | ObjectsError::JournalPending { .. } => true,
            ObjectsError::Engine(e) => e.is_transient(),
            ObjectsError::Root { .. }
            | ObjectsError::NotALake { .. }
            | ObjectsError::Corrupt { .. }
            | ObjectsError::Policy(_)
            | ObjectsError::TableName(_)
            | ObjectsError::LineageIncomplete { .. }
            | ObjectsError::PlanIncomplete { .. }
            | ObjectsError::Checkpoint { .. }
            | ObjectsError::InventoryReport { .. }
            | ObjectsError::Output { .. }
            | ObjectsError::Injected(_) => false,
        }
    }
}

/// Whether retrying can help with `error`, judged by the first error in its source chain (itself
/// first) whose type decides:
/// - [`ObjectsError`] and [`EngineError`]: their own `is_transient`.
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
        if let Some(verdict) = verdict(e) {
            return verdict;
        }
        current = e.source();
    }
    false
}

/// The verdict of `e` alone, or `None` when its source decides.
fn verdict(e: &(dyn StdError + 'static)) -> Option<bool> {
    if let Some(e) = e.downcast_ref::<ObjectsError>() {
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
        let e = ObjectsError::storage("objects/k", io(ErrorKind::ConnectionReset));
        assert_eq!(e.to_string(), "storage error at `objects/k`: ConnectionReset");
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>()).expect("the I/O error is kept");
        assert_eq!(source.kind(), ErrorKind::ConnectionReset);

        let e = ObjectsError::storage("_lake/clock/x", "clock probe vanished after writing");
        assert_eq!(e.to_string(), "storage error at `_lake/clock/x`: clock probe vanished after writing");
        assert!(!e.is_transient(), "a message is not a retryable failure");

        let not_found = object_store::Error::NotFound { path: "k".into(), source: "gone".into() };
        let e = ObjectsError::storage("k", not_found);
        assert!(e.source().is_some_and(|s| s.is::<object_store::Error>()), "the object_store error is kept");
    }

    #[test]
    fn transport_failures_are_transient() {
        for kind in [HttpErrorKind::Connect, HttpErrorKind::Request, HttpErrorKind::Timeout, HttpErrorKind::Interrupted]
        {
            let e = ObjectsError::storage("k", generic(HttpError::new(kind, io(ErrorKind::Other))));
            assert!(e.is_transient(), "{kind:?}");
        }
        for kind in [HttpErrorKind::Decode, HttpErrorKind::Unknown] {
            let e = ObjectsError::storage("k", generic(HttpError::new(kind, io(ErrorKind::Other))));
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
            assert!(ObjectsError::storage("k", io(kind)).is_transient(), "{kind:?}");
            assert!(ObjectsError::Io { path: "f".into(), source: io(kind) }.is_transient(), "{kind:?}");
        }
        for kind in [ErrorKind::NotFound, ErrorKind::PermissionDenied, ErrorKind::InvalidData, ErrorKind::Other] {
            assert!(!ObjectsError::storage("k", io(kind)).is_transient(), "{kind:?}");
            assert!(!ObjectsError::Io { path: "f".into(), source: io(kind) }.is_transient(), "{kind:?}");
        }
        // An I/O error wrapping a store error is judged by the store error.
        let wrapped = std::io::Error::other(generic(HttpError::new(HttpErrorKind::Timeout, io(ErrorKind::Other))));
        assert!(ObjectsError::storage("k", wrapped).is_transient());
        let wrapped = std::io::Error::other(object_store::Error::NotFound { path: "k".into(), source: "gone".into() });
        assert!(!ObjectsError::storage("k", wrapped).is_transient());
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
            assert!(!ObjectsError::storage("k", e).is_transient(), "{text}");
        }
    }

    #[test]
    fn raw_s3_failures_keep_their_retry_classification() {
        use crate::s3_requests::Failure;
        assert!(ObjectsError::storage("s3://b/p", Failure::for_test(true, "HTTP 503: SlowDown")).is_transient());
        assert!(!ObjectsError::storage("s3://b/p", Failure::for_test(false, "HTTP 403: AccessDenied")).is_transient());
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
        assert!(ObjectsError::Registry { table: "t".into(), message: "lost".into() }.is_transient());
        let storage =
            EngineError::Storage { path: "k".into(), source: Box::new(io(ErrorKind::TimedOut)), transient: true };
        assert!(ObjectsError::Engine(storage).is_transient());
        let permanent = [
            ObjectsError::Root { root: "r".into(), message: "m".into() },
            ObjectsError::NotALake { root: "r".into(), key: "k".into() },
            ObjectsError::Corrupt { path: "p".into(), what: "plan", message: "m".into() },
            ObjectsError::Policy("below the floor".into()),
            ObjectsError::TableName("a b".into()),
            ObjectsError::LineageIncomplete { problems: Vec::new() },
            ObjectsError::PlanIncomplete { problems: vec!["p".into()] },
            ObjectsError::Checkpoint { path: "c".into(), message: "m".into() },
            ObjectsError::Injected("x"),
            ObjectsError::Engine(EngineError::Lineage { table: "t".into(), problems: Vec::new() }),
            ObjectsError::Engine(EngineError::InvalidInput("bad".into())),
        ];
        for e in permanent {
            assert!(!e.is_transient(), "{e}");
        }
        // Nested: an ObjectsError boxed as another error's source decides for it.
        let nested = ObjectsError::storage("k", ObjectsError::Registry { table: "t".into(), message: "lost".into() });
        assert!(nested.is_transient());
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
    async fn s3_get_error(endpoint: &str) -> ObjectsError {
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
        ObjectsError::storage("objects/k", e)
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
