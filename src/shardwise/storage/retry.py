"""Retries with exponential backoff and jitter for transient storage errors."""

from __future__ import annotations

import errno
import logging
import random
import re
import time
import zlib
from collections.abc import Callable
from typing import TypeVar

from shardwise.errors import ConfigError, ShardwiseError, StorageError

T = TypeVar("T")
log = logging.getLogger(__name__)

# Errors that are worth retrying: network hiccups, throttling, 5xx from object stores.
_TRANSIENT_NAMES = {
    "ConnectionError",
    "ConnectionResetError",
    "ConnectionAbortedError",
    "TimeoutError",
    "ReadTimeoutError",
    "ConnectTimeoutError",
    "EndpointConnectionError",
    "ServerTimeoutError",
    "ClientPayloadError",
    "ServerDisconnectedError",
    "IncompleteRead",
    "ClientConnectionError",
    "ClientConnectorError",
    "ClientOSError",
    "SlowDown",
}
_TRANSIENT_TEXT = (
    "slow down",
    "throttl",
    "500 internal",
    "timed out",
    "reset by peer",
    "cannot connect to host",
    "connect call failed",
    "could not connect to the endpoint",
    "internal error",
    "please try again",
    "service unavailable",
)
# an HTTP 503 as a number of its own (not three digits of a bucket name or a hash)
_HTTP_503 = re.compile(r"(?<![0-9a-z])503(?![0-9a-z])")
# s3fs turns an object store's 5xx answers into OSErrors with these numbers: InternalError
# and 500 into EREMOTEIO, ServiceUnavailable, SlowDown and 503 into EBUSY. A server that is
# starting again (or failing over) answers so until it is ready.
_TRANSIENT_ERRNOS = {
    getattr(errno, "EREMOTEIO", errno.EIO),
    errno.EBUSY,
    errno.ETIMEDOUT,
    errno.ECONNRESET,
    errno.ECONNREFUSED,
    errno.ECONNABORTED,
}


def _decoding(exc: BaseException) -> bool:
    """Whether ``exc`` is about bytes already read (a decoder's or shardwise's complaint
    about data, a bad argument): never transient, whatever its message says."""
    if isinstance(exc, ShardwiseError):
        return not isinstance(exc, StorageError)
    if type(exc).__module__.split(".")[0] == "pyarrow":  # ArrowInvalid and its kin
        return True
    return isinstance(exc, (ValueError, zlib.error, LookupError, ArithmeticError))


def is_transient(exc: BaseException) -> bool:
    """Return True if ``exc`` looks like a transient network or service error. Only a
    storage error can be: an error decoding bytes already read never is (a snappy page
    whose header says 503 bytes is no throttled request)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    if isinstance(exc, ShardwiseError) and not isinstance(exc, StorageError):
        return False
    for cls in type(exc).__mro__:
        if cls.__name__ in _TRANSIENT_NAMES:
            return True
    if isinstance(exc, OSError) and exc.errno in _TRANSIENT_ERRNOS:
        return True
    if _decoding(exc):
        return False
    text = str(exc).lower()
    return any(t in text for t in _TRANSIENT_TEXT) or _HTTP_503.search(text) is not None


def transient_in_chain(exc: BaseException) -> bool:
    """True if ``exc`` or an exception it was raised from (``__cause__``/``__context__``)
    is transient: a reader (Arrow, a decompressor) may wrap a dropped connection."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if is_transient(e):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def with_retries(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base_delay: float = 0.2,
    max_delay: float = 10.0,
    retry_on: Callable[[BaseException], bool] = is_transient,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn`` until it succeeds, backing off exponentially on transient errors.

    Args:
        fn: the zero-argument callable to run.
        attempts: total tries, at least 1.
        base_delay: delay before the second try, doubled each time (with jitter).
        max_delay: cap on one delay.
        retry_on: predicate choosing which exceptions are retried.
        sleep: injectable sleep, for tests.

    Returns:
        What ``fn`` returns.

    Raises:
        The last exception, when it is not transient or attempts run out.
    """
    if attempts < 1:
        raise ConfigError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(attempts):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts - 1 or not retry_on(exc):
                raise
            delay = min(max_delay, base_delay * (2**attempt)) * (0.5 + random.random() / 2)
            log.warning(
                "retrying in %.1f s after a transient error (try %d of %d): %s: %s",
                delay,
                attempt + 1,
                attempts,
                type(exc).__name__,
                exc,
            )
            sleep(delay)
    raise AssertionError("unreachable")
