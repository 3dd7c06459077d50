"""A real HTTP file server on 127.0.0.1 with Range support, the download source of tests.

It serves the files under ``root``, answers HEAD with the size, and GET with the whole
file or the ``Range: bytes=a-b`` asked for (206). Every GET is recorded as
``(path, first byte or -1 for a plain GET)``. ``gone_from[path] = n`` makes every GET of
``path`` that reaches byte ``n`` answer 404, as a source that vanished in the middle of a
download (a refusal, so the download stops at once instead of retrying). ``pids`` holds
the process id of every client that fetched bytes (looked up from its socket), so a test
can tell which processes did the downloading. A path in ``cut_short`` is answered with its
whole ``Content-Length`` but only its first 1,000 bytes, then the connection closes, on
every GET: a source that always truncates its body.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class Served:
    """What the server saw and how it misbehaves."""

    base: str
    root: Path
    gets: list[tuple[str, int]] = field(default_factory=list)
    gone_from: dict[str, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    cut_short: set[str] = field(default_factory=set)

    def ranged_starts(self, path: str) -> list[int]:
        return [s for p, s in self.gets if p == path and s >= 0]


def _client_pid(client_port: int, server_port: int) -> int:
    """The process on this machine holding the client end of a connection (-1 if unseen)."""
    import psutil

    for conn in psutil.net_connections(kind="tcp4"):
        if (
            conn.laddr
            and conn.raddr
            and conn.laddr.port == client_port
            and conn.raddr.port == server_port
        ):
            return conn.pid if conn.pid is not None else -1
    return -1


class _Files(BaseHTTPRequestHandler):
    state: Served

    def log_message(self, *args: object) -> None:
        pass

    def _file(self) -> Path | None:
        path = self.state.root / self.path.lstrip("/")
        return path if path.is_file() else None

    def do_HEAD(self) -> None:
        f = self._file()
        if f is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(f.stat().st_size))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()

    def do_GET(self) -> None:
        f = self._file()
        if f is None:
            self.send_error(404)
            return
        data = f.read_bytes()
        start, end = 0, len(data) - 1
        rng = self.headers.get("Range")
        if rng:
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start = int(a)
            end = min(int(b), end) if b else end
        gone = self.state.gone_from.get(self.path)
        if gone is not None and end >= gone:
            self.send_error(404)
            return
        self.state.gets.append((self.path, start if rng else -1))
        self.state.pids.add(_client_pid(self.client_address[1], self.server.server_address[1]))
        if rng:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start : end + 1]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if self.path in self.state.cut_short:
            self.close_connection = True
            body = body[:1000]
        self.wfile.write(body)


@contextmanager
def http_files(root: Path) -> Iterator[Served]:
    """Serve ``root`` on a free port of 127.0.0.1 for the duration of the block."""
    state = Served("", root)
    handler = type("Handler", (_Files,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
