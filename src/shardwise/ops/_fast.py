"""Byte-level fast paths for the whitespace-heavy text kernels.

RE2 replacements with many matches per row (collapsing every whitespace run, counting
every word) cost far more than a few vectorised passes over the string data. For rows
that are pure ASCII the whitespace set of :data:`shardwise.ops.text.WS_RE` is exactly
``[\\t\\n\\f\\r ]``, so those rows are handled here with numpy on the raw UTF-8 buffer;
rows with other characters go through the regex path, and the two results are put back
in row order. The fast paths give results identical to the regex kernels (a property
test checks this on random text with every kind of Unicode space).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from shardwise.ops._compute import call, count_true, fill_null, filter_rows

__all__ = [
    "ascii_split",
    "collapse_ascii_nonalnum",
    "collapse_ascii_runs",
    "collapse_ascii_ws",
    "count_ascii_words",
]


def _buffers(col: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data bytes) of a string array with offset 0."""
    off_type = np.int64 if pa.types.is_large_string(col.type) else np.int32
    bufs = col.buffers()
    offsets = np.frombuffer(
        bufs[1], dtype=off_type, count=len(col) + 1, offset=col.offset * np.dtype(off_type).itemsize
    )
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets.astype(np.int64), data


def collapse_ascii_ws(col: pa.Array) -> pa.Array:
    """Every run of ASCII whitespace (``[\\t\\n\\f\\r ]``) becomes one space (no trimming)."""
    return collapse_ascii_runs(col, _is_ws)


def collapse_ascii_nonalnum(col: pa.Array) -> pa.Array:
    """Every run of characters other than ``[0-9A-Za-z]`` becomes one space (for ASCII rows
    these are exactly the characters outside ``[\\pL\\pN]``)."""
    return collapse_ascii_runs(col, _is_non_alnum)


def _is_ws(b: np.ndarray) -> np.ndarray:
    return (b == 32) | ((b <= 13) & (b >= 9) & (b != 11))


def _is_non_alnum(b: np.ndarray) -> np.ndarray:
    low = b | 32  # folds A-Z onto a-z
    return ~(((low >= 97) & (low <= 122)) | ((b >= 48) & (b <= 57)))


def collapse_ascii_runs(col: pa.Array, is_sep: Callable[[np.ndarray], np.ndarray]) -> pa.Array:
    """Each run of bytes where ``is_sep`` holds becomes one space. Works on any UTF-8 when
    ``is_sep`` only holds for ASCII bytes (they never occur inside a multi-byte character);
    nulls stay null."""
    if col.offset:
        col = pa.concat_arrays([col])
    validity = col.buffers()[0] if col.null_count else None
    offsets, data = _buffers(col)
    lo, hi = int(offsets[0]), int(offsets[-1])
    b = data[lo:hi]
    sep = is_sep(b)
    out = np.where(sep, np.uint8(32), b)
    # a separator byte is dropped when the byte before it, in the same row, is one too
    drop = np.flatnonzero(sep[1:] & sep[:-1]) + 1
    if len(drop):
        firsts = offsets[:-1] - lo
        drop = drop[~np.isin(drop, firsts)]
    if not len(drop):
        return pa.Array.from_buffers(
            col.type, len(col), [validity, _off(col, offsets - lo), pa.py_buffer(out)]
        )
    keep = np.ones(len(b), dtype=bool)
    keep[drop] = False
    new_offsets = (offsets - lo) - np.searchsorted(drop, offsets - lo)
    return pa.Array.from_buffers(
        col.type, len(col), [validity, _off(col, new_offsets), pa.py_buffer(out[keep])]
    )


def _off(col: pa.Array, offsets: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(
        offsets.astype(np.int64 if pa.types.is_large_string(col.type) else np.int32)
    )


def count_ascii_words(col: pa.Array) -> pa.Array:
    """Maximal runs of bytes other than ASCII whitespace per row (nulls count 0)."""
    if col.offset:
        col = pa.concat_arrays([col])
    offsets, data = _buffers(col)
    lo, hi = int(offsets[0]), int(offsets[-1])
    word = ~_is_ws(data[lo:hi])
    # a word starts at a word byte that follows a separator or begins its row
    prev = np.zeros(len(word), dtype=bool)
    prev[1:] = word[:-1]
    firsts = offsets[:-1] - lo
    prev[firsts[firsts < len(word)]] = False
    starts = np.flatnonzero(word & ~prev)
    n = np.diff(np.searchsorted(starts, offsets - lo))
    # the integer type pyarrow's count kernels give for this string type
    return pa.array(n, pa.int64() if pa.types.is_large_string(col.type) else pa.int32())


def ascii_split(
    col: pa.Array, fast: Callable[[pa.Array], pa.Array], slow: Callable[[pa.Array], pa.Array]
) -> pa.Array:
    """``fast`` on the ASCII rows of ``col`` and ``slow`` on the rest, back in row order.
    ``fast`` gets an array without nulls at offset 0; nulls go to ``slow``."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if len(col) == 0:
        return slow(col)
    ascii_rows = fill_null(call("string_is_ascii", col), False)
    n_ascii = count_true(ascii_rows)
    if n_ascii == 0:
        return slow(col)
    if n_ascii == len(col):
        return fast(pa.concat_arrays([col]) if col.offset else col)
    fast_part = fast(pa.concat_arrays([filter_rows(col, ascii_rows)]))
    slow_part = slow(filter_rows(col, call("invert", ascii_rows)))
    mask = ascii_rows.to_numpy(zero_copy_only=False)
    # position of each row in concat(fast_part, slow_part)
    where = np.empty(len(col), dtype=np.int64)
    where[mask] = np.arange(n_ascii)
    where[~mask] = n_ascii + np.arange(len(col) - n_ascii)
    return pa.concat_arrays([fast_part, slow_part]).take(pa.array(where))
