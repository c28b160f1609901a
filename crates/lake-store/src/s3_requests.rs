//! Raw, signed S3 requests for what `object_store` 0.14 cannot do.
//!
//! object_store parses every listed key with `Path::parse`, which drops a trailing `/`: a folder
//! marker `objects/<ULID>/x/` comes back as `objects/<ULID>/x`, out of byte order, and deleting
//! that name deletes nothing. It also cannot list or abort incomplete multipart uploads. This
//! module sends those few requests itself, with object_store's own pieces: the credential
//! provider of the lake's `AmazonS3` ([`AmazonS3::credentials`]), SigV4 signing
//! ([`AwsAuthorizer::try_authorize`]), its HTTP client ([`ReqwestConnector`], [`ClientOptions`]) and
//! its retry numbers ([`RetryConfig`], applied with `backon`: exponential backoff with jitter).
//!
//! Configuration is the lake's [`S3Settings`], the one that configured its `AmazonS3` (the
//! `AWS_*` environment read when the lake was opened, overlaid by its storage options; never the
//! environment of the moment): the endpoint (path-style `endpoint/bucket`, or the endpoint itself
//! with `virtual_hosted_style_request`), else `https://s3.<region>.amazonaws.com/<bucket>`; the
//! region (default `us-east-1`); client options such as `allow_http`. S3 Express One Zone
//! buckets are not supported.
//!
//! Retried: HTTP 5xx, 429, the error codes `SlowDown`, `InternalError`, `ServiceUnavailable` and
//! `RequestTimeout`, connection errors and timeouts. Every other failure (403, a missing bucket,
//! malformed XML, a listing that breaks S3's ordering rules) is returned at once as
//! [`StoreError::Storage`] naming the operation and the `s3://bucket/prefix` it was about.
//!
//! (Longer than most modules: four S3 operations (ListObjectsV2, ListMultipartUploads,
//! AbortMultipartUpload, DeleteObjects) share one signer, one retry policy and one
//! XML reader, and splitting them would spread that one protocol over several files.)

use crate::error::StoreError;
use crate::store::LakeStore;
use crate::store::S3Settings;
use backon::{ExponentialBuilder, Retryable};
use base64::Engine as _;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use md5::Digest as _;
use object_store::aws::{AmazonS3, AmazonS3ConfigKey, AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{HttpClient, HttpConnector, HttpErrorKind, HttpRequest, HttpRequestBody, ReqwestConnector};
use object_store::RetryConfig;
use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Everything but RFC 3986 unreserved characters is percent-encoded (SigV4's `UriEncode`).
const QUERY_SET: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
/// A key in a URL path: as [`QUERY_SET`], keeping `/`.
const PATH_SET: &AsciiSet = &QUERY_SET.remove(b'/');

/// One object of a ListObjectsV2 page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawObject {
    /// The full bucket key, exactly as stored (a trailing `/` is kept).
    pub key: String,
    /// Size in bytes.
    pub size: u64,
    /// `LastModified`, from the server's clock.
    pub last_modified: DateTime<Utc>,
    /// The `ETag` as S3 returns it (quotes included).
    pub e_tag: Option<String>,
}

/// One ListObjectsV2 page: keys in strictly ascending UTF-8 byte order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawListPage {
    /// The objects, in key order.
    pub objects: Vec<RawObject>,
    /// `IsTruncated`: more keys follow the last one (resume with it as `start_after`).
    pub truncated: bool,
}

/// An incomplete multipart upload (ListMultipartUploads `Upload`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUpload {
    /// The full bucket key the upload would create.
    pub key: String,
    /// The upload's `UploadId`.
    pub upload_id: String,
    /// When CreateMultipartUpload was called, by the server's clock.
    pub initiated: DateTime<Utc>,
}

/// What DeleteObjects answered for one key ([`S3Requests::delete_objects`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteAnswer {
    /// The key existed and this request removed it (a server that honours conditional deletes
    /// answered it in `<Deleted>`).
    Removed,
    /// The key is gone now: a server that ignores conditional deletes answered it in
    /// `<Deleted>`, which it does whether or not the key existed.
    Gone,
    /// The key did not exist (a server that honours conditional deletes answered it in
    /// `<Error>` with the code it gives a key that never existed, `NoSuchKey` on Amazon S3).
    Missing,
    /// Listed in `<Error>` with another code: S3 did not delete the key. Its `Code` and
    /// `Message`.
    Error {
        /// S3's error code (`AccessDenied`, `InternalError`, `SlowDown`, ...).
        code: String,
        /// S3's message.
        message: String,
    },
    /// Not mentioned by the answer (a server that breaks the protocol): unknown.
    Unanswered,
}

/// A key's entry in a DeleteObjects answer, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RawAnswer {
    Deleted,
    Error { code: String, message: String },
}

/// The codes with which a store that honours conditional deletes answers a key that does not
/// exist: `NoSuchKey` (Amazon S3, a 404), or `PreconditionFailed` / `NotFound` (S3-compatible
/// stores). Any other code (`AccessDenied`, say) is a failure, never taken for a missing key.
const MISSING_CODES: [&str; 3] = ["NoSuchKey", "PreconditionFailed", "NotFound"];

/// What the store does with `<ETag>*</ETag>` in DeleteObjects (shared by a client's clones).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Conditional {
    /// Not known yet.
    Unknown,
    /// Honoured: a key that does not exist is answered in `<Error>` with this code (one of
    /// [`MISSING_CODES`]).
    Honoured(String),
    /// Ignored: every key is answered in `<Deleted>`.
    Ignored,
    /// Refused (the request is malformed to this store): never sent again.
    Unsupported,
}

impl Conditional {
    fn is_known(&self) -> bool {
        !matches!(self, Conditional::Unknown)
    }

    /// Whether `code` is the answer to a key that does not exist.
    fn means_missing(&self, code: &str) -> bool {
        match self {
            Conditional::Honoured(missing) => code == missing,
            _ => false,
        }
    }
}

/// The store's [`Conditional`], learnt once and shared by a client's clones.
#[derive(Debug, Clone)]
struct ConditionalVerdict(Arc<Mutex<Conditional>>);

impl Default for ConditionalVerdict {
    fn default() -> Self {
        Self(Arc::new(Mutex::new(Conditional::Unknown)))
    }
}

impl ConditionalVerdict {
    fn load(&self) -> Conditional {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records `verdict`; a refusal is final.
    fn store(&self, verdict: Conditional) {
        let mut current = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if *current != Conditional::Unsupported {
            *current = verdict;
        }
    }
}

/// A request body and the headers that describe it.
#[derive(Debug, Clone, Default)]
struct Body {
    bytes: Bytes,
    headers: Vec<(&'static str, String)>,
}

/// A client for raw S3 requests against one bucket.
#[derive(Debug, Clone)]
pub struct S3Requests {
    client: HttpClient,
    credentials: AwsCredentialProvider,
    bucket: String,
    bucket_endpoint: String,
    region: String,
    skip_signature: bool,
    retry: RetryConfig,
    conditional: ConditionalVerdict,
}

impl S3Requests {
    /// The client of an `s3://` lake's bucket (`store.root().authority()`), signing with the
    /// credentials of `store.s3()`; `None` for a local root.
    ///
    /// # Errors
    /// As [`S3Requests::new`].
    pub fn for_store(store: &LakeStore) -> Result<Option<Self>, StoreError> {
        Ok(store.s3_requests().cloned())
    }

    /// A client for `bucket` signing with `s3.credentials()`, configured by the lake's
    /// `settings` (the same [`S3Settings`] that configured `s3`; never the environment).
    ///
    /// # Errors
    /// [`StoreError::Root`] when the settings ask for S3 Express or the HTTP client cannot be
    /// built (a bad proxy or certificate option).
    pub fn new(bucket: &str, settings: &S3Settings, s3: &AmazonS3) -> Result<Self, StoreError> {
        let root_err = |m: String| StoreError::Root { root: format!("s3://{bucket}"), message: m };
        if settings.is_true(AmazonS3ConfigKey::S3Express) {
            return Err(root_err("raw S3 requests do not support S3 Express buckets".into()));
        }
        let region = settings.get(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
        let endpoint =
            settings.get(AmazonS3ConfigKey::S3Endpoint).or_else(|| settings.get(AmazonS3ConfigKey::Endpoint));
        let bucket_endpoint = match (endpoint, settings.is_true(AmazonS3ConfigKey::VirtualHostedStyleRequest)) {
            (Some(e), true) => e.trim_end_matches('/').to_string(),
            (Some(e), false) => format!("{}/{bucket}", e.trim_end_matches('/')),
            (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
            (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        };
        let client =
            ReqwestConnector::default().connect(&settings.client_options()).map_err(|e| root_err(e.to_string()))?;
        Ok(Self {
            client,
            credentials: s3.credentials().clone(),
            bucket: bucket.to_string(),
            bucket_endpoint,
            region,
            skip_signature: settings.is_true(AmazonS3ConfigKey::SkipSignature),
            retry: RetryConfig::default(),
            conditional: ConditionalVerdict::default(),
        })
    }

    /// Replaces the retry policy (default: object_store's [`RetryConfig::default`], 10 retries
    /// from 100 ms doubling to 15 s, at most 3 minutes of waiting in all).
    pub fn with_retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// One ListObjectsV2 request (S3 API reference, "ListObjectsV2"): at most `max_keys` keys
    /// under `prefix` (full bucket keys, no delimiter), in ascending UTF-8 byte order, strictly
    /// after `start_after` when given (S3's `start-after` may be any string). Keys are requested
    /// with `encoding-type=url` and decoded (`+` is a space, then percent-decoding), so any key,
    /// including one with a trailing `/` or characters XML 1.0 cannot carry, comes back exactly.
    ///
    /// # Errors
    /// [`StoreError::Storage`] when `max_keys` is not in 1..=1000 (S3's limit), the request
    /// fails (after retries for transient failures), the XML is malformed, or the page breaks
    /// S3's guarantees: keys not strictly ascending, not after `start_after`, not under `prefix`,
    /// more than `max_keys` of them, or a truncated page without keys.
    pub async fn list_objects_v2(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<RawListPage, StoreError> {
        let fail = |m: String| self.error("ListObjectsV2", prefix, m);
        let failed = |f: Failure| self.failed("ListObjectsV2", prefix, f);
        if !(1..=1000).contains(&max_keys) {
            return Err(fail(format!("max-keys must be 1 to 1000, not {max_keys}")));
        }
        let max = max_keys.to_string();
        let mut query = vec![("list-type", "2"), ("encoding-type", "url"), ("max-keys", &max), ("prefix", prefix)];
        if let Some(after) = start_after {
            query.push(("start-after", after));
        }
        let body = self.send("GET", None, &query).await.map_err(failed)?;
        let result: ListBucketResult = parse_xml(&body).map_err(fail)?;
        let url_encoded = url_encoding(result.encoding_type.as_deref()).map_err(fail)?;
        let mut objects = Vec::with_capacity(result.contents.len());
        for c in result.contents {
            let key = decode_key(&c.key, url_encoded).map_err(fail)?;
            objects.push(RawObject { key, size: c.size, last_modified: c.last_modified, e_tag: c.e_tag });
        }
        let problem = if objects.len() > max_keys {
            Some(format!("{} keys for max-keys {max_keys}", objects.len()))
        } else if let Some(o) = objects.iter().find(|o| !o.key.starts_with(prefix)) {
            Some(format!("key `{}` is not under the prefix", o.key))
        } else if let Some(w) = objects.windows(2).find(|w| w[0].key >= w[1].key) {
            Some(format!("keys out of order: `{}` before `{}`", w[0].key, w[1].key))
        } else if let Some(o) = objects.first().filter(|o| start_after.is_some_and(|a| o.key.as_str() <= a)) {
            Some(format!("key `{}` is not after start-after", o.key))
        } else if result.is_truncated && objects.is_empty() {
            Some("a truncated page without keys".into())
        } else {
            None
        };
        match problem {
            Some(p) => Err(fail(format!("the store broke S3's listing order ({p}); refusing this listing"))),
            None => Ok(RawListPage { objects, truncated: result.is_truncated }),
        }
    }

    /// Every incomplete multipart upload of a key under `prefix` (S3 API reference,
    /// "ListMultipartUploads"), following `key-marker` / `upload-id-marker` from each page's
    /// `NextKeyMarker` / `NextUploadIdMarker` until `IsTruncated` is false. S3 orders uploads by
    /// key, then by initiation time; so does the result.
    ///
    /// # Errors
    /// [`StoreError::Storage`] when a request fails (after retries), the XML is malformed, an
    /// upload is outside `prefix`, or a truncated page does not advance the markers.
    pub async fn list_multipart_uploads(&self, prefix: &str) -> Result<Vec<MultipartUpload>, StoreError> {
        let fail = |m: String| self.error("ListMultipartUploads", prefix, m);
        let failed = |f: Failure| self.failed("ListMultipartUploads", prefix, f);
        let mut uploads = Vec::new();
        let mut markers: Option<(String, String)> = None;
        loop {
            let mut query = vec![("uploads", ""), ("encoding-type", "url"), ("prefix", prefix)];
            if let Some((key, id)) = &markers {
                query.extend([("key-marker", key.as_str()), ("upload-id-marker", id.as_str())]);
            }
            let body = self.send("GET", None, &query).await.map_err(failed)?;
            let page: ListMultipartUploadsResult = parse_xml(&body).map_err(fail)?;
            let url_encoded = url_encoding(page.encoding_type.as_deref()).map_err(fail)?;
            for u in page.upload {
                let key = decode_key(&u.key, url_encoded).map_err(fail)?;
                if !key.starts_with(prefix) {
                    return Err(fail(format!("upload of key `{key}` is not under the prefix")));
                }
                uploads.push(MultipartUpload { key, upload_id: u.upload_id, initiated: u.initiated });
            }
            if !page.is_truncated {
                return Ok(uploads);
            }
            let next = match (page.next_key_marker.filter(|k| !k.is_empty()), page.next_upload_id_marker) {
                (Some(k), id) => (decode_key(&k, url_encoded).map_err(fail)?, id.unwrap_or_default()),
                (None, _) => return Err(fail("a truncated page without NextKeyMarker".into())),
            };
            if markers.as_ref() == Some(&next) {
                return Err(fail("a truncated page that does not advance the markers".into()));
            }
            markers = Some(next);
        }
    }

    /// Aborts the multipart upload `upload_id` of the full bucket key `key` (S3 API reference,
    /// "AbortMultipartUpload"): S3 frees its parts. `true` when this request aborted it, `false`
    /// when it no longer existed (404 `NoSuchUpload`: already aborted or completed).
    ///
    /// # Errors
    /// [`StoreError::Storage`] when the request fails otherwise (after retries).
    pub async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<bool, StoreError> {
        match self.send("DELETE", Some(key), &[("uploadId", upload_id)]).await {
            Ok(_) => Ok(true),
            Err(f) if f.status == Some(404) && f.code.as_deref() == Some("NoSuchUpload") => Ok(false),
            Err(mut f) => {
                f.message = format!("upload `{upload_id}`: {}", f.message);
                Err(self.failed("AbortMultipartUpload", key, f))
            }
        }
    }

    /// One DeleteObjects request (S3 API reference, "DeleteObjects") for up to 1000 full bucket
    /// keys, in verbose mode (every key is answered): one [`DeleteAnswer`] per key, in `keys`'
    /// order.
    ///
    /// Each key is deleted on condition that it exists (`<ETag>*</ETag>`, S3's conditional
    /// deletes, "How to perform conditional deletes" in the S3 user guide): a server that
    /// honours the condition (Amazon S3) deletes a key that exists ([`DeleteAnswer::Removed`]:
    /// this request removed it) and answers an `<Error>` for one that does not
    /// ([`DeleteAnswer::Missing`]), so that concurrent deletes of one key report one removal.
    /// A server that ignores the condition (LocalStack, some S3-compatible stores) answers every
    /// key in `<Deleted>`, existing or not ([`DeleteAnswer::Gone`]). Which kind of server this is
    /// is learnt from a probe key that never exists (a fresh name in the first key's folder, in
    /// the request when it has room for it), and from any key answered missing (`NoSuchKey`,
    /// `PreconditionFailed` or `NotFound`, never another code); the verdict is kept for later
    /// requests. A server that refuses the condition as a malformed
    /// request is asked again without it, and never again with it.
    ///
    /// A key in `<Error>` with another code (`AccessDenied`, `InternalError`, ...) is
    /// [`DeleteAnswer::Error`]: only those keys failed. A key the answer does not mention is
    /// [`DeleteAnswer::Unanswered`]. The request carries `Content-MD5`, which S3 requires; the
    /// whole request is retried on transient failures (deleting is idempotent).
    ///
    /// # Errors
    /// [`StoreError::Storage`] when there are more than 1000 keys, the request fails (after
    /// retries) or the answer is not DeleteObjects XML: every key's outcome is then unknown.
    pub async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteAnswer>, StoreError> {
        let what = keys.first().map(String::as_str).unwrap_or_default();
        let fail = |m: String| self.error("DeleteObjects", what, m);
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if keys.len() > 1000 {
            return Err(fail(format!("{} keys in one request; S3 takes at most 1000", keys.len())));
        }
        let mut conditional = self.conditional.load() != Conditional::Unsupported;
        // A key that never exists: how the server answers it tells whether it honours the
        // condition (only needed until that is known).
        let probe = (conditional && keys.len() < 1000 && !self.conditional.load().is_known()).then(|| {
            let folder = what.rsplit_once('/').map(|(folder, _)| format!("{folder}/")).unwrap_or_default();
            format!("{folder}lake-delete-probe-{}", ulid::Ulid::new())
        });
        let sent: Vec<&str> = keys.iter().map(String::as_str).chain(probe.as_deref()).collect();
        let answer = match self.send_delete(&sent, conditional).await {
            Err(f) if conditional && f.refuses_condition() => {
                tracing::info!(bucket = %self.bucket, "the store refuses conditional deletes; deleting without them");
                self.conditional.store(Conditional::Unsupported);
                conditional = false;
                self.send_delete(&sent[..keys.len()], false).await
            }
            other => other,
        };
        let answered =
            parse_delete_result(&answer.map_err(|f| self.failed("DeleteObjects", what, f))?).map_err(fail)?;
        let mut by_key: HashMap<&str, RawAnswer> = HashMap::with_capacity(answered.len());
        for (key, answer) in &answered {
            // An `<Error>` wins over a `<Deleted>` of the same key (a server that says both).
            if !matches!(by_key.get(key.as_str()), Some(RawAnswer::Error { .. })) {
                by_key.insert(key.as_str(), answer.clone());
            }
        }
        // What the server does with the condition: a key answered missing (the probe, or any
        // other) says it honours it; the probe answered deleted says it ignores it.
        if conditional {
            if let Some(code) = by_key.values().find_map(|a| match a {
                RawAnswer::Error { code, .. } if MISSING_CODES.contains(&code.as_str()) => Some(code.clone()),
                _ => None,
            }) {
                self.conditional.store(Conditional::Honoured(code));
            } else if let Some(RawAnswer::Deleted) = probe.as_deref().and_then(|p| by_key.get(p)) {
                self.conditional.store(Conditional::Ignored);
            }
        }
        let verdict = self.conditional.load();
        Ok(keys
            .iter()
            .map(|k| match by_key.get(k.as_str()) {
                None => DeleteAnswer::Unanswered,
                Some(RawAnswer::Deleted) if conditional && matches!(verdict, Conditional::Honoured(_)) => {
                    DeleteAnswer::Removed
                }
                Some(RawAnswer::Deleted) => DeleteAnswer::Gone,
                Some(RawAnswer::Error { code, .. }) if conditional && verdict.means_missing(code) => {
                    DeleteAnswer::Missing
                }
                Some(RawAnswer::Error { code, message }) => {
                    DeleteAnswer::Error { code: code.clone(), message: message.clone() }
                }
            })
            .collect())
    }

    /// Sends one DeleteObjects request for `keys`, each on condition that it exists when
    /// `conditional`; the answer's body.
    async fn send_delete(&self, keys: &[&str], conditional: bool) -> Result<Bytes, Failure> {
        let mut xml = String::from(
            r#"<?xml version="1.0" encoding="UTF-8"?><Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>false</Quiet>"#,
        );
        for key in keys {
            xml.push_str("<Object><Key>");
            xml.push_str(&quick_xml::escape::escape(*key));
            xml.push_str(if conditional { "</Key><ETag>*</ETag></Object>" } else { "</Key></Object>" });
        }
        xml.push_str("</Delete>");
        let bytes = Bytes::from(xml);
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&bytes));
        let body = Body { bytes, headers: vec![("content-md5", md5), ("content-type", "application/xml".into())] };
        self.send_body("POST", None, &[("delete", "")], body).await
    }

    fn error(&self, operation: &str, key: &str, message: String) -> StoreError {
        StoreError::storage(format!("s3://{}/{key}", self.bucket), format!("{operation}: {message}"))
    }

    /// A failed request as a storage error: the [`Failure`] is its source (and says whether
    /// retrying can help).
    fn failed(&self, operation: &str, key: &str, mut failure: Failure) -> StoreError {
        failure.message = format!("{operation}: {}", failure.message);
        StoreError::storage(format!("s3://{}/{key}", self.bucket), failure)
    }

    /// Sends a request with an empty body to the bucket (or to `key` in it), retrying transient
    /// failures; the body of a 2xx response.
    async fn send(&self, method: &'static str, key: Option<&str>, query: &[(&str, &str)]) -> Result<Bytes, Failure> {
        self.send_body(method, key, query, Body::default()).await
    }

    /// As [`S3Requests::send`], with a request body and its headers (signed with the body's
    /// SHA-256).
    async fn send_body(
        &self,
        method: &'static str,
        key: Option<&str>,
        query: &[(&str, &str)],
        body: Body,
    ) -> Result<Bytes, Failure> {
        let mut url = self.bucket_endpoint.clone();
        if let Some(key) = key {
            url.push('/');
            url.extend(utf8_percent_encode(key, PATH_SET));
        }
        for (i, (name, value)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(name);
            url.push('=');
            url.extend(utf8_percent_encode(value, QUERY_SET));
        }
        let backoff = ExponentialBuilder::new()
            .with_jitter()
            .with_min_delay(self.retry.backoff.init_backoff)
            .with_max_delay(self.retry.backoff.max_backoff)
            .with_factor(self.retry.backoff.base as f32)
            .with_max_times(self.retry.max_retries)
            .with_total_delay(Some(self.retry.retry_timeout));
        let mut retries = 0usize;
        let result = (|| self.attempt(method, &url, &body))
            .retry(backoff)
            .when(|f: &Failure| f.transient)
            .notify(|f: &Failure, wait| {
                retries += 1;
                tracing::debug!(%method, %url, retry = retries, ?wait, error = %f.message, "retrying an S3 request");
            })
            .await;
        result.map_err(|mut f| {
            if f.transient {
                f.message = format!("{} (gave up after {} retries)", f.message, retries);
            }
            f
        })
    }

    async fn attempt(&self, method: &'static str, url: &str, body: &Body) -> Result<Bytes, Failure> {
        let mut request = HttpRequest::new(HttpRequestBody::from(body.bytes.clone()));
        *request.method_mut() = method.parse().map_err(|e| Failure::permanent(format!("{e}")))?;
        *request.uri_mut() = url.parse().map_err(|e| Failure::permanent(format!("bad URL {url}: {e}")))?;
        for (name, value) in &body.headers {
            let value = value.parse().map_err(|e| Failure::permanent(format!("header {name}: {e}")))?;
            request.headers_mut().insert(*name, value);
        }
        if !self.skip_signature {
            let credential = self
                .credentials
                .get_credential()
                .await
                .map_err(|e| Failure::permanent(format!("no credentials: {e}")))?;
            AwsAuthorizer::new(&credential, "s3", &self.region)
                .try_authorize(&mut request, None)
                .map_err(|e| Failure::permanent(format!("cannot sign: {e}")))?;
        }
        let transport = |e: object_store::client::HttpError| {
            let transient = matches!(
                e.kind(),
                HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Timeout | HttpErrorKind::Interrupted
            );
            Failure { transient, status: None, code: None, message: e.to_string() }
        };
        let response = self.client.execute(request).await.map_err(transport)?;
        let status = response.status().as_u16();
        let body = response.into_body().bytes().await.map_err(transport)?;
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let error: Option<S3ErrorBody> = parse_xml(&body).ok();
        let code = error.as_ref().and_then(|e| e.code.clone());
        let transient = status >= 500 || status == 429 || code.as_deref().is_some_and(is_retryable_code);
        let detail = match &error {
            Some(e) => format!("{} {}", e.code.as_deref().unwrap_or(""), e.message.as_deref().unwrap_or("")),
            None => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
        };
        Err(Failure { transient, status: Some(status), code, message: format!("HTTP {status}: {}", detail.trim()) })
    }
}

/// A failed attempt: retried when `transient`. The source of the [`StoreError::Storage`] a
/// request that failed for good returns ([`StoreError::is_transient`] reads `transient`).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) transient: bool,
    status: Option<u16>,
    code: Option<String>,
    message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

impl Failure {
    /// A failure of class `transient` (tests of the error classification).
    #[cfg(test)]
    pub(crate) fn for_test(transient: bool, message: &str) -> Self {
        Self { transient, status: None, code: None, message: message.into() }
    }

    fn permanent(message: String) -> Self {
        Self { transient: false, status: None, code: None, message }
    }

    /// Whether a DeleteObjects request failed because the store does not take a condition on
    /// its keys (a 400 or 501 calling it malformed or not implemented).
    fn refuses_condition(&self) -> bool {
        matches!(self.status, Some(400 | 501))
            && matches!(
                self.code.as_deref(),
                Some("MalformedXML" | "NotImplemented" | "InvalidArgument" | "InvalidRequest" | "UnexpectedContent")
            )
    }
}

/// A `<Deleted>` or `<Error>` entry being read: whether it is an `<Error>`, its `Key`, `Code`
/// and `Message`.
type Entry = (bool, Option<String>, String, String);

/// Appends `text` to the field `field` of the entry being read.
fn push_field(entry: &mut Option<Entry>, field: &str, text: &str) {
    if let Some((_, key, code, message)) = entry.as_mut() {
        match field {
            "Key" => key.get_or_insert_with(String::new).push_str(text),
            "Code" => code.push_str(text),
            "Message" => message.push_str(text),
            _ => {}
        }
    }
}

/// S3 error codes that a retry can cure.
fn is_retryable_code(code: &str) -> bool {
    matches!(code, "SlowDown" | "InternalError" | "ServiceUnavailable" | "RequestTimeout")
}

/// The `(key, answer)` pairs of a `DeleteResult` document, in document order. Read event by
/// event: `<Deleted>` and `<Error>` may come in any order, and other elements (`VersionId`,
/// `DeleteMarker`, ...) are skipped.
fn parse_delete_result(body: &[u8]) -> Result<Vec<(String, RawAnswer)>, String> {
    use quick_xml::events::Event;
    let text = std::str::from_utf8(body).map_err(|e| format!("the response is not UTF-8: {e}"))?;
    let mut reader = quick_xml::Reader::from_str(text);
    let bad = |e: &dyn std::fmt::Display| format!("malformed DeleteObjects response: {e}");
    let mut path: Vec<String> = Vec::new();
    let mut saw_result = false;
    let mut entry: Option<Entry> = None;
    let mut out = Vec::new();
    loop {
        match reader.read_event().map_err(|e| bad(&e))? {
            Event::Start(start) => {
                let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
                if path.is_empty() {
                    if name != "DeleteResult" {
                        return Err(bad(&format!("the root element is <{name}>, not <DeleteResult>")));
                    }
                    saw_result = true;
                }
                if path.len() == 1 && (name == "Deleted" || name == "Error") {
                    entry = Some((name == "Error", None, String::new(), String::new()));
                }
                path.push(name);
            }
            Event::Empty(start) if path.is_empty() => {
                let name = String::from_utf8_lossy(start.local_name().as_ref()).into_owned();
                if name != "DeleteResult" {
                    return Err(bad(&format!("the root element is <{name}>, not <DeleteResult>")));
                }
                saw_result = true;
            }
            Event::Text(t) if path.len() == 3 => push_field(&mut entry, &path[2], &t.decode().map_err(|e| bad(&e))?),
            Event::CData(t) if path.len() == 3 => push_field(&mut entry, &path[2], &t.decode().map_err(|e| bad(&e))?),
            Event::GeneralRef(r) if path.len() == 3 => {
                // An entity or character reference inside a text (`&amp;`, `&#38;`).
                let resolved = match r.resolve_char_ref().map_err(|e| bad(&e))? {
                    Some(c) => c.to_string(),
                    None => {
                        let name = r.decode().map_err(|e| bad(&e))?;
                        quick_xml::escape::resolve_predefined_entity(&name)
                            .ok_or_else(|| bad(&format!("unknown entity &{name};")))?
                            .to_string()
                    }
                };
                push_field(&mut entry, &path[2], &resolved);
            }
            Event::End(_) => {
                if path.len() == 2 {
                    if let Some((is_error, key, code, message)) = entry.take() {
                        let key = key.ok_or_else(|| bad(&format!("a <{}> without a <Key>", path[1])))?;
                        let answer = if is_error { RawAnswer::Error { code, message } } else { RawAnswer::Deleted };
                        out.push((key, answer));
                    }
                }
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !saw_result {
        return Err(bad(&"no <DeleteResult> element"));
    }
    if let Some(open) = path.last() {
        return Err(bad(&format!("the answer ends inside <{open}>")));
    }
    Ok(out)
}

fn parse_xml<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("the response is not UTF-8: {e}"))?;
    quick_xml::de::from_str(text).map_err(|e| format!("malformed XML response: {e}"))
}

/// Whether keys come URL-encoded: `EncodingType` is echoed only when the server applied it.
fn url_encoding(encoding_type: Option<&str>) -> Result<bool, String> {
    match encoding_type {
        None => Ok(false),
        Some(t) if t.eq_ignore_ascii_case("url") => Ok(true),
        Some(t) => Err(format!("unexpected EncodingType `{t}`")),
    }
}

/// A key of an `encoding-type=url` response: S3 encodes a space as `+` (and `+` as `%2B`).
fn decode_key(key: &str, url_encoded: bool) -> Result<String, String> {
    if !url_encoded {
        return Ok(key.to_string());
    }
    let plus = key.replace('+', " ");
    let decoded = percent_decode_str(&plus).decode_utf8().map_err(|e| format!("key `{key}` is not UTF-8: {e}"))?;
    Ok(decoded.into_owned())
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListBucketResult {
    #[serde(default)]
    contents: Vec<ListContents>,
    is_truncated: bool,
    encoding_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListContents {
    key: String,
    size: u64,
    last_modified: DateTime<Utc>,
    #[serde(rename = "ETag")]
    e_tag: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListMultipartUploadsResult {
    #[serde(default)]
    upload: Vec<UploadEntry>,
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
    encoding_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct UploadEntry {
    key: String,
    upload_id: String,
    initiated: DateTime<Utc>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct S3ErrorBody {
    code: Option<String>,
    message: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_url_encoded_keys() {
        assert_eq!(decode_key("a+b%2Bc%25d%23e%C3%A9/", true).unwrap(), "a b+c%d#eé/");
        assert_eq!(decode_key("a+b", false).unwrap(), "a+b");
        assert!(decode_key("%FF", true).is_err());
    }

    #[test]
    fn reads_a_delete_result_key_by_key() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Error><Key>p/a&amp;b</Key><Code>AccessDenied</Code>
<Message>Access Denied</Message></Error><Deleted><Key>p/c</Key><VersionId>v1</VersionId><DeleteMarker>true</DeleteMarker>
</Deleted><Deleted><Key>p/d&#38;e</Key></Deleted><Error><Key>p/f</Key><Code>NoSuchKey</Code><Message></Message></Error>
</DeleteResult>"#;
        let denied = RawAnswer::Error { code: "AccessDenied".into(), message: "Access Denied".into() };
        let missing = RawAnswer::Error { code: "NoSuchKey".into(), message: String::new() };
        assert_eq!(
            parse_delete_result(xml.as_bytes()).unwrap(),
            vec![
                ("p/a&b".to_string(), denied),
                ("p/c".into(), RawAnswer::Deleted),
                ("p/d&e".into(), RawAnswer::Deleted),
                ("p/f".into(), missing)
            ]
        );
        assert_eq!(parse_delete_result(b"<DeleteResult/>").unwrap(), vec![]);
        for bad in [
            &b"<Error><Code>InternalError</Code></Error>"[..],
            b"<DeleteResult><Deleted><VersionId>v</VersionId></Deleted></DeleteResult>",
            b"<DeleteResult><Deleted><Key>k</Key>",
            b"",
        ] {
            assert!(parse_delete_result(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_conditional_verdict_names_the_missing_code() {
        let honoured = Conditional::Honoured("NoSuchKey".into());
        assert!(honoured.means_missing("NoSuchKey") && !honoured.means_missing("AccessDenied"));
        assert!(!Conditional::Ignored.means_missing("NoSuchKey") && !Conditional::Unknown.is_known());
        let verdict = ConditionalVerdict::default();
        verdict.store(Conditional::Unsupported);
        verdict.store(Conditional::Ignored);
        assert_eq!(verdict.load(), Conditional::Unsupported, "a refusal is final");
    }

    #[test]
    fn parses_a_list_page() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<Contents><Key>p/x</Key><LastModified>2026-01-02T03:04:05.000Z</LastModified><ETag>&quot;e&quot;</ETag>
<Size>3</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>p/x/</Key><LastModified>2026-01-02T03:04:05.000Z</LastModified><Size>0</Size></Contents>
</ListBucketResult>"#;
        let r: ListBucketResult = parse_xml(xml.as_bytes()).unwrap();
        assert!(r.is_truncated);
        assert_eq!(r.contents.len(), 2);
        assert_eq!(r.contents[0].e_tag.as_deref(), Some("\"e\""));
        assert_eq!(r.contents[1].key, "p/x/");
        assert_eq!(r.encoding_type.as_deref(), Some("url"));
        let empty: ListBucketResult =
            parse_xml(b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>").unwrap();
        assert!(empty.contents.is_empty());
        assert!(parse_xml::<ListBucketResult>(b"<ListBucketResult><Contents>").is_err());
    }
}
