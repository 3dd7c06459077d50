"""Normalisation for shingling: the code-point classes and the splice of the Unicode
pieces back into the rows give what the regular expression gives on whole rows."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise.dedup.normalise as norm

# letters and digits of several scripts, marks, symbols, punctuation, spaces, and
# characters that NFKC or lower case change (ligatures, Kelvin sign, full-width forms)
_CHARS = list("aZ09 ,.-'\t\n") + [
    "é",
    "É",
    "ß",
    "ﬁ",
    "²",
    "½",
    "—",
    "“",
    "”",
    "\u00a0",
    "\u3000",
    "日本",
    "Ω",
    "\u0301",
    "\u0327",
    "\u1100",
    "\u1161",
    "\u212a",
    "€",
    "😀",
    "\U0001d400",
    "Ⅻ",
    "٣",
    "！",
    "＿",
    "\u200b",
    "\ufeff",
    "ǅ",
]
_REGEX = r"[^\x00-\x7f\pL\pN]+"


def _reference(arr: pa.Array) -> list[str]:
    return pc.replace_substring_regex(
        pc.utf8_lower(pc.utf8_normalize(pc.fill_null(arr, ""), "NFKC")), _REGEX, " "
    ).to_pylist()


@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(_CHARS), max_size=40).map("".join)),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_code_point_classes_equal_the_regex(texts: list[str | None], by_mask: bool) -> None:
    """Dropping runs of non-ASCII characters outside ``[\\pL\\pN]`` by code point, and
    splicing the pieces back slice by slice or by masks, equals the regex on whole rows."""
    arr = pa.array(texts, pa.string())
    saved = norm.SLICES_UP_TO
    norm.SLICES_UP_TO = -1 if by_mask else saved
    try:
        got = norm.normalise(arr).to_pylist()
    finally:
        norm.SLICES_UP_TO = saved
    assert got == _reference(arr)


def test_runs_across_rows_and_at_row_edges() -> None:
    """A dropped run at the end of one row and the start of the next is a space in each,
    and an empty row or a row of only such characters stays one of its own."""
    texts = ["ab“", "”cd", "", "——", "x—y—", "😀"]
    arr = pa.array(texts, pa.large_string())
    assert (
        norm.normalise(arr).to_pylist() == _reference(arr) == ["ab ", " cd", "", " ", "x y ", " "]
    )


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_many_pieces_take_the_mask_path(kind: pa.DataType) -> None:
    """Past SLICES_UP_TO pieces the bytes are copied by masks; the text is the same."""
    texts = [" ".join(["naïve “café”"] * 800), "plain ascii", None, "ǅemal Ⅻ ½"] * 3
    arr = pa.array(texts, kind)
    assert len(texts) * 800 > norm.SLICES_UP_TO
    assert norm.normalise(arr).to_pylist() == _reference(arr)
