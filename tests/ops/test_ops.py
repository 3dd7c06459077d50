"""Operators on edge cases: empty strings, nulls, unicode, huge rows, bad arguments."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import ConfigError
from shardwise.ops import get_op, known_ops
from shardwise.ops.exact import first_occurrences, normalized_keys

TEXTS = [
    "",
    None,
    "Hello   World",
    "ＨＥＬＬＯ　world",
    "visit https://example.com/x?y=1 now",
    "<p>a &amp; b</p>",
    "12345 67",
    "x" * 1_000_000,
]


def _batch(texts: list[str | None] = TEXTS) -> pa.RecordBatch:
    return pa.record_batch({"text": pa.array(texts, pa.string()), "n": list(range(len(texts)))})


def _mask(name: str, **kw: object) -> list[bool]:
    mask, reason = get_op(name, **kw).mask(_batch())
    assert isinstance(reason, str) and reason
    return mask.to_pylist()


def test_normalize_nfkc_lower_whitespace_keeps_nulls() -> None:
    out = get_op("normalize_text", lowercase=True).map(_batch()).column("text").to_pylist()
    assert out[0] == "" and out[1] is None
    assert out[2] == "hello world"
    assert out[3] == "hello world"  # full-width letters and ideographic space fold under NFKC
    assert len(out[7]) == 1_000_000


def test_strip_urls_and_html() -> None:
    b = get_op("strip_urls").map(_batch())
    assert b.column("text")[4].as_py() == "visit  now"
    assert b.column("text")[1].as_py() is None
    h = get_op("strip_html").map(_batch())
    assert h.column("text")[5].as_py().split() == ["a", "&", "b"]


def test_length_and_word_count_filters_treat_null_as_empty() -> None:
    assert _mask("length_filter", min=1) == [False, False, True, True, True, True, True, True]
    assert _mask("length_filter", max=100) == [True, True, True, True, True, True, True, False]
    assert _mask("word_count_filter", min=2, max=3) == [
        False,
        False,
        True,
        True,
        True,
        True,
        True,
        False,
    ]


def test_char_ratio_filters() -> None:
    assert _mask("char_ratio_filter", kind="digits", min=0.5) == [
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        False,
    ]
    upper = _mask("char_ratio_filter", kind="uppercase", min=0.4)
    assert upper[3] is True and upper[2] is False
    with pytest.raises(ConfigError, match="kind must be one of"):
        get_op("char_ratio_filter", kind="vowels").mask(_batch())


def test_regex_filter_and_exclude() -> None:
    assert _mask("regex_filter", pattern=r"\d{3}") == [
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        False,
    ]
    assert _mask("regex_filter", pattern=r"\d{3}", exclude=True)[6] is False


def test_repetition_filter() -> None:
    texts = [
        "line a\nline a\nline a\nline b",
        "one two three four five six seven eight nine ten",
        "the cat sat the cat sat the cat sat on a mat",
        "",
        None,
    ]
    mask, _ = get_op("repetition_filter").mask(_batch(texts))
    assert mask.to_pylist() == [False, True, False, True, True]


def test_column_ops() -> None:
    b = _batch()
    assert get_op("select_columns", columns=["n"]).map(b).schema.names == ["n"]
    assert get_op("drop_columns", columns=["n"]).map(b).schema.names == ["text"]
    assert get_op("rename_columns", mapping={"text": "body"}).map(b).schema.names == ["body", "n"]
    with pytest.raises(ConfigError, match="no column 'nope'"):
        get_op("select_columns", columns=["nope"]).map(b)


def test_bad_names_and_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown operator 'normalise'.*normalize_text"):
        get_op("normalise")
    with pytest.raises(ConfigError, match="has no argument 'mni'"):
        get_op("word_count_filter", mni=3)
    with pytest.raises(ConfigError, match="needs argument 'pattern'"):
        get_op("regex_filter")
    with pytest.raises(ConfigError, match="not text"):
        get_op("word_count_filter", column="n").mask(_batch())
    assert known_ops()["exact_dedup"] == "dedup"


def test_exact_keys_normalise_and_first_occurrence_wins() -> None:
    keys = normalized_keys(pa.array(["A  b", "a b", None, "", "c"]))
    assert (keys[0] == keys[1]).all() and (keys[2] == keys[3]).all()
    assert not (keys[0] == keys[4]).all()
    raw = normalized_keys(pa.array(["A  b", "a b"]), normalize=False)
    assert not (raw[0] == raw[1]).all()
    masks = first_occurrences([keys[:2], np.zeros((0, 2), np.uint64), keys[2:]])
    assert [m.tolist() for m in masks] == [[True, False], [], [True, False, True]]


_ALPHABET = [
    "a",
    "B",
    "z",
    "0",
    "9",
    " ",
    "  ",
    "\t",
    "\n",
    "\r",
    "\f",
    "\v",
    "\x1c",
    "\x85",
    "\u00a0",
    "\u1680",
    "\u2003",
    "\u180e",
    "\u200b",
    "\u2028",
    "\u2029",
    "\u202f",
    "\u3000",
    "é",
    "Ａ",
    "ﬁ",
    ".",
    "-",
    "_",
    "'",
    "日本",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(_ALPHABET), max_size=12).map("".join)),
        max_size=30,
    ),
    st.integers(0, 3),
    st.sampled_from([pa.string(), pa.large_string()]),
)
def test_fast_paths_match_the_regex_kernels(
    texts: list[str | None], cut: int, typ: pa.DataType
) -> None:
    """The byte-level ASCII paths give exactly what the RE2 kernels give, in row order,
    with nulls, empty rows, every Unicode space, and sliced (offset) arrays."""
    import pyarrow.compute as pc

    from shardwise.dedup.shingles import _normalise_chars
    from shardwise.ops.text import (
        WORD_RE,
        WS_RE,
        collapse_whitespace,
        unicode_normalize,
        word_counts,
    )

    col = pa.array(["pad"] * cut + texts, typ).slice(cut)
    assert (
        collapse_whitespace(col).to_pylist()
        == pc.utf8_trim_whitespace(pc.replace_substring_regex(col, WS_RE, " ")).to_pylist()
    )
    assert (
        word_counts(col).to_pylist()
        == pc.count_substring_regex(pc.fill_null(col, ""), WORD_RE).to_pylist()
    )
    assert unicode_normalize(col).to_pylist() == pc.utf8_normalize(col, "NFKC").to_pylist()
    slow = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(
            pc.utf8_lower(pc.utf8_normalize(pc.fill_null(col, ""), "NFKC")), r"[^\pL\pN]+", " "
        )
    )
    assert _normalise_chars(col).to_pylist() == slow.to_pylist()


def test_a_filter_must_return_booleans() -> None:
    """An Arrow array of numbers (or anything else that is no mask) is refused naming the
    filter, as a ConfigError (it was Arrow's own error); booleans in any form are taken,
    and numpy's numbers as numpy casts them."""
    from shardwise.ops.operators import make_op

    batch = pa.record_batch({"x": [1, 2, 3]})
    goods = [[True, False, True], np.array([1, 0, 1]), pa.array([True, False, None])]
    for good, last in zip(goods, (True, True, False)):  # a null drops the row
        op = make_op(lambda b, m=good: m, "filter", "keep", {})
        assert op.mask(batch)[0].to_pylist() == [True, False, last]
    for bad in (pa.array([1, 0, 1]), ["a", "b", "c"]):
        op = make_op(lambda b, m=bad: m, "filter", "keep", {})
        with pytest.raises(ConfigError, match="filter 'keep' returned"):
            op.mask(batch)
