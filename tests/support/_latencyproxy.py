"""A small HTTP proxy on 127.0.0.1 that counts requests by method and can add latency.

It forwards every request to one upstream server (the SeaweedFS S3 endpoint) with its
headers as sent, ``Host`` included, so S3 signatures still verify; a client points its
``endpoint_url`` at the proxy instead of the server. ``delay`` seconds are added to
every request before it is forwarded (the latency of a real object store: 20-50 ms).
It runs on its own event loop in a daemon thread::

    with LatencyProxy(endpoint, delay=0.03) as proxy:
        opts = {..., "client_kwargs": {"endpoint_url": proxy.url}}
        ...
        proxy.counts   # {"GET": 12, "HEAD": 1, ...}; proxy.lists: GETs with ?list-type

``python _latencyproxy.py UPSTREAM DELAY`` runs one in a process of its own (it prints its
URL, stops when stdin closes); :func:`remote_counts` reads its counts.
"""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import threading
import urllib.request
from typing import Any

#: headers that belong to one connection, never forwarded
_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
}


#: paths the proxy answers itself: ``counts`` (a snapshot as JSON) and ``reset``
CONTROL = "/__latencyproxy/"


class LatencyProxy:
    """Forward to ``upstream``, counting requests; ``url`` is where clients connect."""

    def __init__(self, upstream: str, delay: float = 0.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.delay = delay
        self.counts: collections.Counter[str] = collections.Counter()
        self.lists = 0
        self.paths: list[tuple[str, str]] = []
        self.url = ""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: Any = None
        self._session: Any = None

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def reset(self) -> None:
        """Forget the counts so far."""
        with self._lock:
            self.counts.clear()
            self.lists = 0
            self.paths.clear()

    def snapshot(self) -> dict[str, int]:
        """Counts by method, plus ``LIST`` (GETs listing a bucket) and ``total``."""
        with self._lock:
            out = dict(self.counts)
            out["LIST"] = self.lists
            out["total"] = sum(self.counts.values())
        return out

    async def _start(self) -> int:
        import aiohttp
        from aiohttp import web

        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=600),
        )
        app = web.Application(client_max_size=2**31)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        return int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]

    async def _stop(self) -> None:
        await self._runner.cleanup()
        await self._session.close()

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web
        from yarl import URL

        if request.path.startswith(CONTROL):  # another process asking (benchmarks)
            if request.path == CONTROL + "reset":
                self.reset()
            return web.json_response(self.snapshot())
        with self._lock:
            self.counts[request.method] += 1
            self.lists += request.method == "GET" and "list-type" in request.query
            self.paths.append((request.method, request.path_qs))
        if self.delay:
            await asyncio.sleep(self.delay)
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method,
            URL(self.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
        ) as up:
            payload = await up.read()
            out = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    out.headers.add(k, v)
            out.content_length = len(payload) if request.method != "HEAD" else None
            if request.method == "HEAD" and "Content-Length" in up.headers:
                out.headers["Content-Length"] = up.headers["Content-Length"]
            await out.prepare(request)
            if payload and request.method != "HEAD":
                await out.write(payload)
            await out.write_eof()
            return out


def remote_counts(url: str, reset: bool = False) -> dict[str, int]:
    """The counts of a proxy running in another process (and reset them if asked)."""
    with urllib.request.urlopen(url + CONTROL + ("reset" if reset else "counts")) as r:
        return dict(json.loads(r.read()))


def main(argv: list[str]) -> None:
    """``python _latencyproxy.py UPSTREAM DELAY``: serve until stdin closes, in its own
    process (so its work does not share the measured client's interpreter)."""
    with LatencyProxy(argv[0], float(argv[1])) as proxy:
        print(proxy.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main(sys.argv[1:])
