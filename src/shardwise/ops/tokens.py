"""The ``tokenize`` operator: text to token ids with a Hugging Face ``tokenizers`` JSON file.

The tokenizer is the user's own ``tokenizer.json`` (a local path or an fsspec URL); it is
read once per process and never downloaded from a hub. Encoding is batched in Rust
(``encode_batch``), which releases the GIL. The output column follows the token layout of
:mod:`shardwise._tokens`: one binary value per document, the ids as a little-endian
``uint16`` array when the vocabulary has at most 65,536 ids (else ``uint32``), with the
configured ``bos`` id first and ``eos`` id last. A null text is an empty document (it
still gets its ``bos``/``eos``).

YAML::

    process:
      - tokenize: {tokenizer: tok/tokenizer.json, column: text, eos: "<|endoftext|>"}
      - drop_columns: {columns: [text]}
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa
import xxhash

from shardwise._optional import require
from shardwise._tokens import TokenInfo, token_array, token_dtype
from shardwise.errors import ConfigError, FormatError

__all__ = ["load_tokenizer", "tokenize"]

# path -> (tokenizer, xxh64 of its JSON): one load per process
_LOADED: dict[str, tuple[Any, str]] = {}
# path -> the tokenizer's vocabulary size (its largest id + 1)
_SIZES: dict[str, int] = {}


def load_tokenizer(path: str) -> tuple[Any, str]:
    """The ``tokenizers.Tokenizer`` saved at ``path`` and the xxh64 of its JSON (cached).

    Raises:
        ConfigError: the file is missing or is no tokenizer.
    """
    if path not in _LOADED:
        tokenizers = require("tokenizers", "the tokenize operator")
        import fsspec

        try:
            with fsspec.open(path, "rb") as f:
                raw = f.read()
            tok = tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read tokenizer {path!r}: {exc}") from exc
        except Exception as exc:  # tokenizers raises its own Exception for a bad file
            raise ConfigError(f"{path!r} is no tokenizers JSON file: {exc}") from exc
        _LOADED[path] = (tok, xxhash.xxh64(raw).hexdigest())
    return _LOADED[path]


def _special_id(tok: Any, token: str | None, what: str, path: str) -> int | None:
    if token is None:
        return None
    tid = tok.token_to_id(token)
    if tid is None:
        raise ConfigError(f"{what} token {token!r} is not in the vocabulary of {path!r}")
    return int(tid)


def _vocab_size(tok: Any, path: str) -> int:
    """Ids the tokenizer gives are below this: its largest id + 1, which is more than its
    number of entries when the ids have gaps (cached per path)."""
    if path not in _SIZES:
        ids = tok.get_vocab(with_added_tokens=True).values()
        count = int(tok.get_vocab_size(with_added_tokens=True))
        _SIZES[path] = max(count, max(ids, default=-1) + 1)
    return _SIZES[path]


def token_info(tokenizer: str, eos: str | None = None, bos: str | None = None) -> TokenInfo:
    """The token layout ``tokenize`` writes with these arguments."""
    tok, digest = load_tokenizer(tokenizer)
    vocab = _vocab_size(tok, tokenizer)
    return TokenInfo(
        token_dtype(vocab).str,
        vocab,
        _special_id(tok, eos, "eos", tokenizer),
        _special_id(tok, bos, "bos", tokenizer),
        digest,
    )


def _encode(tok: Any, texts: list[str]) -> list[list[int]]:
    fast = getattr(tok, "encode_batch_fast", None)  # no character offsets: cheaper
    encodings = (fast or tok.encode_batch)(texts, add_special_tokens=False)
    return [e.ids for e in encodings]


def _framed(ids: list[list[int]], info: TokenInfo) -> tuple[np.ndarray, np.ndarray]:
    """The documents' ids with ``bos``/``eos`` placed, flat, and their offsets."""
    dt = np.dtype(info.dtype)
    lengths = np.fromiter((len(i) for i in ids), np.int64, len(ids))
    body = np.fromiter(chain.from_iterable(ids), np.int64, int(lengths.sum()))
    head, tail = int(info.bos_id is not None), int(info.eos_id is not None)
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(lengths + head + tail, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dt)
    if head:
        flat[offsets[:-1]] = info.bos_id
    if tail:
        flat[offsets[1:] - 1] = info.eos_id
    starts = np.repeat(offsets[:-1] + head - np.cumsum(lengths) + lengths, lengths)
    flat[starts + np.arange(len(body))] = body
    return flat, offsets


def tokenize(
    batch: pa.RecordBatch,
    *,
    tokenizer: str,
    column: str = "text",
    output: str = "tokens",
    eos: str | None = None,
    bos: str | None = None,
    count_column: str | None = "num_tokens",
) -> pa.RecordBatch:
    """Encode ``column`` with the tokenizer saved at ``tokenizer`` into token column ``output``.

    Args:
        batch: the rows.
        tokenizer: path or URL of a ``tokenizers`` JSON file (``Tokenizer.save``).
        column: the text column.
        output: the token column to add (replaced if it exists).
        eos: token appended to every document (e.g. ``"<|endoftext|>"``); None: none.
        bos: token prepended to every document; None: none.
        count_column: an int32 column of each document's token count, set too (None:
            not); token plans read it instead of the tokens.

    Returns:
        ``batch`` with ``output`` (see :mod:`shardwise._tokens` for its layout) and
        ``count_column`` set.
    """
    info = token_info(tokenizer, eos, bos)
    texts = _texts(batch, column)
    ids = _encode(load_tokenizer(tokenizer)[0], [t if t is not None else "" for t in texts])
    flat, offsets = _framed(ids, info)
    batch = _set(batch, info.field(output), token_array(flat, offsets))
    if count_column is not None:
        counts = pa.array(np.diff(offsets).astype(np.int32), pa.int32())
        batch = _set(batch, pa.field(count_column, pa.int32()), counts)
    return batch


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _texts(batch: pa.RecordBatch, column: str) -> list[str | None]:
    """The values of text column ``column``: plain, large, view or dictionary-encoded
    strings, or binary values of UTF-8 text (a tar shard's ``txt``). Anything else, which
    the tokenizer would refuse or, for lists of two strings, encode as a sentence pair, is
    refused.

    Raises:
        ConfigError: no such column, or one that holds no text.
        FormatError: binary values that are not UTF-8.
    """
    if column not in batch.schema.names:
        raise ConfigError(f"tokenize: no column {column!r} (columns: {batch.schema.names})")
    col, t = batch.column(column), batch.schema.field(column).type
    if pa.types.is_dictionary(t) and (_is_text(t.value_type) or _is_bytes(t.value_type)):
        col, t = col.dictionary_decode(), t.value_type
    if _is_bytes(t):
        try:
            col = col.cast(pa.large_string())
        except pa.ArrowInvalid as exc:
            raise FormatError(
                f"tokenize: column {column!r} holds bytes that are not UTF-8: {exc}"
            ) from exc
    elif not _is_text(t):
        raise ConfigError(f"tokenize: column {column!r} is {t}, not text")
    texts: list[str | None] = col.to_pylist()
    return texts


def _set(batch: pa.RecordBatch, field: pa.Field, values: pa.Array) -> pa.RecordBatch:
    i = batch.schema.get_field_index(field.name)
    if i >= 0:
        return batch.set_column(i, field, values)
    return batch.append_column(field, values)
