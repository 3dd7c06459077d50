"""The dedup benchmark's generated corpora: what is planted is what the docs say."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa

# benchmarks/ is on the tests' import path (pyproject's pytest ``pythonpath``)
from adapters.shingling import shingles
from datagen.dedup_scale import COPY_SHARE, _slice
from datagen.dedup_shapes import _short_variant


def test_scale_slice_plants_one_word_edits_of_other_documents() -> None:
    vocab = pa.array([f"w{i}" for i in range(5000)])
    table, copies = _slice(vocab, np.random.default_rng(1), 100, 2000)
    assert table.num_rows == 2000 and copies == int(2000 * COPY_SHARE)
    assert table.column("id").to_pylist() == list(range(100, 2100))
    docs = [t.split() for t in table.column("text").to_pylist()]
    assert all(20 <= len(d) <= 40 for d in docs)
    by_middle: dict[tuple[str, ...], list[list[str]]] = {}
    for d in docs:  # a copy keeps every word but the first or the last
        by_middle.setdefault(tuple(d[1:-1]), []).append(d)
    paired = sum(len(g) - 1 for g in by_middle.values())
    assert paired >= copies * 0.98  # random documents never share 18+ middle words by chance
    a, b = next(g for g in by_middle.values() if len(g) > 1)[:2]
    sa, sb = shingles(" ".join(a), 5), shingles(" ".join(b), 5)
    assert len(sa & sb) / len(sa | sb) >= 0.8


def test_short_variants_stay_short_and_close() -> None:
    rng = random.Random(0)
    text = "The film is a quiet, funny and sad portrait of a family."
    for _ in range(200):
        v, edits = _short_variant(text, ["extra", "words"], rng)
        assert edits in (0, 1) and abs(len(v.split()) - len(text.split())) <= 1
        if edits == 0:
            assert v.lower().rstrip("!.") == text.lower().rstrip("!.")
