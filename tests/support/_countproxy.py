"""A counting HTTP proxy in front of the S3 test server: every request is passed on as it
came (headers too, so S3 signatures still hold) and the bytes of every response body
are counted, so a test can say how many bytes a read really fetched.

Use::

    with CountingProxy(upstream_url) as proxy:
        opts = {..., "client_kwargs": {"endpoint_url": proxy.url}}
        ...
        proxy.get_bytes, proxy.requests
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailers", "upgrade"}


class CountingProxy:
    """A reverse proxy on 127.0.0.1 counting the body bytes of GET responses.

    Attributes:
        url: the proxy's endpoint.
        get_bytes: body bytes of every successful GET response so far.
        requests: ``(method, path, range header, body bytes)`` of every request.
        stall: with ``stall_above`` bytes or more, a GET response sends half its body,
            waits ``stall`` seconds, then the rest (a slow download to kill mid-way).
    """

    def __init__(self, upstream: str, stall: float = 0.0, stall_above: int = 1 << 62) -> None:
        self.upstream = urllib.parse.urlsplit(upstream)
        self.stall, self.stall_above = stall, stall_above
        self.get_bytes = 0
        self.requests: list[tuple[str, str, str, int]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self.get_bytes = 0
            self.requests = []

    def record(self, method: str, path: str, rng: str, n: int) -> None:
        with self._lock:
            self.requests.append((method, path, rng, n))
            if method == "GET":
                self.get_bytes += n


def _handler(proxy: CountingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            # Counted before the client can see the response: counted after it, a test's
            # reset() between the client's return and this count would drop a request
            # the test had already seen served. An error's body (a refusal the client
            # retries) is not data.
            if 200 <= resp.status < 300:
                proxy.record(self.command, self.path, self.headers.get("Range", ""), len(data))
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            sent = data if self.command != "HEAD" else b""
            if self.command == "GET" and len(sent) >= proxy.stall_above:
                self.wfile.write(sent[: len(sent) // 2])
                self.wfile.flush()
                time.sleep(proxy.stall)
                sent = sent[len(sent) // 2 :]
            self.wfile.write(sent)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _relay

    return Handler
