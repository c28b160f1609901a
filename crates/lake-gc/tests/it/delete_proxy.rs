//! A proxy on loopback in front of LocalStack that makes DeleteObjects answer per-key errors,
//! as S3 does for a key a bucket policy protects (`AccessDenied`): a key that contains
//! [`REFUSED`] is taken out of every DeleteObjects request (so S3 does not delete it), and the
//! answer gets an `<Error>` for it, placed first so that `<Deleted>` and `<Error>` entries
//! interleave. A key that contains [`UNANSWERED`] is taken out too, and left out of the answer
//! (a server that breaks the protocol), and every answer also names a key that was never asked
//! ([`NEVER_ASKED`], in an `<Error>`; object_store's own reader panics on it). Every other
//! request and answer passes untouched.
//!
//! Started with [`DeleteProxy::start_like_aws`], it also gives LocalStack (which ignores them)
//! Amazon S3's conditional deletes: an `<Object>` with `<ETag>*</ETag>` whose key does not exist
//! (a HEAD request tells) is taken out of the request and answered `<Error>` `NoSuchKey`, as S3
//! answers it. DeleteObjects requests then pass one at a time (the check and the delete are one
//! step, as in S3), so concurrent deletes of one key see one removal.
//!
//! One HTTP/1.1 exchange at a time per client connection (object_store's client waits for each
//! answer): the request is read whole (`Content-Length`), sent to LocalStack on a connection of
//! its own with `Connection: close`, and the answer read to its end and returned with a
//! `Content-Length`. The rewritten request's `Content-MD5`, `x-amz-content-sha256` and
//! `Content-Length` are recomputed (LocalStack checks the first; it does not check signatures).
//! Learnt from lake-bench's latency proxy (`crates/lake-bench/src/latency_proxy.rs`).

use base64::Engine as _;
use md5::Digest as _;
use sha2::Digest as _;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Keys containing this are refused by the "bucket policy".
pub(crate) const REFUSED: &str = "refused";
/// Keys containing this are left out of the answer.
pub(crate) const UNANSWERED: &str = "unanswered";
/// A key every DeleteObjects answer names in an `<Error>` (outside [`DeleteProxy::start_like_aws`])
/// though no request asked for it.
pub(crate) const NEVER_ASKED: &str = "objects/never-asked";

/// A running proxy; stops when dropped.
pub(crate) struct DeleteProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

/// How the proxy treats DeleteObjects.
#[derive(Clone)]
struct Mode {
    target: String,
    /// Amazon S3's conditional deletes, and the lock that makes each request one step.
    like_aws: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl DeleteProxy {
    /// Listens on a free loopback port, forwarding to `upstream` (`http://host:port`).
    pub(crate) async fn start(upstream: &str) -> Self {
        Self::listen(upstream, false).await
    }

    /// As [`DeleteProxy::start`], honouring conditional deletes as Amazon S3 does.
    pub(crate) async fn start_like_aws(upstream: &str) -> Self {
        Self::listen(upstream, true).await
    }

    async fn listen(upstream: &str, like_aws: bool) -> Self {
        let target = upstream.trim_start_matches("http://").trim_end_matches('/').to_string();
        let mode = Mode { target, like_aws: like_aws.then(|| Arc::new(tokio::sync::Mutex::new(()))) };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let mode = mode.clone();
                tokio::spawn(async move {
                    let _ = serve(client, &mode).await;
                });
            }
        });
        Self { addr, task }
    }

    /// The proxy's URL, for `aws_endpoint`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for DeleteProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An HTTP message: its first line, headers, body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn set(&mut self, name: &str, value: String) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers.push((name.to_string(), value));
    }

    fn drop_header(&mut self, name: &str) {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (n, v) in &self.headers {
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Reads a message's head and its body: none for the answer to a HEAD (`head`), else
/// `Content-Length` bytes, a chunked body, or (for an answer on a closing connection, `to_end`)
/// everything to the end. `None` at the end of the stream.
async fn read_message(
    reader: &mut BufReader<impl tokio::io::AsyncRead + Unpin>,
    to_end: bool,
    head: bool,
) -> std::io::Result<Option<Message>> {
    let mut start = String::new();
    if reader.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut message = Message { start: start.trim_end().to_string(), headers, body: Vec::new() };
    if head {
        return Ok(Some(message));
    }
    if let Some(length) = message.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        message.body = vec![0; length];
        reader.read_exact(&mut message.body).await?;
    } else if message.header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).await?;
            let size = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            let mut chunk = vec![0; size + 2];
            reader.read_exact(&mut chunk).await?;
            if size == 0 {
                break;
            }
            message.body.extend_from_slice(&chunk[..size]);
        }
        message.drop_header("transfer-encoding");
    } else if to_end {
        reader.read_to_end(&mut message.body).await?;
    }
    Ok(Some(message))
}

async fn serve(client: TcpStream, mode: &Mode) -> std::io::Result<()> {
    let (read, mut write) = client.into_split();
    let mut reader = BufReader::new(read);
    while let Some(mut request) = read_message(&mut reader, false, false).await? {
        let head = request.start.starts_with("HEAD ");
        let is_delete = request.start.starts_with("POST ") && request.start.contains("?delete");
        // One DeleteObjects request at a time when conditional deletes are emulated.
        let _step = match (&mode.like_aws, is_delete) {
            (Some(lock), true) => Some(lock.lock().await),
            _ => None,
        };
        let mut errors: Vec<(String, &str)> = Vec::new();
        if is_delete {
            let bucket =
                request.start.split_whitespace().nth(1).unwrap_or("/").split('?').next().unwrap_or("/").to_string();
            let body = String::from_utf8_lossy(&request.body).into_owned();
            let (mut body, taken) = take_keys(&body, |key, _| key.contains(REFUSED) || key.contains(UNANSWERED));
            errors.extend(taken.into_iter().filter(|k| k.contains(REFUSED)).map(|k| (k, "AccessDenied")));
            if mode.like_aws.is_none() {
                errors.push((NEVER_ASKED.to_string(), "AccessDenied"));
            }
            if mode.like_aws.is_some() {
                let mut conditional = Vec::new();
                let (_, candidates) = take_keys(&body, |_, entry| entry.contains("<ETag>*</ETag>"));
                for key in candidates {
                    if !exists(&mode.target, &bucket, &key).await? {
                        conditional.push(key);
                    }
                }
                let (rest, missing) = take_keys(&body, |key, _| conditional.iter().any(|c| c == key));
                body = rest.replace("<ETag>*</ETag>", "");
                errors.extend(missing.into_iter().map(|k| (k, "NoSuchKey")));
            }
            request.body = body.into_bytes();
            let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(&request.body));
            request.set("content-md5", md5);
            request.set("x-amz-content-sha256", hex::encode(sha2::Sha256::digest(&request.body)));
        }
        request.set("content-length", request.body.len().to_string());
        request.set("connection", "close".into());
        let mut answer = if is_delete && !request.body.windows(8).any(|w| w == b"<Object>") {
            // Nothing left to delete: S3's answer, without asking LocalStack (which would call an
            // empty request malformed).
            let body = r#"<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"></DeleteResult>"#;
            Message { start: "HTTP/1.1 200 OK".into(), headers: vec![], body: body.as_bytes().to_vec() }
        } else {
            let mut upstream = TcpStream::connect(&mode.target).await?;
            upstream.write_all(&request.to_bytes()).await?;
            read_message(&mut BufReader::new(upstream), true, head)
                .await?
                .ok_or_else(|| std::io::Error::other("LocalStack closed without an answer"))?
        };
        if is_delete && answer.start.contains(" 200 ") {
            answer.body = add_errors(&String::from_utf8_lossy(&answer.body), &errors).into_bytes();
        }
        if !head {
            answer.set("content-length", answer.body.len().to_string());
        }
        answer.set("connection", "keep-alive".into());
        write.write_all(&answer.to_bytes()).await?;
    }
    Ok(())
}

/// Whether the bucket key `key` exists upstream (an unsigned HEAD: LocalStack does not check
/// signatures).
async fn exists(target: &str, bucket_path: &str, key: &str) -> std::io::Result<bool> {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const PATH: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    let key = key.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">");
    let path = format!("{}/{}", bucket_path.trim_end_matches('/'), utf8_percent_encode(&key, PATH));
    let mut upstream = TcpStream::connect(target).await?;
    let request = format!("HEAD {path} HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n");
    upstream.write_all(request.as_bytes()).await?;
    let answer = read_message(&mut BufReader::new(upstream), true, true).await?;
    Ok(answer.is_some_and(|a| a.start.contains(" 200 ")))
}

/// The request body without the `<Object>` entries for which `take(key, entry)` holds, and the
/// keys of those entries (as written in the XML).
fn take_keys(body: &str, take: impl Fn(&str, &str) -> bool) -> (String, Vec<String>) {
    let mut kept = String::new();
    let mut taken = Vec::new();
    let mut rest = body;
    while let Some(start) = rest.find("<Object>") {
        kept.push_str(&rest[..start]);
        let end = rest[start..].find("</Object>").map(|e| start + e + "</Object>".len()).unwrap_or(rest.len());
        let entry = &rest[start..end];
        let key = entry.split("<Key>").nth(1).and_then(|k| k.split("</Key>").next()).unwrap_or_default();
        if take(key, entry) {
            taken.push(key.to_string());
        } else {
            kept.push_str(entry);
        }
        rest = &rest[end..];
    }
    kept.push_str(rest);
    (kept, taken)
}

/// The answer with an `<Error>` of code `code` for every `(key, code)`, right after
/// `<DeleteResult ...>`.
fn add_errors(answer: &str, errors: &[(String, &str)]) -> String {
    let entries: String = errors
        .iter()
        .map(|(k, code)| {
            let message = if *code == "NoSuchKey" { "The specified key does not exist." } else { "Access Denied" };
            format!("<Error><Key>{k}</Key><Code>{code}</Code><Message>{message}</Message></Error>")
        })
        .collect();
    match answer.find("<DeleteResult").and_then(|s| answer[s..].find('>').map(|e| s + e + 1)) {
        Some(at) => format!("{}{entries}{}", &answer[..at], &answer[at..]),
        None => answer.to_string(),
    }
}
