"""Vectorised shingling of whole Arrow batches.

Text is normalised (:mod:`shardwise.dedup.normalise`: NFKC, lower case, every run of
characters outside letters and digits a separator), cut
into word tokens (``tokenization="word"``) or characters (``"char"``), and every run of
``ngram`` consecutive tokens is hashed to 64 bits with a polynomial over per-token hashes,
in numpy over the whole batch. A document with fewer tokens than ``ngram`` becomes one
shingle of all its tokens; an empty document has none. MinHash signatures of the
shingles are in :mod:`shardwise.dedup.signatures`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardwise.dedup.normalise import normalise as _normalise
from shardwise.dedup.normalise import normalise_chars as _normalise_chars
from shardwise.dedup.sets import distinct
from shardwise.errors import ConfigError
from shardwise.ops._compute import call
from shardwise.ops._fast import _buffers

__all__ = ["doc_shingles", "jaccard"]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_POLY = np.uint64(0x100000001B3)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a bijective avalanche on uint64 arrays."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


# word bytes: ASCII letters and digits, and every byte of a multi-byte character (after
# _normalise only letters and digits are left outside ASCII)
_WORD_BYTE = np.zeros(256, dtype=bool)
_WORD_BYTE[48:58] = _WORD_BYTE[65:91] = _WORD_BYTE[97:123] = _WORD_BYTE[128:] = True
_CHUNK_SALT = np.uint64(0x9E3779B97F4A7C15)


def _word_bytes(buf: np.ndarray) -> np.ndarray:
    """``_WORD_BYTE[buf]`` by comparisons, which run several times faster than a table
    lookup per byte: ``[0-9A-Za-z]`` (``| 32`` folds ``A-Z`` onto ``a-z`` and nothing else
    onto it) and every byte from 128."""
    word = np.subtract(buf | np.uint8(32), np.uint8(97)) < np.uint8(26)
    word |= np.subtract(buf, np.uint8(48)) < np.uint8(10)
    word |= buf >= np.uint8(128)
    return word


def _word_bounds(buf: np.ndarray, offs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the words of ``buf`` (maximal runs of word bytes that do not
    cross a document's start, ``offs``): the places where word and non-word bytes
    alternate, found in one pass, and a cut wherever a word runs on into the next document."""
    n = len(buf)
    word = _word_bytes(buf)
    edge = np.empty(n + 1, dtype=bool)
    edge[0], edge[n] = word[0], word[-1]
    np.not_equal(word[1:], word[:-1], out=edge[1:n])
    at = np.flatnonzero(edge)  # start, end, start, end, ...
    inner = distinct(offs[(offs > 0) & (offs < n)])
    cut = inner[word[inner - 1] & word[inner]]
    if len(cut):  # an end and a start at each such document start
        at = np.insert(at, np.repeat(np.searchsorted(at, cut), 2), np.repeat(cut, 2))
    return at[0::2], at[1::2]


def _word_hashes(norm: pa.Array, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the words of every document (maximal runs of word bytes), concatenated,
    and per-document offsets. A word's hash depends only on its bytes and length
    (:func:`_word_values`, then a mix), computed per word, not per byte."""
    if norm.offset:
        norm = pa.concat_arrays([norm])
    offsets, data = _buffers(norm)
    buf = data[offsets[0] : offsets[-1]]
    offs = offsets - offsets[0]
    if len(buf) == 0:
        return np.zeros(0, np.uint64), np.zeros(len(norm) + 1, np.int64)
    starts, ends = _word_bounds(buf, offs)
    lengths = ends - starts
    with np.errstate(over="ignore"):
        salt = np.uint64((seed * 0x9E3779B97F4A7C15 + 0x574F5244) % 2**64)
        out = _mix(
            _word_values(buf, starts, lengths) ^ salt ^ (lengths.astype(np.uint64) << np.uint64(56))
        )
    return out, np.searchsorted(starts, offs).astype(np.int64)


def _word_values(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A 64-bit value of each word's bytes: its first 8 bytes as a little-endian integer
    (one unaligned load; the bytes past the word shifted out), XOR the mix of each further
    8-byte chunk plus its chunk number. Words of up to 8 bytes (most) take one load and
    never collide; longer ones one more load and mix per 8 bytes, all words at once. The
    loads are gathered by indexing, not ``np.take``, which first copies its strided source
    into a contiguous array (8 bytes per byte of text)."""
    n = len(buf)
    padded = np.zeros(n + 8, dtype=np.uint8)
    padded[:n] = buf
    loads = np.ndarray(
        (n + 1,), dtype="<u8", buffer=padded, strides=(1,)
    )  # loads[i]: bytes i .. i + 7
    out = loads[starts]
    past = (64 - 8 * np.minimum(lengths, 8)).astype(
        np.uint64
    )  # bits of the bytes past a short word
    out <<= past
    out >>= past
    longer = np.flatnonzero(lengths > 8)
    if len(longer):
        extra = (lengths[longer] - 1) // 8  # chunks after the first
        first = np.cumsum(extra) - extra
        word = np.repeat(longer, extra)
        chunk = np.arange(int(extra.sum())) - np.repeat(first, extra) + 1
        at = starts[word] + 8 * chunk
        past = (64 - 8 * np.minimum(lengths[word] - 8 * chunk, 8)).astype(np.uint64)
        values = (loads[at] << past) >> past
        with np.errstate(over="ignore"):
            values = _mix(values + chunk.astype(np.uint64) * _CHUNK_SALT)
        out[longer] ^= np.bitwise_xor.reduceat(values, first)
    return out.astype(np.uint64, copy=False)


def _tokens(texts: pa.Array, tokenization: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-token 64-bit hashes (all documents concatenated) and per-document offsets."""
    if tokenization == "word":
        return _word_hashes(_normalise(texts), seed)
    if tokenization == "char":
        norm = _normalise_chars(texts)
        lengths = call("utf8_length", norm).to_numpy(zero_copy_only=False).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        joined = "".join(norm.to_pylist())
        codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
        return _mix(codes + np.uint64(seed)), offsets
    raise ConfigError(f"tokenization must be 'word' or 'char', got {tokenization!r}")


def doc_shingles(
    texts: pa.Array,
    *,
    tokenization: str = "word",
    ngram: int = 5,
    seed: int = 0,
    unique: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(shingles, offsets)``: 64-bit shingle hashes of every document, concatenated,
    and ``offsets`` (length ``n_docs + 1``) delimiting each document's. With ``unique``
    each document's are sorted and unique (its shingle set); without, they come in text
    order with repeats (enough for MinHash, and no sort)."""
    if ngram < 1:
        raise ConfigError(f"ngram must be >= 1, got {ngram}")
    tok, off = _tokens(texts, tokenization, seed)
    sh, counts = _ngram_hashes(tok, off, ngram)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    if not unique:
        return sh, offsets
    sh_doc = np.repeat(np.arange(len(counts)), counts)
    order = np.lexsort((sh, sh_doc))
    sh, sh_doc = sh[order], sh_doc[order]
    keep = np.ones(len(sh), dtype=bool)
    keep[1:] = (sh[1:] != sh[:-1]) | (sh_doc[1:] != sh_doc[:-1])
    kept = np.concatenate([[0], np.cumsum(keep)])
    return sh[keep], kept[offsets].astype(np.int64)


def _ngram_hashes(tok: np.ndarray, off: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """The hash of every run of ``ngram`` tokens within a document, in text order, and the
    number per document; a document of 1 to ``ngram - 1`` tokens has one shingle of all
    of them, in its place. A rolling polynomial over the whole token array (wrapping
    uint64 arithmetic); the runs that would cross a document's end are left out by
    marking the last ``ngram - 1`` places of each document (work per document, not per
    token)."""
    lengths = np.diff(off)
    n = len(tok)
    g = tok.copy()
    for k in range(
        1, min(ngram, n + 1)
    ):  # g[i] = poly(tok[i], ..., tok[i + k]); the tail pads with 0
        g[: n - k] *= _POLY
        g[: n - k] += tok[k:]
        g[n - k :] *= _POLY
    starts_one = np.ones(n, dtype=bool)
    for j in range(1, ngram):
        last = off[1:] - j
        starts_one[last[last >= off[:-1]]] = False
    sh = _mix(g[starts_one])
    counts = np.where(lengths >= ngram, lengths - ngram + 1, lengths > 0).astype(np.int64)
    short = np.flatnonzero((lengths > 0) & (lengths < ngram))
    if not len(short):
        return sh, counts
    extra = np.zeros(len(short), dtype=np.uint64)
    for k in range(ngram - 1):  # the polynomial over all of each short document's tokens
        has = lengths[short] > k
        extra[has] = extra[has] * _POLY + tok[off[short[has]] + k]
    own = np.ones(len(sh) + len(short), dtype=bool)  # False: a short document's one place
    own[(np.cumsum(counts) - counts)[short]] = False
    out = np.empty(len(own), dtype=np.uint64)
    out[own] = sh
    out[~own] = _mix(extra ^ np.uint64(0x5348))
    return out, counts


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted unique shingle arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (len(a) + len(b) - inter)
