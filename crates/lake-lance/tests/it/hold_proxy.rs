//! A TCP proxy on loopback in front of LocalStack that holds the PUTs of Lance manifests
//! (`.../_versions/*.manifest`) until the test releases them: the slow network between a
//! writer and S3. Every other request is forwarded at once. It can also drop the conditions of
//! every request (`If-None-Match`, `If-Match`): a store without conditional writes.
//!
//! One request per client connection: the proxy reads the request (head, then the body by its
//! `Content-Length`), rewrites it to `Connection: close`, and forwards it on a connection of its
//! own; the response is relayed until the server closes. A held PUT stays in the proxy when its
//! client gives up (a timeout drops the connection) and is sent when released: the write lands
//! after its writer stopped waiting, as an S3 PUT already on the wire does. Plain `http://` only.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

struct Held {
    path: String,
    release: oneshot::Sender<()>,
    landed: oneshot::Receiver<bool>,
}

#[derive(Default)]
struct State {
    holding: bool,
    held: Vec<Held>,
    /// Drop `If-None-Match` and `If-Match` from every request: an S3-compatible store without
    /// conditional writes, which accepts a create-only PUT over an existing key.
    ignore_conditions: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    arrived: Notify,
}

/// A running proxy; stops accepting when dropped.
pub(crate) struct HoldProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HoldProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HoldProxy {
    /// Listens on a free loopback port, forwarding to `upstream` (`http://host:port`).
    pub(crate) async fn start(upstream: &str) -> Self {
        let target =
            upstream.strip_prefix("http://").expect("plain http:// only").split('/').next().unwrap().to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(handle(client, target.clone(), accepting.clone()));
            }
        });
        Self { addr, shared, task }
    }

    /// The proxy's URL (an `aws_endpoint` storage option).
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Makes the store behind the proxy ignore conditional writes from now on, or not.
    pub(crate) fn ignore_conditions(&self, on: bool) {
        self.shared.state.lock().unwrap().ignore_conditions = on;
    }

    /// Holds manifest PUTs from now on, or not (those held stay held).
    pub(crate) fn hold(&self, on: bool) {
        self.shared.state.lock().unwrap().holding = on;
    }

    /// Waits until at least `n` PUTs are held (failing the test after 120 s instead of hanging).
    pub(crate) async fn wait_held(&self, n: usize) {
        let waited = tokio::time::timeout(std::time::Duration::from_secs(120), async {
            loop {
                let notified = self.shared.arrived.notified();
                if self.shared.state.lock().unwrap().held.len() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await;
        assert!(waited.is_ok(), "no manifest PUT was held within 120 s");
    }

    /// Paths of the PUTs held now.
    pub(crate) fn held(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().held.iter().map(|h| h.path.clone()).collect()
    }

    /// Sends every held PUT to S3, oldest first, each once the one before it was answered;
    /// returns whether each was accepted (2xx: the manifest landed).
    pub(crate) async fn release_all(&self) -> Vec<bool> {
        let mut out = Vec::new();
        loop {
            let next = {
                let mut state = self.shared.state.lock().unwrap();
                (!state.held.is_empty()).then(|| state.held.remove(0))
            };
            let Some(held) = next else { return out };
            let _ = held.release.send(());
            out.push(held.landed.await.unwrap_or(false));
        }
    }
}

/// The end of the head (`\r\n\r\n`) in `buf`, if read.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

async fn handle(mut client: TcpStream, target: String, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut headers: Vec<String> = Vec::new();
    let mut length = 0usize;
    for line in lines.filter(|l| !l.is_empty()) {
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("connection:") {
            continue;
        }
        if (lower.starts_with("if-none-match:") || lower.starts_with("if-match:"))
            && shared.state.lock().unwrap().ignore_conditions
        {
            continue;
        }
        headers.push(line.to_string());
    }
    while buf.len() < end + length {
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let mut request = format!("{request_line}\r\n{}\r\nConnection: close\r\n\r\n", headers.join("\r\n")).into_bytes();
    request.extend_from_slice(&buf[end..end + length]);
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
    let path = path.split('?').next().unwrap_or_default().to_string();
    let manifest = method == "PUT" && path.contains("/_versions/") && path.ends_with(".manifest");
    let held = {
        let mut state = shared.state.lock().unwrap();
        (state.holding && manifest).then(|| {
            let (release, released) = oneshot::channel();
            let (landed_tx, landed) = oneshot::channel();
            state.held.push(Held { path: path.clone(), release, landed });
            (released, landed_tx)
        })
    };
    let Some((released, landed_tx)) = held else {
        let _ = forward(&target, &request, Some(&mut client)).await;
        return;
    };
    shared.arrived.notify_waiters();
    if released.await.is_err() {
        return;
    }
    // The client may have given up long ago: the PUT goes to S3 all the same.
    let status = forward(&target, &request, Some(&mut client)).await;
    let _ = landed_tx.send(status.is_some_and(|s| (200..300).contains(&s)));
}

/// Sends `request` to `target` and relays the response to `client` (while it listens) until
/// the server closes; returns the response's status code.
async fn forward(target: &str, request: &[u8], mut client: Option<&mut TcpStream>) -> Option<u16> {
    let mut server = TcpStream::connect(target).await.ok()?;
    server.write_all(request).await.ok()?;
    let mut response = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match server.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if response.len() < 64 {
            response.extend_from_slice(&chunk[..n.min(64)]);
        }
        if let Some(c) = client.as_mut() {
            if c.write_all(&chunk[..n]).await.is_err() {
                client = None;
            }
        }
    }
    if let Some(c) = client {
        let _ = c.shutdown().await;
    }
    let status_line = String::from_utf8_lossy(&response).to_string();
    status_line.split(' ').nth(1).and_then(|s| s.parse().ok())
}
