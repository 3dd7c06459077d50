"""The on-disk layout of token shards, shared by the operator that writes them and the
readers that stream them.

A token column is an Arrow ``binary`` column: one value per document holding the
document's token ids as a raw little-endian array (``uint16`` when the vocabulary has at
most 65,536 ids, else ``uint32``), with the ``eos``/``bos`` ids the tokenizer appended
already in place. The field's metadata key ``shardwise.tokens`` holds JSON
(:class:`TokenInfo`: dtype, vocabulary size, eos and bos ids, tokenizer checksum).

In Parquet (written PLAIN, without dictionary or statistics for that column) a row group
of such a column is one page run of ``(length, bytes)`` pairs; Arrow reads it into a
binary array whose value buffer *is* the row group's documents' tokens back to back and
whose offsets are the document boundaries (in bytes). :func:`flat_tokens` turns that into
one numpy token array and int64 document offsets (in tokens) without touching the values
one by one: no nested-list decoding. A token shard stays an ordinary Parquet file, indexed
by row groups like any other and streamed from object storage the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from shardwise.errors import ConfigError, FormatError

__all__ = [
    "MAX_BINARY_BYTES",
    "TOKENS_KEY",
    "TokenInfo",
    "check_same_tokens",
    "check_vocab",
    "count_tokens",
    "flat_tokens",
    "token_array",
    "token_columns",
    "token_dtype",
]

TOKENS_KEY = b"shardwise.tokens"
_DTYPES = ("<u2", "<u4")
MAX_BINARY_BYTES = 2**31 - 1  # the bytes a ``binary`` array's 32-bit offsets reach


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest little-endian unsigned dtype holding ids ``0 .. vocab_size - 1``."""
    return np.dtype("<u2" if vocab_size <= 2**16 else "<u4")


@dataclass(frozen=True)
class TokenInfo:
    """What a token column holds.

    Attributes:
        dtype: numpy dtype string of one token id (``<u2`` or ``<u4``).
        vocab_size: ids are below this.
        eos_id: id appended to every document (None: none).
        bos_id: id prepended to every document (None: none).
        tokenizer: xxh64 of the tokenizer's JSON, to tell shards of different tokenizers.
    """

    dtype: str
    vocab_size: int
    eos_id: int | None = None
    bos_id: int | None = None
    tokenizer: str = ""

    def field(self, name: str) -> pa.Field:
        """The Arrow field of a token column called ``name``."""
        return pa.field(name, pa.binary(), metadata={TOKENS_KEY: json.dumps(asdict(self))})

    @classmethod
    def of(cls, field: pa.Field) -> TokenInfo | None:
        """The field's token description, or None for an ordinary column."""
        raw = (field.metadata or {}).get(TOKENS_KEY)
        if raw is None:
            return None
        try:
            info = cls(**json.loads(raw))
        except (ValueError, TypeError) as exc:
            raise FormatError(
                f"token column {field.name!r} has unreadable metadata: {exc}"
            ) from exc
        if info.dtype not in _DTYPES:
            raise FormatError(f"token column {field.name!r} has dtype {info.dtype!r}")
        _check_ids(field.name, info)
        return info


def _check_ids(name: str, info: TokenInfo) -> None:
    """The vocabulary fits the dtype, and the eos and bos are ids of it."""
    top = int(np.iinfo(np.dtype(info.dtype)).max) + 1
    ids = {"eos_id": info.eos_id, "bos_id": info.bos_id}
    vocab = info.vocab_size
    if isinstance(vocab, bool) or not isinstance(vocab, int) or not 0 < vocab <= top:
        raise FormatError(
            f"token column {name!r} says vocab_size={vocab!r}, which {info.dtype} ids "
            f"(below {top}) cannot hold"
        )
    for key, value in ids.items():
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < vocab
        ):
            raise FormatError(
                f"token column {name!r} says {key}={value!r}, not an id below its "
                f"vocab_size={vocab}"
            )


def check_vocab(
    tokens: np.ndarray,
    vocab_size: int,
    path: str | None,
    unit: int,
    offsets: np.ndarray | None = None,
) -> None:
    """Refuse a token id of ``tokens`` (unit ``unit`` of ``path``) not below ``vocab_size``
    (ids are unsigned: none is negative): one ``max`` over the unit, nothing when the dtype
    holds no larger id. An embedding lookup would fail on the device, or read another row.

    Raises:
        FormatError: naming the file, the unit, the document (with ``offsets``) and the id.
    """
    if vocab_size > np.iinfo(tokens.dtype).max or not len(tokens):
        return
    if int(tokens.max()) < vocab_size:
        return
    at = int(np.argmax(tokens >= vocab_size))
    where = f"token {at} of the unit"
    if offsets is not None:
        doc = int(np.searchsorted(offsets, at, side="right")) - 1
        where = f"token {at - int(offsets[doc])} of document {doc} of the unit"
    raise FormatError(
        f"token id {int(tokens[at])} ({where}) is not below the vocab_size={vocab_size} the "
        "column's metadata declares (shards of another tokenizer, or damaged?)",
        path,
        f"unit {unit}",
    )


def token_columns(schema: pa.Schema) -> dict[str, TokenInfo]:
    """The token columns of ``schema`` by name."""
    out = {}
    for field in schema:
        info = TokenInfo.of(field)
        if info is not None:
            out[field.name] = info
    return out


def _described(info: TokenInfo | None) -> str:
    if info is None:
        return "no token metadata"
    return (
        f"{info.dtype}, vocab_size={info.vocab_size}, eos_id={info.eos_id}, "
        f"bos_id={info.bos_id}, tokenizer {info.tokenizer!r}"
    )


def check_same_tokens(schemas: Sequence[pa.Schema], paths: Sequence[str]) -> None:
    """Refuse files of one dataset whose token columns were written otherwise (another
    tokenizer, dtype, eos or bos): a reader takes the first file's layout for all of them.

    Raises:
        FormatError: naming the first file that differs from the first one with the column.
    """
    first: dict[str, tuple[TokenInfo | None, str]] = {}
    names = {n for schema in schemas for n in token_columns(schema)}
    for schema, path in zip(schemas, paths):
        for name in names & set(schema.names):
            info = TokenInfo.of(schema.field(name))
            seen, where = first.setdefault(name, (info, path))
            if info != seen:
                raise FormatError(
                    f"column {name!r} holds tokens of another layout ({_described(info)}) "
                    f"than in {where} ({_described(seen)}); the files of one dataset need "
                    "one tokenizer and one eos/bos setting",
                    path,
                )


def token_array(flat: np.ndarray, offsets: np.ndarray) -> pa.BinaryArray:
    """A binary array of documents ``flat[offsets[i]:offsets[i + 1]]`` (no copy of ``flat``
    beyond Arrow's adoption of its buffer).

    Raises:
        ConfigError: the documents take more than :data:`MAX_BINARY_BYTES` (a binary
            array's offsets would overflow), naming the options that make batches smaller.
    """
    itemsize = flat.dtype.itemsize
    byte_offsets = np.asarray(offsets, dtype=np.int64) * itemsize
    if len(byte_offsets) and int(byte_offsets[-1]) > MAX_BINARY_BYTES:
        raise ConfigError(
            f"tokenize: a batch's tokens take {int(byte_offsets[-1]):,} bytes, more than the "
            f"{MAX_BINARY_BYTES:,} one token column of a batch holds (32-bit offsets); read "
            "the input in smaller batches: batch_rows= of read_parquet or read_webdataset, "
            "block_bytes= of read_jsonl"
        )
    byte_offsets = byte_offsets.astype(np.int32)
    data = np.ascontiguousarray(flat)
    return pa.BinaryArray.from_buffers(
        pa.binary(), len(offsets) - 1, [None, pa.py_buffer(byte_offsets), pa.py_buffer(data)]
    )


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The column's chunks as ``binary`` or ``large_binary`` arrays (a ``binary_view``
    one, which has no offsets, cast to ``large_binary``)."""
    chunks = list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]
    return [c.cast(pa.large_binary()) if pa.types.is_binary_view(c.type) else c for c in chunks]


def _ends(chunk: pa.Array) -> np.ndarray:
    """The chunk's ``len + 1`` value offsets in bytes (32-bit, or 64-bit for large binary)."""
    dt = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    size = np.dtype(dt).itemsize
    return np.frombuffer(chunk.buffers()[1], dt, len(chunk) + 1, chunk.offset * size)


def flat_tokens(
    column: pa.Array | pa.ChunkedArray, dtype: str | np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """A token column as one flat token array and ``len + 1`` int64 document offsets.

    A one-chunk column is viewed in place (the tokens are Arrow's value buffer); more
    chunks are joined into one copy.
    """
    dt = np.dtype(dtype)
    flats: list[np.ndarray] = []
    offsets, base = [np.zeros(1, np.int64)], 0
    for chunk in _chunks(column):
        if not len(chunk):
            continue
        if chunk.null_count:
            raise FormatError("a token column holds nulls")
        ends = _ends(chunk)
        lo, hi = int(ends[0]), int(ends[-1])
        if (hi - lo) % dt.itemsize:
            raise FormatError(f"a token column's bytes are no whole number of {dt} ids")
        if hi > lo:
            flats.append(np.frombuffer(chunk.buffers()[2], dt, (hi - lo) // dt.itemsize, lo))
        offsets.append((ends[1:].astype(np.int64) - lo) // dt.itemsize + base)
        base += (hi - lo) // dt.itemsize
    flat = flats[0] if len(flats) == 1 else np.concatenate(flats) if flats else np.empty(0, dt)
    return flat, np.concatenate(offsets)


def count_tokens(batch: pa.RecordBatch | pa.Table) -> int:
    """Tokens held by the token columns of ``batch`` (from the offsets only)."""
    total = 0
    for name, info in token_columns(batch.schema).items():
        size = np.dtype(info.dtype).itemsize
        for chunk in _chunks(batch.column(name)):
            if len(chunk):
                ends = _ends(chunk)
                total += int(ends[-1] - ends[0]) // size
    return total
