"""Small ranged GETs of S3 objects at a fraction of an S3 client's CPU.

botocore spends 1-2 ms of a core on each request (its hooks, endpoint rules, user agent,
signer and response parser), which binds a process reading thousands of footers to its
core long before the store is busy. :class:`LightGets` sends the same GET on aiohttp
(which s3fs already depends on), signed by :mod:`shardwise.storage.sigv4`, with the
s3fs filesystem's own credentials, region and URL layout (taken from the client once per
bucket).

It is only a faster road for the plain case, never a second meaning: a filesystem with
anything it does not reproduce (anonymous access, requester pays, versions, extra request
arguments such as SSE-C keys, a client's own TLS or proxy settings) gets ``None`` from
:meth:`open` (the environment's proxies and CA bundle are honoured as botocore does); and
any answer but the bytes asked for (an error status, a redirect, a short body, a broken
connection) makes :meth:`get` return ``None``, so the caller asks s3fs, whose errors and
retries are then the ones a user sees. An answer refusing the signature or the region, or
a read that outlived the client's timeouts, turns the road off for the rest of the run.
An object whose ETag is no longer the listing's is refused, as s3fs's own reads refuse it.
"""

from __future__ import annotations

import functools
import os
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from shardwise.errors import StorageError
from shardwise.storage.sigv4 import Signer, encode_key

__all__ = ["LightGets"]

#: client options this road reproduces (others, such as ``verify`` or proxies, keep s3fs)
_CLIENT_KEYS = {"endpoint_url", "region_name"}
_CONFIG_KEYS = {"max_pool_connections", "connect_timeout", "read_timeout", "retries"}
#: statuses after which signed GETs are not tried again in this run
_REFUSED = {301, 307, 400, 401, 403}
#: a bucket's scheme, host, path prefix, proxy and TLS context (None for http)
_Base = tuple[str, str, str, "str | None", "ssl.SSLContext | None"]
_FRESH_S = 300.0  # credentials are re-read this often (temporary ones are refreshed)


class LightGets:
    """Ranged GETs for one s3fs filesystem (see the module docstring); use on its loop."""

    def __init__(self, fs: Any, credentials: Any, concurrency: int) -> None:
        self.fs, self.off = fs, False
        self._credentials = credentials
        self._concurrency = concurrency
        self._signer: Signer | None = None
        self._fresh = 0.0
        self._bases: dict[str, _Base] = {}
        self._session: Any = None

    @classmethod
    async def open(cls, fs: Any, concurrency: int) -> LightGets | None:
        """The road for ``fs`` (an s3fs filesystem), or None where it would not send the
        request s3fs sends."""
        if not _plain(fs):
            return None
        try:
            await fs.set_session()
        except Exception:  # noqa: BLE001 - s3fs's own reads then raise what a user sees
            return None
        client = fs.s3
        credentials = getattr(getattr(client, "_request_signer", None), "_credentials", None)
        if credentials is None or str(client.meta.config.signature_version) != "s3v4":
            return None
        return cls(fs, credentials, concurrency)

    async def get(self, url: str, path: str, start: int, end: int, etag: str) -> bytes | None:
        """Bytes ``[start, end)`` of the object at ``path`` (bucket/key; ``url`` names it),
        or None: ask s3fs instead.

        Raises:
            StorageError: the object's ETag is no longer ``etag`` (the listing's; empty:
                not checked): it changed since it was listed.
        """
        if self.off:
            return None
        from yarl import URL

        bucket, key, version = self.fs.split_path(path)
        if version:
            return None
        try:
            base = await self._base(bucket, key)
            if base is None:
                return None
            scheme, host, prefix, proxy, tls = base
            signer = await self._current_signer()
            url_path = prefix + encode_key(key)
            headers = signer.headers(host, url_path)
            headers["range"] = f"bytes={start}-{end - 1}"
            session = self._open_session()
            target = URL(f"{scheme}://{host}{url_path}", encoded=True)
            async with session.get(
                target, headers=headers, allow_redirects=False, proxy=proxy, ssl=tls or True
            ) as resp:
                if resp.status == 416:  # the range starts past the object's end
                    raise _changed(url, f"shorter than the {end:,} bytes listed")
                if resp.status not in (200, 206):
                    self.off = self.off or resp.status in _REFUSED
                    return None
                data = await resp.read()
        except StorageError:
            raise
        except TimeoutError:  # a stalled store: s3fs (its timeouts, its retries) from now on
            self.off = True
            return None
        except Exception:  # noqa: BLE001 - s3fs reads it again, and raises what a user sees
            return None
        _check_etag(url, etag, resp.headers.get("ETag"))
        if resp.status == 200:  # the whole object: the server ignored the range
            data = data[start:end]
        return data if len(data) == end - start else None

    async def close(self) -> None:
        """Close the connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _open_session(self) -> Any:
        if self._session is None:
            import aiohttp

            config = self.fs.s3.meta.config  # the client's timeouts (botocore's: 60 s each)
            timeout = aiohttp.ClientTimeout(
                total=None,
                sock_connect=float(config.connect_timeout or 60),
                sock_read=float(config.read_timeout or 60),
            )
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._concurrency),
                auto_decompress=False,  # the stored bytes, as botocore gives them
                timeout=timeout,
                skip_auto_headers=("Accept-Encoding", "User-Agent"),
            )
        return self._session

    async def _current_signer(self) -> Signer:
        if self._signer is None or time.monotonic() - self._fresh > _FRESH_S:
            frozen = await self._credentials.get_frozen_credentials()
            region = self.fs.s3.meta.region_name or "us-east-1"
            self._signer = Signer(frozen.access_key, frozen.secret_key, frozen.token, region)
            self._fresh = time.monotonic()
        return self._signer

    async def _base(self, bucket: str, key: str) -> _Base | None:
        """Scheme, host and path prefix of the bucket's objects, as the client builds its
        URLs (path or virtual-host style), with the proxy and the TLS context its host
        takes: from one presigned URL, made without a request;
        None (and the road off) when that URL does not end with the key."""
        base = self._bases.get(bucket)
        if base is None:
            url = await self.fs.s3.generate_presigned_url(
                "get_object", Params={"Bucket": bucket, "Key": key}
            )
            parts = urlsplit(url)
            encoded = encode_key(key)
            if not parts.path.endswith(encoded):
                self.off = True
                return None
            tls = _tls(_ca_bundle()) if parts.scheme == "https" else None
            proxy = _proxy_for(parts.scheme, parts.netloc)
            prefix = parts.path[: len(parts.path) - len(encoded)]
            base = (parts.scheme, parts.netloc, prefix, proxy, tls)
            self._bases[bucket] = base
        return base


def _check_etag(url: str, listed: str, answered: str | None) -> None:
    """Refuse an object whose ETag changed since the listing (s3fs's own reads refuse it
    too); an answer without one, or a listing without one, is not checked."""
    now = (answered or "").removeprefix("W/").strip('"')
    if listed and now and now != listed:
        raise _changed(url, f"ETag {now}, listed as {listed}")


def _changed(url: str, how: str) -> StorageError:
    return StorageError(f"{url} changed while it was indexed ({how}); open the dataset again", url)


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy the environment names for ``host`` (``HTTP(S)_PROXY``, ``NO_PROXY``), as
    botocore honours them; looked up once per bucket (aiohttp's own lookup runs on a
    thread per request)."""
    import urllib.request

    if urllib.request.proxy_bypass(host.rsplit(":", 1)[0]):
        return None
    return urllib.request.getproxies().get(scheme)


def _plain(fs: Any) -> bool:
    """Whether ``fs`` is an s3fs filesystem whose GETs this road reproduces."""
    if type(fs).__module__.split(".")[0] != "s3fs" or getattr(fs, "anon", True):
        return False
    if getattr(fs, "version_aware", True) or getattr(fs, "req_kw", None):
        return False
    if getattr(fs, "s3_additional_kwargs", None) or getattr(fs, "cache_regions", True):
        return False
    client = dict(getattr(fs, "client_kwargs", None) or {})
    config = dict(getattr(fs, "config_kwargs", None) or {})
    return not (set(client) - _CLIENT_KEYS or set(config) - _CONFIG_KEYS)


@functools.lru_cache(maxsize=8)
def _tls(cafile: str | None) -> ssl.SSLContext:
    """The TLS context of HTTPS GETs: the CA bundle botocore would use."""
    return ssl.create_default_context(cafile=cafile)


def _ca_bundle() -> str | None:
    """The CA bundle botocore verifies with when a client names none: ``AWS_CA_BUNDLE``,
    else ``REQUESTS_CA_BUNDLE``, else its default (certifi's)."""
    named = os.environ.get("AWS_CA_BUNDLE") or os.environ.get("REQUESTS_CA_BUNDLE")
    if named:
        return named
    try:
        from botocore.httpsession import get_cert_path

        return str(get_cert_path(True))
    except (ImportError, OSError):  # botocore without its bundle: the system's
        return None
