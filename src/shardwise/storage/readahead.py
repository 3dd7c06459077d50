"""A remote file read from start to end in large blocks, several fetched at once.

A reader that walks a whole object (a tar's headers, one every member) through an fsspec
file waits for one ranged GET at a time, each as large as the file's block size. Opened
with :func:`open_sequential`, a remote file is fetched in ``block``-sized ranges with up
to ``ahead`` of them in flight beyond the one being read, so the download runs at the
store's pace while the reader parses; blocks behind the reader are dropped (a seek back
into one fetches it again). Local files and files served from a node cache's entries
are opened as :func:`~shardwise.storage.paths.open_input` opens them.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import IO, Any

from shardwise.storage.overlay import overlay_for
from shardwise.storage.paths import _protocol, open_input, resolve
from shardwise.storage.rawfile import SizedRawFile
from shardwise.storage.refusals import named
from shardwise.storage.retry import with_retries

__all__ = ["BLOCK", "ReadAhead", "open_sequential", "read_locally"]

BLOCK = 16 * 2**20
AHEAD = 4


def read_locally(url: str) -> bool:
    """Whether reads of ``url`` come from this machine: a local or in-memory file, or one a
    node cache serves from its entries (seeking about is cheap; no request per seek)."""
    return _protocol(url) in ("file", "memory") or overlay_for(url) is not None


def open_sequential(
    url: str,
    size: int | None = None,
    *,
    block: int | None = None,
    ahead: int | None = None,
    **options: Any,
) -> IO[bytes]:
    """Open ``url`` for a read from start to end: a remote file as a :class:`ReadAhead`
    (``size`` saves asking for it; ``block`` and ``ahead`` default to the module's
    ``BLOCK`` and ``AHEAD``), anything else as ``open_input`` does."""
    if read_locally(url):
        return open_input(url, **options)
    fs, path = resolve(url, **options)
    if size is None:
        with named(url):
            size = int(with_retries(partial(fs.size, path)))

    def fetch(start: int, end: int) -> bytes:
        with named(url):
            return bytes(with_retries(partial(fs.cat_file, path, start=start, end=end)))

    return ReadAhead(  # type: ignore[return-value]
        fetch, size, block=block or BLOCK, ahead=AHEAD if ahead is None else ahead
    )


class ReadAhead(SizedRawFile):
    """A seekable binary file over ``fetch(start, end)``, read in blocks fetched ahead.

    Args:
        fetch: returns the bytes ``[start, end)`` of the file.
        size: the file's size in bytes.
        block: bytes per fetch.
        ahead: blocks fetched beyond the one being read.
    """

    def __init__(
        self, fetch: Callable[[int, int], bytes], size: int, block: int = BLOCK, ahead: int = AHEAD
    ) -> None:
        super().__init__(size)
        self._fetch, self._block, self._ahead = fetch, block, ahead
        self._blocks: dict[int, Future[bytes]] = {}
        self._pool = ThreadPoolExecutor(max(1, ahead), thread_name_prefix="shardwise-readahead")

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` from the current position (short only at the end of the file)."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            index, at = divmod(self._pos, self._block)
            data = self._get(index)
            n = min(len(view) - done, len(data) - at)
            if n <= 0:
                break
            view[done : done + n] = data[at : at + n]
            done += n
            self._pos += n
        return done

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = max(0, self._size - self._pos)
        buf = bytearray(min(size, max(0, self._size - self._pos)))
        return bytes(buf[: self.readinto(buf)])

    def close(self) -> None:
        if not self.closed:
            for fut in self._blocks.values():
                fut.cancel()
            self._blocks.clear()
            self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()

    def _get(self, index: int) -> bytes:
        """Block ``index``, with the next ``ahead`` requested; blocks behind dropped."""
        last = (self._size - 1) // self._block
        for i in range(index, min(index + self._ahead, last) + 1):
            if i not in self._blocks:
                start = i * self._block
                end = min(start + self._block, self._size)
                self._blocks[i] = self._pool.submit(self._fetch, start, end)
        for i in [i for i in self._blocks if i < index]:
            self._blocks.pop(i).cancel()
        return self._blocks[index].result()
