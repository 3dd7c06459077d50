"""The tokenize operator and the token layout: ids, eos/bos, dtype, decoding, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _corpus import bbc_texts
from _tokenizer import BOS, EOS, train_bpe
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import ConfigError, FormatError
from shardwise._tokens import (
    TokenInfo,
    count_tokens,
    flat_tokens,
    token_array,
    token_columns,
    token_dtype,
)
from shardwise.ops import get_op, known_ops
from shardwise.ops.tokens import load_tokenizer, tokenize


@pytest.fixture(scope="module")
def bpe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return train_bpe(tmp_path_factory.mktemp("tok") / "tokenizer.json")


def _docs(batch: pa.RecordBatch, column: str = "tokens") -> list[np.ndarray]:
    info = TokenInfo.of(batch.schema.field(column))
    assert info is not None
    flat, off = flat_tokens(batch.column(column), info.dtype)
    return [flat[off[i] : off[i + 1]] for i in range(len(off) - 1)]


def test_registered_by_name() -> None:
    assert known_ops()["tokenize"] == "map"


def test_tokens_decode_to_the_text_with_eos_and_bos(bpe: str) -> None:
    texts = [*bbc_texts()[:40], "", None, "é 日本 \n\t x"]
    out = tokenize(pa.record_batch({"text": texts}), tokenizer=bpe, eos=EOS, bos=BOS)
    info = token_columns(out.schema)["tokens"]
    tok = load_tokenizer(bpe)[0]
    assert info.dtype == "<u2" and info.vocab_size == 2000
    assert (info.eos_id, info.bos_id) == (tok.token_to_id(EOS), tok.token_to_id(BOS))
    assert out.column("text").to_pylist() == texts  # the text stays
    docs = _docs(out)
    for text, ids in zip(texts, docs):
        assert ids.dtype == np.dtype("<u2")
        assert ids[0] == info.bos_id and ids[-1] == info.eos_id
        assert tok.decode(ids[1:-1].tolist()) == (text or "")
        assert list(ids[1:-1]) == tok.encode(text or "", add_special_tokens=False).ids
    assert count_tokens(out) == sum(len(d) for d in docs)
    assert out.column("num_tokens").to_pylist() == [len(d) for d in docs]


def test_without_eos_the_ids_are_the_encoding(bpe: str) -> None:
    out = tokenize(pa.record_batch({"body": ["a b", "c"]}), tokenizer=bpe, column="body")
    tok = load_tokenizer(bpe)[0]
    assert [list(d) for d in _docs(out)] == [tok.encode("a b").ids, tok.encode("c").ids]
    info = token_columns(out.schema)["tokens"]
    assert info.eos_id is None and info.bos_id is None


def test_large_vocabulary_takes_uint32(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70_000)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "wl.json"))
    out = tokenize(
        pa.record_batch({"text": ["w69999 w3", "w65536"]}),
        tokenizer=str(tmp_path / "wl.json"),
        eos="w1",
    )
    assert token_columns(out.schema)["tokens"].dtype == "<u4"
    assert [list(d) for d in _docs(out)] == [[69999, 3, 1], [65536, 1]]


def test_a_vocabulary_with_gaps_is_sized_by_its_largest_id(tmp_path: Path) -> None:
    """Ids need not be contiguous: a vocabulary of 5 entries with id 70000 holds ids up
    to 70000, which uint16 would wrap to other tokens."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"unk": 0, "a": 1, "b": 70_000, "c": 65_535, "d": 65_536}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="unk"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<eos>"])
    path = str(tmp_path / "gaps.json")
    tok.save(path)
    out = tokenize(pa.record_batch({"text": ["a b c d", ""]}), tokenizer=path, eos="<eos>")
    info = token_columns(out.schema)["tokens"]
    assert (info.dtype, info.vocab_size) == ("<u4", 70_001)
    eos = tok.token_to_id("<eos>")
    assert [list(d) for d in _docs(out)] == [[1, 70_000, 65_535, 65_536, eos], [eos]]


def test_bad_arguments_are_config_errors(bpe: str, tmp_path: Path) -> None:
    batch = pa.record_batch({"text": ["x"]})
    with pytest.raises(ConfigError, match="not in the vocabulary"):
        tokenize(batch, tokenizer=bpe, eos="<nope>")
    with pytest.raises(ConfigError, match="no column"):
        tokenize(batch, tokenizer=bpe, column="body")
    with pytest.raises(ConfigError, match="cannot read tokenizer"):
        tokenize(batch, tokenizer=str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(ConfigError, match="no tokenizers JSON"):
        tokenize(batch, tokenizer=str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match="needs argument 'tokenizer'"):
        get_op("tokenize")


def test_only_text_columns_are_tokenized(bpe: str) -> None:
    """Every kind of string column gives the plain one's tokens, UTF-8 bytes too; a column
    of anything else is refused, above all lists of two strings, which the tokenizer would
    encode as a sentence pair without a word."""
    texts = ["a b", None, "c é"]
    want = [
        list(d) for d in _docs(tokenize(pa.record_batch({"t": texts}), tokenizer=bpe, column="t"))
    ]
    kinds = [
        pa.array(texts, pa.large_string()),
        pa.array(texts, pa.string_view()),
        pa.array(texts).dictionary_encode(),
        pa.array([t.encode() if t else None for t in texts], pa.binary()),
        pa.array([t.encode() if t else None for t in texts], pa.large_binary()),
    ]
    for col in kinds:
        out = tokenize(pa.record_batch({"t": col}), tokenizer=bpe, column="t")
        assert [list(d) for d in _docs(out)] == want, col.type
    for bad in (pa.array([7, 8]), pa.array([["a", "b"]]), pa.array([True])):
        with pytest.raises(ConfigError, match=f"column 't' is {bad.type}, not text"):
            tokenize(pa.record_batch({"t": bad}), tokenizer=bpe, column="t")
    with pytest.raises(FormatError, match="not UTF-8"):
        tokenize(pa.record_batch({"t": pa.array([b"\xff"])}), tokenizer=bpe, column="t")


def test_dtype_boundary() -> None:
    assert token_dtype(65_536) == np.dtype("<u2")
    assert token_dtype(65_537) == np.dtype("<u4")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=7), max_size=9),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_layout_round_trips_through_slices_and_chunks(
    docs: list[list[int]], lo: int, cut: int
) -> None:
    flat = np.array([t for d in docs for t in d], "<u2")
    off = np.cumsum([0, *map(len, docs)])
    arr = token_array(flat, off)
    lo = min(lo, len(docs))
    part = arr.slice(lo)
    chunked = pa.chunked_array([part.slice(0, cut), part.slice(cut)], pa.binary())
    for column in (part, chunked):
        got, got_off = flat_tokens(column, "<u2")
        assert got_off[0] == 0 and len(got_off) == len(docs) - lo + 1
        assert [list(got[a:b]) for a, b in zip(got_off[:-1], got_off[1:])] == docs[lo:]


@pytest.mark.parametrize("kind", [pa.large_binary(), pa.binary_view()])
def test_large_and_view_binary_token_columns_give_the_same_tokens(kind: pa.DataType) -> None:
    """A token column another writer stored as ``large_binary`` (64-bit offsets) or read
    as ``binary_view`` is read by its own offsets, not as 32-bit ones."""
    docs = [[1, 2], [], [3], [65_535, 4, 5]]
    flat = np.array([t for d in docs for t in d], "<u2")
    arr = token_array(flat, np.cumsum([0, *map(len, docs)])).cast(kind)
    chunked = pa.chunked_array([arr.slice(0, 1), arr.slice(1)], kind)
    for column in (arr, arr.slice(1), chunked):
        got, off = flat_tokens(column, "<u2")
        want = docs[len(docs) - len(column) :]
        assert [list(got[a:b]) for a, b in zip(off[:-1], off[1:])] == want
    field = TokenInfo("<u2", 65_536).field("tokens").with_type(kind)
    assert count_tokens(pa.table([chunked], schema=pa.schema([field]))) == 6


@pytest.mark.parametrize(
    ("meta", "says"),
    [
        ({"dtype": "<u2", "vocab_size": 100_000}, "vocab_size=100000, which <u2 ids"),
        ({"dtype": "<u2", "vocab_size": 0}, "vocab_size=0"),
        ({"dtype": "<u2", "vocab_size": 2000, "eos_id": 10**9}, "eos_id=1000000000, not an id"),
        ({"dtype": "<u4", "vocab_size": 2000, "bos_id": 2000}, "bos_id=2000, not an id"),
        ({"dtype": "<u2", "vocab_size": 2000, "eos_id": True}, "eos_id=True"),
    ],
)
def test_token_metadata_with_ids_the_dtype_cannot_hold_is_refused(
    meta: dict[str, Any], says: str
) -> None:
    field = pa.field("t", pa.binary(), metadata={b"shardwise.tokens": json.dumps(meta).encode()})
    with pytest.raises(FormatError, match=f"token column 't' says {re.escape(says)}"):
        TokenInfo.of(field)
    ok = {"dtype": "<u2", "vocab_size": 65_536, "eos_id": 65_535}
    good = pa.field("t", pa.binary(), metadata={b"shardwise.tokens": json.dumps(ok).encode()})
    assert TokenInfo.of(good) == TokenInfo("<u2", 65_536, 65_535)


def test_a_batch_of_tokens_over_2_gib_is_refused_naming_what_to_change() -> None:
    """Over 2 GiB of token bytes, the 32-bit offsets overflowed into Arrow's "Negative
    offsets in binary array"; now a ConfigError says how to make batches smaller (the
    array is allocated lazily: no page of it is touched)."""
    flat = np.zeros(2**30 + 8, "<u2")
    with pytest.raises(ConfigError, match="smaller batches: batch_rows= of read_parquet"):
        token_array(flat, np.array([0, 2**29, len(flat)]))
    edge = token_array(flat[: 2**30 - 1], np.array([0, 2**30 - 1]))  # 2**31 - 2 bytes fit
    assert len(edge) == 1 and pc.binary_length(edge)[0].as_py() == 2**31 - 2
