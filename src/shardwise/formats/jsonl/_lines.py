"""Line-aligned streaming over byte ranges and compressed files, and record counting.

A *record* is a line holding anything but spaces, tabs and ``\\r``; blank lines are
not records. Both the counter and the parsers follow that rule, so an index's
counts always equal what a full read yields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import IO, Any

import pyarrow as pa

from shardwise.errors import FormatError
from shardwise.storage import open_input, transient_in_chain

_BLANK = re.compile(rb"[ \t\r]*\n")  # a blank line, matched where a line starts
# where a line that may be blank starts: regex's literal scan for the newline is about 15x
# faster than trying a pattern at every line's start
_MAYBE_BLANK = re.compile(rb"\n(?=[ \t\r\n])")
_SPACE = frozenset(b" \t\r\n")
COMPRESSION = {".gz": "gzip", ".zst": "zstd"}


def compression_of(path: str) -> str | None:
    """Codec name for a compressed JSONL path, else None."""
    for suffix, codec in COMPRESSION.items():
        if path.lower().endswith(suffix):
            return codec
    return None


# what a file that is no JSON text starts with (bytes at an offset), and what it is
_MAGIC = (
    (0, b"PAR1", "a Parquet file: pass format='parquet'"),
    (257, b"ustar\x00", "a tar file: pass format='webdataset'"),  # POSIX; a NUL is no JSON
    (257, b"ustar  \x00", "a tar file: pass format='webdataset'"),  # GNU
    (0, b"\x1f\x8b", "gzip-compressed, but its name does not end in .gz: rename it"),
    (0, b"\x28\xb5\x2f\xfd", "zstd-compressed, but its name does not end in .zst: rename it"),
)


def check_is_text(path: str, storage_options: dict[str, Any]) -> None:
    """Refuse a file that is plainly not JSON lines (a Parquet, tar or compressed file
    read with ``format="jsonl"``), whose lines would be counted as nonsense records.

    Raises:
        FormatError: naming the file and what it is instead.
    """
    if compression_of(path) is not None:
        return  # a compressed file that is not in its codec is refused when it is read
    with open_input(path, **storage_options) as f:
        head = f.read(512)
    for at, magic, what in _MAGIC:
        if head[at : at + len(magic)] == magic:
            raise FormatError(f"not JSON lines: this is {what}", path, "start of file")


def count_records(piece: bytes) -> tuple[int, int]:
    """Return ``(records, lines)`` in a piece that ends on a line boundary (or EOF)."""
    lines = piece.count(b"\n")
    blanks = _blank_lines(piece)
    if piece and not piece.endswith(b"\n"):
        lines += 1
        if not piece[piece.rfind(b"\n") + 1 :].strip(b" \t\r"):
            blanks += 1
    return lines - blanks, lines


def _blank_lines(piece: bytes) -> int:
    """The blank lines of ``piece`` that end with a newline."""
    first = 1 if piece[:1] and piece[0] in _SPACE and _BLANK.match(piece) else 0
    return first + sum(1 for m in _MAYBE_BLANK.finditer(piece) if _BLANK.match(piece, m.end()))


def _open_stream(path: str, start: int, storage_options: dict[str, Any]) -> IO[bytes]:
    f = open_input(path, **storage_options)
    codec = compression_of(path)
    if codec is not None:
        return pa.CompressedInputStream(pa.PythonFile(f, mode="r"), codec)
    if start:
        f.seek(start)
    return f


def iter_aligned(
    path: str,
    *,
    start: int = 0,
    end: int | None = None,
    block_bytes: int = 8 * 2**20,
    storage_options: dict[str, Any] | None = None,
    on_truncated: Callable[[FormatError], None] | None = None,
) -> Iterator[bytes]:
    """Yield pieces of ``[start, end)`` that each end on a line boundary.

    Memory stays at about two blocks plus the longest line. ``end=None`` reads to
    the end (the only choice for compressed files, which are read whole). A compressed
    file whose decompression fails is a :class:`FormatError` naming the line where it
    stopped, or, given ``on_truncated``, the error is handed to it and the pieces end
    there (the line cut by the damage is not yielded): the same place for every read
    with the same ``block_bytes``.
    """
    f = _open_stream(path, start, storage_options or {})
    codec = compression_of(path)
    lines = 0
    try:
        remaining = None if end is None else end - start
        carry = b""
        while remaining is None or remaining > 0:
            size = block_bytes if remaining is None else min(block_bytes, remaining)
            chunk, failed = _read(f, size, codec)
            if remaining is not None:
                remaining -= len(chunk)
            whole, carry = _split_after_last_line(carry + chunk)
            if whole:
                lines += whole.count(b"\n")
                yield whole
            if failed is not None:
                _truncated(path, codec, failed, lines, on_truncated)
                return
            if not chunk:
                break
        if carry:
            yield carry
    finally:
        f.close()


def _split_after_last_line(data: bytes) -> tuple[bytes, bytes]:
    """``data`` cut after its last newline: the whole lines, and the rest (carried on)."""
    cut = data.rfind(b"\n") + 1
    return data[:cut], data[cut:]


def _truncated(
    path: str,
    codec: str | None,
    failed: BaseException,
    lines: int,
    on_truncated: Callable[[FormatError], None] | None,
) -> None:
    """A decompression that failed after ``lines`` whole lines: raised, or handed to
    ``on_truncated``."""
    error = FormatError(
        f"cannot decompress {codec} data ({failed}): the file is truncated or is "
        f"not {codec}-compressed",
        path,
        f"line {lines + 1}",
    )
    if on_truncated is None:
        raise error from None
    on_truncated(error)


_STEP = 1 << 16  # compressed files are read in steps: a damaged one keeps what came before


def _read(f: IO[bytes], want: int, codec: str | None) -> tuple[bytes, BaseException | None]:
    """Up to ``want`` bytes; for a compressed file, what was decompressed before it
    failed and the failure (a transient storage error is raised as it is)."""
    if codec is None:
        return f.read(want), None
    parts: list[bytes] = []
    got = 0
    while got < want:
        try:
            part = f.read(min(_STEP, want - got))
        except (OSError, EOFError, ValueError, pa.ArrowException) as exc:
            if transient_in_chain(exc):
                raise
            return b"".join(parts), exc
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts), None


def split_ranges(
    path: str, size: int, unit_bytes: int, block_bytes: int, storage_options: dict[str, Any]
) -> Iterator[tuple[int, int, int, int]]:
    """Cut a file into line-aligned ranges of about ``unit_bytes``.

    Yields ``(start, end, records, first_line)`` per range, streaming the file once.
    """
    start = pos = records = 0
    line = 1  # 1-based number of the current range's first line
    lines_in_range = 0
    for piece in iter_aligned(path, block_bytes=block_bytes, storage_options=storage_options):
        while piece:
            room = unit_bytes - (pos - start)
            if len(piece) < room:
                head, piece = piece, b""
            else:
                nl = piece.find(b"\n", max(room - 1, 0))
                cut = len(piece) if nl < 0 else nl + 1
                head, piece = piece[:cut], piece[cut:]
            r, n = count_records(head)
            records += r
            lines_in_range += n
            pos += len(head)
            if pos - start >= unit_bytes:
                yield start, pos, records, line
                line += lines_in_range
                start, records, lines_in_range = pos, 0, 0
    if pos > start or start == 0:
        yield start, pos, records, line
