"""Ranged reads of remote objects straight into a caller's buffer: what a node cache's
downloads use.

On S3 with plain options (``key``/``secret``/``token``, an endpoint, a region, ``anon``),
a range is one signed ``GET`` of a pooled botocore client (one per process and options),
its body read into the buffer with no copy between; ``If-Match`` the ETag the dataset was
indexed with, when one is given, so a changed object is an error, never mixed bytes. A
connection dropped mid-range resumes from the first byte not yet read. Anything else
(other protocols, other options) reads through its fsspec filesystem.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from shardwise.errors import StorageError
from shardwise.storage.paths import _protocol, resolve
from shardwise.storage.refusals import named
from shardwise.storage.retry import is_transient, with_retries

__all__ = ["IntoReader", "into_reader"]

IntoReader = Callable[[int, int, memoryview], None]  # fill the view with [start, end)
POOL = 16  # connections per client
_PLAIN = {"key", "secret", "token", "anon", "client_kwargs", "endpoint_url", "session"}
_CLIENTS: dict[tuple[int, str], Any] = {}  # by process: a forked child makes its own
_LOCK = threading.Lock()
_SESSION: list[Any] = []


def _after_fork() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # a thread of the parent may have held it
    _CLIENTS.clear()


os.register_at_fork(after_in_child=_after_fork)


def into_reader(url: str, storage_options: dict[str, Any], etag: str = "") -> IntoReader:
    """A function filling a buffer with bytes ``[start, end)`` of ``url`` (retried; a
    short read is a :class:`StorageError` naming the URL). Its client is made at its
    first read (a reader of cache hits never needs one)."""
    made: list[IntoReader] = []

    def read(start: int, end: int, view: memoryview) -> None:
        if not made:
            made.append(_reader(url, storage_options, etag))
        made[0](start, end, view)

    return read


def _reader(url: str, storage_options: dict[str, Any], etag: str) -> IntoReader:
    client = _client(url, storage_options)
    if client is None:
        return partial(_through_fsspec, url, storage_options)
    bucket, _, key = url.split("://", 1)[1].partition("/")
    return partial(_s3_into, client, url, bucket, key, etag.strip('"'))


def _client(url: str, options: dict[str, Any]) -> Any:
    """A botocore client for plain S3 options (None otherwise), one per process."""
    if _protocol(url) not in ("s3", "s3a") or set(options) - _PLAIN:
        return None
    kwargs = dict(options.get("client_kwargs") or {})
    if set(kwargs) - {"endpoint_url", "region_name"}:
        return None
    cache_key = (os.getpid(), repr(sorted(options.items(), key=str)))
    with _LOCK:
        if cache_key not in _CLIENTS:
            _CLIENTS[cache_key] = _make_client(options, kwargs)
        return _CLIENTS[cache_key]


def _make_client(options: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    import botocore.session
    from botocore import UNSIGNED
    from botocore.config import Config

    config = Config(
        max_pool_connections=POOL,
        retries={"max_attempts": 3, "mode": "standard"},
        **({"signature_version": UNSIGNED} if options.get("anon") else {}),
    )
    if not _SESSION:  # loading botocore's service descriptions costs ~0.5 s of CPU: once,
        _SESSION.append(botocore.session.get_session())  # and inherited by forked workers
    return _SESSION[0].create_client(
        "s3",
        endpoint_url=kwargs.get("endpoint_url") or options.get("endpoint_url"),
        region_name=kwargs.get("region_name"),
        aws_access_key_id=options.get("key"),
        aws_secret_access_key=options.get("secret"),
        aws_session_token=options.get("token"),
        config=config,
    )


def _s3_into(
    client: Any, url: str, bucket: str, key: str, etag: str, start: int, end: int, view: memoryview
) -> None:
    got = [0]  # bytes in the view so far: a retry asks for the rest only

    def attempt() -> None:
        args: dict[str, Any] = {"Bucket": bucket, "Key": key}
        args["Range"] = f"bytes={start + got[0]}-{end - 1}"
        if etag:
            args["IfMatch"] = etag
        body = _get(client, url, args)
        try:
            while got[0] < end - start:
                n = body.readinto(view[got[0] : end - start])
                if not n:
                    raise StorageError(
                        f"{url} ended at byte {start + got[0]}, before byte {end} (it changed "
                        "since it was indexed: index it again)",
                        url,
                    )
                got[0] += n
        except OSError:
            raise
        except Exception as exc:  # a body cut short: retried from where it stopped
            raise _Cut(f"{url}: the answer was cut ({type(exc).__name__}: {exc})", url) from exc
        finally:
            body.close()

    with_retries(attempt, retry_on=lambda e: isinstance(e, _Cut) or is_transient(e))


class _Cut(StorageError):
    """A ranged GET's body ended early (a dropped connection): retried from there."""


def _get(client: Any, url: str, args: dict[str, Any]) -> Any:
    from botocore.exceptions import ClientError

    try:
        return client.get_object(**args)["Body"]
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = str(error.get("Code", status))
        if status == 412 or code == "PreconditionFailed":
            raise StorageError(
                f"{url} changed since it was indexed (its ETag is not {args['IfMatch']}): "
                "index the dataset again",
                url,
            ) from exc
        if status in (404, 410) or code in ("NoSuchKey", "NoSuchBucket"):
            raise StorageError(f"file not found: {url} ({code})", url) from exc
        if status in (401, 403) or code in ("AccessDenied", "InvalidAccessKeyId"):
            raise StorageError(f"access denied: {url} ({code})", url, refused=True) from exc
        raise


def _through_fsspec(
    url: str, options: dict[str, Any], start: int, end: int, view: memoryview
) -> None:
    fs, path = resolve(url, **options)
    with named(url):
        data = with_retries(partial(fs.cat_file, path, start=start, end=end))
    if len(data) != end - start:
        raise StorageError(
            f"got {len(data)} bytes of {url} [{start}, {end}), expected {end - start} (it "
            "changed since it was indexed: index it again)",
            url,
        )
    view[: len(data)] = data
