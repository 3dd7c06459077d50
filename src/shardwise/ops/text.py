"""Text operators, vectorised with ``pyarrow.compute`` (RE2 regexes) where possible.

Nulls are treated as empty strings by filters, and stay null through mappers.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError
from shardwise.ops._compute import text_column as _text
from shardwise.ops._fast import ascii_split, collapse_ascii_ws, count_ascii_words

__all__ = [
    "char_ratio_filter",
    "length_filter",
    "normalize_text",
    "regex_filter",
    "repetition_filter",
    "strip_html",
    "strip_urls",
    "word_count_filter",
]

# RE2 classes are ASCII-only: \s misses U+00A0, U+3000 and the other Unicode spaces
WS_RE = r"[\s\p{Z}]+"
WORD_RE = r"[^\s\p{Z}]+"
# the members of \p{Z} outside ASCII (RE2's \s is [\t\n\f\r ])
UNICODE_SPACE_RE = r"[\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]"
URL_RE = r"(?i)\b(?:https?://|www\.)[^\s<>\"']+"
TAG_RE = r"<[^<>]{0,1000}>"
_ENTITIES = {
    "&nbsp;": " ",
    "&lt;": "<",
    "&gt;": ">",
    "&quot;": '"',
    "&#39;": "'",
    "&apos;": "'",
    "&amp;": "&",
}


def _set(batch: pa.RecordBatch, column: str, values: pa.Array) -> pa.RecordBatch:
    i = batch.schema.get_field_index(column)
    return batch.set_column(i, pa.field(column, values.type), values)


def normalize_text(
    batch: pa.RecordBatch,
    *,
    column: str = "text",
    unicode: str | None = "NFKC",
    lowercase: bool = False,
    whitespace: bool = True,
) -> pa.RecordBatch:
    """Unicode normalisation (NFC/NFKC/...), lower case, whitespace runs collapsed and trimmed."""
    col = _text(batch, column)
    if unicode:
        col = unicode_normalize(col, unicode)
    if lowercase:
        col = pc.utf8_lower(col)
    if whitespace:
        col = collapse_whitespace(col)
    return _set(batch, column, col)


def unicode_normalize(col: pa.Array, form: str = "NFKC") -> pa.Array:
    """Unicode normal form ``form``; ASCII rows are already in every normal form."""
    return ascii_split(col, lambda c: c, lambda c: pc.utf8_normalize(c, form))


def _unicode_spaces_to_ascii(col: pa.Array) -> pa.Array:
    """The non-ASCII members of :data:`WS_RE` replaced by a space (only rows with
    non-ASCII characters are scanned), so byte-level kernels see every space."""
    return ascii_split(
        col, lambda c: c, lambda c: pc.replace_substring_regex(c, UNICODE_SPACE_RE, " ")
    )


def collapse_whitespace(col: pa.Array) -> pa.Array:
    """Whitespace runs (:data:`WS_RE`) to one space, then trimmed."""
    return pc.utf8_trim_whitespace(collapse_ascii_ws(_unicode_spaces_to_ascii(col)))


def word_counts(col: pa.Array) -> pa.Array:
    """Words (:data:`WORD_RE` matches) per row; null counts as empty."""
    return count_ascii_words(_unicode_spaces_to_ascii(pc.fill_null(col, "")))


def strip_urls(
    batch: pa.RecordBatch, *, column: str = "text", replacement: str = ""
) -> pa.RecordBatch:
    """Remove http(s):// and www. URLs."""
    return _set(
        batch, column, pc.replace_substring_regex(_text(batch, column), URL_RE, replacement)
    )


def strip_html(batch: pa.RecordBatch, *, column: str = "text") -> pa.RecordBatch:
    """Remove HTML tags and decode the common entities."""
    col = pc.replace_substring_regex(_text(batch, column), TAG_RE, " ")
    for entity, char in _ENTITIES.items():
        col = pc.replace_substring(col, entity, char)
    return _set(batch, column, col)


def _reason(what: str, lo: float | None, hi: float | None) -> str:
    if hi is None:
        return f"{what} below {lo}"
    if lo is None:
        return f"{what} above {hi}"
    return f"{what} outside [{lo}, {hi}]"


def _between(values: pa.Array, lo: float | None, hi: float | None) -> pa.Array:
    keep = pa.array([True] * len(values)) if len(values) else pa.array([], pa.bool_())
    if lo is not None:
        keep = pc.and_(keep, pc.greater_equal(values, lo))
    if hi is not None:
        keep = pc.and_(keep, pc.less_equal(values, hi))
    return keep


def length_filter(
    batch: pa.RecordBatch, *, column: str = "text", min: int | None = None, max: int | None = None
) -> tuple[pa.Array, str]:
    """Keep rows whose text has between ``min`` and ``max`` characters."""
    n = pc.utf8_length(pc.fill_null(_text(batch, column), ""))
    return _between(n, min, max), _reason("length", min, max)


def word_count_filter(
    batch: pa.RecordBatch, *, column: str = "text", min: int | None = None, max: int | None = None
) -> tuple[pa.Array, str]:
    """Keep rows with between ``min`` and ``max`` whitespace-separated words."""
    return _between(word_counts(_text(batch, column)), min, max), _reason("word count", min, max)


_CLASSES = {
    "alphanumeric": r"[\pL\pN]",
    "alpha": r"\pL",
    "uppercase": r"\p{Lu}",
    "digits": r"\pN",
    "whitespace": r"\s",
    "punctuation": r"\pP",
}


def char_ratio_filter(
    batch: pa.RecordBatch,
    *,
    column: str = "text",
    kind: str = "alphanumeric",
    min: float | None = None,
    max: float | None = None,
) -> tuple[pa.Array, str]:
    """Keep rows whose share of ``kind`` characters (alphanumeric, alpha, uppercase,
    digits, whitespace, punctuation) is in ``[min, max]``; empty text has ratio 0."""
    if kind not in _CLASSES:
        raise ConfigError(f"char_ratio_filter kind must be one of {sorted(_CLASSES)}, got {kind!r}")
    text = pc.fill_null(_text(batch, column), "")
    total = pc.utf8_length(text)
    hits = pc.count_substring_regex(text, _CLASSES[kind])
    ratio = pc.if_else(
        pc.equal(total, 0),
        0.0,
        pc.divide(pc.cast(hits, pa.float64()), pc.cast(total, pa.float64())),
    )
    return _between(ratio, min, max), _reason(f"{kind} ratio", min, max)


def regex_filter(
    batch: pa.RecordBatch, *, pattern: str, column: str = "text", exclude: bool = False
) -> tuple[pa.Array, str]:
    """Keep rows matching ``pattern`` (RE2 syntax), or not matching with ``exclude``."""
    m = pc.match_substring_regex(pc.fill_null(_text(batch, column), ""), pattern)
    return (
        pc.invert(m) if exclude else m
    ), f"{'matches' if exclude else 'does not match'} {pattern!r}"


def _dup_line_fraction(text: str) -> float:
    lines = [ln.strip() for ln in text.split("\n") if ln.strip()]
    if len(lines) < 2:
        return 0.0
    counts = Counter(lines)
    return sum(c for c in counts.values() if c > 1) / len(lines)


def _dup_ngram_fraction(text: str, n: int) -> float:
    words = text.split()
    if len(words) < n * 2:
        return 0.0
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if counts[g] > 1:
            for j in range(i, i + n):
                covered[j] = True
    return sum(covered) / len(words)


def repetition_filter(
    batch: pa.RecordBatch,
    *,
    column: str = "text",
    max_line_fraction: float | None = 0.3,
    ngram: int = 3,
    max_ngram_fraction: float | None = 0.3,
) -> tuple[pa.Array, str]:
    """Drop rows where repeated lines, or words inside repeated word ``ngram``s, exceed the
    given fractions (per-row Python: no vectorised form exists)."""
    keep = []
    for text in pc.fill_null(_text(batch, column), "").to_pylist():
        ok = max_line_fraction is None or _dup_line_fraction(text) <= max_line_fraction
        if ok and max_ngram_fraction is not None:
            ok = _dup_ngram_fraction(text, ngram) <= max_ngram_fraction
        keep.append(ok)
    return pa.array(keep, pa.bool_()), "repetitive text"
