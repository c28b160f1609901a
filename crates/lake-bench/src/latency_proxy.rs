//! A TCP proxy on loopback that delays every HTTP/1.1 request by a fixed time: in front of
//! LocalStack, it gives each request the round trip of a real S3 request (30 ms is about that of a
//! ListObjectsV2 page), so a figure that counts on requests in flight measures its design rather
//! than the CPU of LocalStack's one Python process.
//!
//! Each client connection gets its own upstream connection. Client bytes are forwarded after
//! the delay when they start a request, and at once otherwise; server bytes are streamed back
//! untouched. A request starts with the connection's first bytes and with the first bytes the
//! client sends after the server last sent something: HTTP/1.1 clients (hyper, reqwest) send a
//! request only after the response to the previous one on that connection, and a request body
//! follows its headers without a server byte in between, so each request is delayed once, bodies
//! included, and concurrent requests on different connections are delayed concurrently. A client
//! waiting for `100 Continue` before sending its body would be delayed twice (object_store's
//! client does not wait for it). Plain `http://` only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running proxy; stops accepting (and drops its connections) when dropped.
pub(crate) struct LatencyProxy {
    addr: SocketAddr,
    delay: Duration,
    counters: Counters,
    task: tokio::task::JoinHandle<()>,
}

impl LatencyProxy {
    /// Listens on a free loopback port and forwards every connection to `upstream` (an
    /// `http://host:port` URL, like `AWS_ENDPOINT_URL`), each request delayed by `delay`.
    pub(crate) async fn start(upstream: &str, delay: Duration) -> Result<Self, String> {
        let target = upstream
            .strip_prefix("http://")
            .ok_or_else(|| format!("the latency proxy forwards plain http:// only, not {upstream}"))?
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let counters = Counters::default();
        let shared = counters.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, counters) = (target.clone(), shared.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, delay, counters).await;
                    }
                });
            }
        });
        Ok(Self { addr, delay, counters, task })
    }

    /// The proxy's URL, for `AWS_ENDPOINT_URL`.
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The delay per request.
    pub(crate) fn delay(&self) -> Duration {
        self.delay
    }

    /// Requests delayed so far.
    pub(crate) fn requests(&self) -> u64 {
        self.counters.requests.load(Ordering::Relaxed)
    }

    /// Of those, S3 ListObjectsV2 requests (a `GET` whose query has `list-type=2`).
    pub(crate) fn list_requests(&self) -> u64 {
        self.list_prefixes().values().sum()
    }

    /// The ListObjectsV2 requests so far per `prefix` parameter (URL-encoded).
    pub(crate) fn list_prefixes(&self) -> BTreeMap<String, u64> {
        self.counters.prefixes.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// The requests a proxy counted, shared by its connections.
#[derive(Clone, Default)]
struct Counters {
    requests: Arc<AtomicU64>,
    /// ListObjectsV2 requests per `prefix` parameter (URL-encoded, as sent).
    prefixes: Arc<Mutex<BTreeMap<String, u64>>>,
}

/// The `prefix` parameter of `start`, the first bytes of an HTTP/1.1 request, when it is an S3
/// ListObjectsV2 request (a `GET` whose query has `list-type=2`; `""` without a prefix).
fn list_prefix(start: &[u8]) -> Option<String> {
    let line = start.split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let (_, query) = line.strip_prefix("GET ")?.split_whitespace().next()?.split_once('?')?;
    if !query.split('&').any(|p| p == "list-type=2") {
        return None;
    }
    Some(query.split('&').find_map(|p| p.strip_prefix("prefix=")).unwrap_or_default().to_string())
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Forwards one connection both ways until either side closes, delaying the client bytes that
/// start a request.
async fn relay(client: TcpStream, server: TcpStream, delay: Duration, counters: Counters) {
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // True when the next client bytes start a request.
    let turn = Arc::new(AtomicBool::new(true));
    let answered = turn.clone();
    let up = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if turn.swap(false, Ordering::AcqRel) {
                counters.requests.fetch_add(1, Ordering::Relaxed);
                if let Some(prefix) = list_prefix(&buf[..n]) {
                    if let Ok(mut prefixes) = counters.prefixes.lock() {
                        *prefixes.entry(prefix).or_default() += 1;
                    }
                }
                tokio::time::sleep(delay).await;
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            // Before the client can see the response and send its next request.
            answered.store(true, Ordering::Release);
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}
