"""What an object store or HTTP server says about a URL, as a :class:`StorageError` that
names it: not found, no such bucket, no credentials, access denied (none of them retried),
and a network failure that outlived its retries (an endpoint down)."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from shardwise.errors import StorageError
from shardwise.storage.retry import is_transient

__all__ = ["named"]

_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError")
_DENIED = (
    "AccessDenied",
    "Forbidden",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
)


@contextlib.contextmanager
def named(url: str) -> Iterator[None]:
    """Turn what an object store says about a URL into a StorageError naming it: not
    found, no credentials, access denied (none of these is retried)."""
    try:
        yield
    except FileNotFoundError as exc:
        if "bucket does not exist" in str(exc) or "NoSuchBucket" in str(exc):
            bucket = url.split("://", 1)[-1].split("/", 1)[0]
            raise StorageError(f"no such bucket {bucket!r}: {url}", url) from exc
        raise StorageError(f"file not found: {url}", url) from exc
    except Exception as exc:
        names = {c.__name__ for c in type(exc).__mro__}
        text = f"{type(exc).__name__}: {exc}"
        status = getattr(exc, "status", None)  # an HTTP server's answer (aiohttp)
        if status in (404, 410):
            raise StorageError(f"file not found: {url} (HTTP {status})", url) from exc
        if status in (401, 403):
            raise StorageError(
                f"access denied to {url} (HTTP {status})", url, refused=True
            ) from exc
        bad = _bad_request(exc, url)
        if bad is not None:
            raise bad from exc
        if names & set(_NO_CREDENTIALS):
            raise StorageError(
                f"no credentials for {url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                "AWS_PROFILE), pass storage_options={'key': ..., 'secret': ...}, or anon=True for "
                "a public bucket",
                url,
                refused=True,
            ) from exc
        if isinstance(exc, PermissionError) or any(d in text for d in _DENIED):
            raise StorageError(
                f"access denied to {url} ({exc}); check the credentials and the bucket's policy",
                url,
                refused=True,
            ) from exc
        if not isinstance(exc, StorageError) and is_transient(exc):  # its retries ran out
            raise StorageError(f"cannot reach {url}: {text}", url) from exc
        raise


def _bad_request(exc: Exception, url: str) -> StorageError | None:
    """A request the store or the client refused as malformed, naming ``url``: an HTTP
    400 (s3fs's ``EINVAL``), or an ``endpoint_url`` without its scheme (botocore's)."""
    if isinstance(exc, OSError) and exc.errno == errno.EINVAL and "://" in url:
        return StorageError(f"the store refused the request for {url} ({exc})", url)
    if isinstance(exc, ValueError) and str(exc).startswith("Invalid endpoint"):
        return StorageError(
            f"cannot reach {url}: {exc} (an endpoint URL starts with http:// or https://)",
            url,
            refused=True,
        )
    return None
