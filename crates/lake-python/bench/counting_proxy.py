"""An HTTP/1.1 proxy on loopback that forwards every request to an S3 endpoint (LocalStack) and
counts the requests by method, for figures and tests that count a read's S3 requests:

    proxy = CountingProxy(os.environ["AWS_ENDPOINT_URL"])
    lk = lake.open(root, storage_options={..., "aws_endpoint": proxy.endpoint})
    ... reads ...
    proxy.counts["GET"], proxy.counts["HEAD"], proxy.ranged_gets
    proxy.requests_of(key)   # {"GET": n, ...} of the requests whose path names `key`
    proxy.close()

Each request is parsed by `http.server` and sent upstream on a connection of its own; the
response is streamed back (`Content-Length` kept; a chunked response is read whole and sent with
a length). Request bodies must carry a `Content-Length` (uploads are best sent to the endpoint
itself: the proxy is for counting reads). The `Host` header is forwarded as the client sent it,
so a signature over it still matches (LocalStack does not check signatures anyway).
"""

import collections
import http.client
import http.server
import threading

# Hop-by-hop headers, never forwarded.
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class CountingProxy:
    """The proxy, listening on a free loopback port until `close()`; `endpoint` is its URL."""

    def __init__(self, upstream: str) -> None:
        scheme, rest = upstream.split("://", 1)
        if scheme != "http":
            raise ValueError(f"the counting proxy forwards plain http:// only, not {upstream}")
        host, _, port = rest.rstrip("/").partition(":")
        self.counts: collections.Counter = collections.Counter()
        self.ranged_gets = 0
        # (method, path) of every request, in order.
        self.requests: list = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def forward(self) -> None:
                with proxy._lock:
                    proxy.counts[self.command] += 1
                    proxy.requests.append((self.command, self.path))
                    if self.command == "GET" and self.headers.get("Range"):
                        proxy.ranged_gets += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection(host, int(port or 80), timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    sized = response.getheader("Content-Length") is not None
                    data = b"" if sized or self.command == "HEAD" else response.read()
                    self.send_response(response.status, response.reason)
                    for k, v in response.getheaders():
                        if k.lower() not in _HOP and (sized or k.lower() != "content-length"):
                            self.send_header(k, v)
                    if not sized:
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command == "HEAD":
                        return
                    if not sized:
                        self.wfile.write(data)
                        return
                    while True:
                        piece = response.read(1 << 20)
                        if not piece:
                            break
                        self.wfile.write(piece)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def requests_of(self, key: str) -> dict:
        """The requests counted so far whose path names `key` (a key under the bucket), by
        method."""
        with self._lock:
            return dict(collections.Counter(method for method, path in self.requests if key in path.split("?", 1)[0]))

    def reset(self) -> None:
        """Forgets the requests counted so far."""
        with self._lock:
            self.counts.clear()
            self.ranged_gets = 0
            self.requests.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
