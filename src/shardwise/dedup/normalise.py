"""Text normalisation for shingling: NFKC, lower case, and every run of non-ASCII
characters outside ``[\\pL\\pN]`` as one space, over whole Arrow batches.

ASCII text is only lower-cased (NFKC leaves it as it is), in one Arrow kernel over the
whole buffer; the Unicode work runs on the *pieces* of text around non-ASCII characters
alone (:func:`_non_ascii_pieces`), and its results are put back in place
(:func:`_splice`). The class of each non-ASCII character is looked up once per distinct
code point (:func:`_drop_non_word`), not by a regular expression: compiling one with
Unicode classes costs about 2 ms, once per batch, more than the work itself on text with
a few curly quotes.
"""

from __future__ import annotations

import functools
import unicodedata

import numpy as np
import pyarrow as pa

from shardwise.ops._compute import call, fill_null, utf8_normalize
from shardwise.ops._fast import _buffers, collapse_ascii_runs

__all__ = ["normalise", "normalise_chars"]

SLICES_UP_TO = 4096  # pieces per batch up to which the unchanged bytes are copied by slices


def normalise(texts: pa.Array) -> pa.Array:
    """NFKC and lower case; every run of non-ASCII characters outside ``[\\pL\\pN]`` also
    becomes one space. ASCII characters other than ``[0-9A-Za-z]`` are left for the word
    tokenizer, which treats every such byte as a separator (the same words as turning every
    run outside ``[\\pL\\pN]`` into a space, for a fraction of the work);
    :func:`normalise_chars` collapses them. Nulls become empty strings."""
    texts = fill_null(texts, "")
    if isinstance(texts, pa.ChunkedArray):
        texts = texts.combine_chunks()
    if texts.offset:
        texts = pa.concat_arrays([texts])
    low = call("ascii_lower", texts)  # only ASCII letters change, in every row
    offsets, data = _buffers(low)
    lo, hi = int(offsets[0]), int(offsets[-1])
    buf, offs = data[lo:hi], offsets - lo
    starts, ends = _non_ascii_pieces(buf, offs)
    if not len(starts):
        return low
    lengths = ends - starts
    piece_offsets = np.concatenate([[0], np.cumsum(lengths)])
    pieces = pa.Array.from_buffers(
        pa.large_string(),
        len(starts),
        [None, pa.py_buffer(piece_offsets), pa.py_buffer(buf[_ranges(starts, lengths)])],
    )
    done = _drop_non_word(call("utf8_lower", utf8_normalize(pieces, "NFKC")))
    return _splice(low.type, offs, buf, starts, ends, done)


def _non_ascii_pieces(buf: np.ndarray, offs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the byte ranges the Unicode kernels must see: each maximal run
    of non-ASCII bytes within a row, with the ASCII byte before it when the row has one (a
    combining mark composes with it under NFKC, ``e`` + U+0301 into ``é``). Anywhere
    before an ASCII character the text can be cut without changing what NFKC, lower case
    or the character classes make of it: no composition has an ASCII character second,
    and ASCII is never part of a multi-byte character."""
    at = np.flatnonzero(buf >= 128)
    if not len(at):
        return at, at
    row = np.searchsorted(offs, at, side="right") - 1
    first = np.ones(len(at), dtype=bool)  # the first byte of a run
    first[1:] = (np.diff(at) != 1) | (row[1:] != row[:-1])
    last = np.append(first[1:], True)
    starts = at[first]
    starts -= starts > offs[row[first]]  # the ASCII byte before, in the same row
    return starts.astype(np.int64), (at[last] + 1).astype(np.int64)


@functools.lru_cache(maxsize=1 << 16)
def _letter_or_digit(code: int) -> bool:
    """Whether the character ``code`` is in ``[\\pL\\pN]`` (general category L* or N*)."""
    return unicodedata.category(chr(code))[0] in "LN"


def _drop_non_word(text: pa.Array) -> pa.Array:
    """``text`` (a large string array without nulls) with every run of non-ASCII
    characters outside ``[\\pL\\pN]`` replaced by one space, in numpy over the code
    points; each distinct non-ASCII code point is classified once."""
    offsets, data = _buffers(text)
    codes = np.frombuffer(
        data[offsets[0] : offsets[-1]].tobytes().decode("utf-8").encode("utf-32-le"), np.uint32
    )
    rows = np.concatenate(
        [[0], np.cumsum(call("utf8_length", text).to_numpy(zero_copy_only=False))]
    ).astype(np.int64)
    drop = codes >= 128
    at = np.flatnonzero(drop)
    if len(at):
        distinct, which = np.unique(codes[at], return_inverse=True)
        keep_code = np.fromiter(
            map(_letter_or_digit, distinct.tolist()), dtype=bool, count=len(distinct)
        )
        drop[at] = ~keep_code[which]
    first = drop.copy()  # the first character of a dropped run (within its row) becomes a space
    first[1:] &= ~drop[:-1]
    inner = rows[1:-1][rows[1:-1] < len(codes)]
    first[inner] = drop[inner]
    keep = ~drop | first
    out = np.where(first, np.uint32(32), codes)[keep]
    kept = np.concatenate([[0], np.cumsum(keep)])[rows]
    width = 1 + (out >= 0x80).astype(np.int64) + (out >= 0x800) + (out >= 0x10000)  # UTF-8 bytes
    byte_offsets = np.concatenate([[0], np.cumsum(width)])[kept]
    encoded = np.frombuffer(out.tobytes().decode("utf-32-le").encode("utf-8"), np.uint8)
    return _string_array(pa.large_string(), byte_offsets, encoded)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, concatenated."""
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(starts - first, lengths) + np.arange(int(lengths.sum()))


def _inside(n: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A mask of length ``n``: True inside the ranges ``starts[i] .. starts[i] + lengths[i]``
    (work in proportion to their bytes, few next to ``n``)."""
    mask = np.zeros(n, dtype=bool)
    mask[_ranges(starts, lengths)] = True
    return mask


def _splice(
    kind: pa.DataType,
    offs: np.ndarray,
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    done: pa.Array,
) -> pa.Array:
    """The rows of ``buf`` (bytes, row offsets ``offs``) with the byte range ``starts[i] ..
    ends[i]`` replaced by ``done[i]``; ranges are sorted, disjoint and within rows. Up to
    :data:`SLICES_UP_TO` ranges the bytes are joined slice by slice, else the bytes
    outside the ranges are copied by a mask (no index per byte)."""
    done_offsets, done_data = _buffers(done)
    done_bytes = done_data[done_offsets[0] : done_offsets[-1]]
    done_offsets = done_offsets - done_offsets[0]
    grown = np.concatenate([[0], np.cumsum(np.diff(done_offsets) - (ends - starts))])
    if len(starts) <= SLICES_UP_TO:
        cuts = np.stack(
            [np.concatenate([[0], ends]), np.concatenate([starts, [len(buf)]])], axis=1
        ).tolist()
        made = np.stack([done_offsets[:-1], done_offsets[1:]], axis=1).tolist()
        parts = []
        for (a, b), (c, d) in zip(cuts, made):
            parts += [buf[a:b], done_bytes[c:d]]
        parts.append(buf[cuts[-1][0] : cuts[-1][1]])
        out = np.concatenate(parts)
    else:
        out = np.empty(len(buf) + int(grown[-1]), dtype=np.uint8)
        into = _inside(len(out), starts + grown[:-1], np.diff(done_offsets))
        out[into] = done_bytes
        out[~into] = buf[~_inside(len(buf), starts, ends - starts)]
    return _string_array(kind, offs + grown[np.searchsorted(starts, offs, side="left")], out)


def _string_array(kind: pa.DataType, offsets: np.ndarray, data: np.ndarray) -> pa.Array:
    """A string array without nulls (``large_string`` when the bytes need 64-bit offsets)."""
    if pa.types.is_large_string(kind) or int(offsets[-1]) >= 2**31:
        return pa.Array.from_buffers(
            pa.large_string(),
            len(offsets) - 1,
            [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(data)],
        )
    return pa.Array.from_buffers(
        pa.string(),
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
    )


def normalise_chars(texts: pa.Array) -> pa.Array:
    """NFKC, lower case, every run of characters outside ``[\\pL\\pN]`` as one space,
    trimmed (the text ``tokenization="char"`` shingles)."""
    return call("utf8_trim_whitespace", collapse_ascii_runs(normalise(texts), _ascii_non_alnum))


def _ascii_non_alnum(b: np.ndarray) -> np.ndarray:
    """ASCII bytes other than ``[0-9A-Za-z]`` (never a byte of a multi-byte character)."""
    low = b | 32  # folds A-Z onto a-z
    return (b < 128) & ~(((low >= 97) & (low <= 122)) | ((b >= 48) & (b <= 57)))
