"""MinHash-LSH dedup on a real corpus with planted near-duplicates of known Jaccard."""

from __future__ import annotations

import json
import random
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _corpus import bbc_texts
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import ConfigError
from shardwise.dedup.lsh import optimal_bands, recall_bands
from shardwise.dedup.shingles import doc_shingles, jaccard
from shardwise.dedup.signatures import signatures
from shardwise.pipeline import read_jsonl, read_parquet


def _words(text: str) -> list[str]:
    t = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"[^\w]+|_", " ", t).split()


def _shingle_set(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = _words(text)
    if len(w) < n:
        return {tuple(w)} if w else set()
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def _true_jaccard(a: str, b: str) -> float:
    x, y = _shingle_set(a), _shingle_set(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def _edit(text: str, rate: float, rng: random.Random) -> str:
    words = text.split()
    for i in range(len(words)):
        if rng.random() < rate:
            words[i] = f"edit{rng.randrange(10**9)}"
    return " ".join(words)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The BBC corpus plus edited copies of 300 articles at several edit rates."""
    rng = random.Random(7)
    texts = bbc_texts()
    docs = list(texts)
    for i in rng.sample(range(len(texts)), 300):
        docs.append(_edit(texts[i], rng.choice([0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3]), rng))
    root = tmp_path_factory.mktemp("planted") / "in"
    root.mkdir()
    bounds = [0, len(docs) // 3, 2 * len(docs) // 3, len(docs)]
    for part in range(3):  # contiguous, so input order (file, row) is document order
        with open(root / f"p{part}.jsonl", "w") as f:
            for j in range(bounds[part], bounds[part + 1]):
                f.write(json.dumps({"id": j, "text": docs[j]}) + "\n")
    return root, docs


def _run(
    src: Path, out: Path, backend: Any = "local", **kw: Any
) -> tuple[set[int], dict[str, Any]]:
    r = (
        read_jsonl(str(src), task_bytes=kw.pop("task_bytes", 1_000_000))
        .dedup("minhash", column="text", **kw)
        .write_parquet(str(out))
        .run(backend=backend, progress=False)
    )
    kept = set(pq.read_table(out, columns=["id"]).column("id").to_pylist())
    return kept, json.loads(Path(r.manifest).read_text())["dedup"]["minhash_dedup"]


def _ground_truth(docs: list[str], threshold: float = 0.8) -> set[int]:
    """Docs that must go: exact Jaccard of word 5-gram sets over all pairs (a sparse
    document x shingle product), clustered, keeping the first document of each cluster."""
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components

    vocab: dict[tuple[str, ...], int] = {}
    rows, cols = [], []
    sizes = []
    for i, d in enumerate(docs):
        s = _shingle_set(d)
        sizes.append(len(s))
        for g in s:
            rows.append(i)
            cols.append(vocab.setdefault(g, len(vocab)))
    m = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(docs), len(vocab)))
    inter = (m @ m.T).tocoo()
    size = np.array(sizes)
    a, b, k = inter.row, inter.col, inter.data
    union = size[a] + size[b] - k
    keep = (a < b) & (union > 0) & (k / np.maximum(union, 1) >= threshold)
    graph = sparse.coo_matrix(
        (np.ones(keep.sum()), (a[keep], b[keep])), shape=(len(docs), len(docs))
    )
    _, labels = connected_components(graph, directed=False)
    first: dict[int, int] = {}
    for i, lab in enumerate(labels):
        first.setdefault(int(lab), i)
    return {i for i, lab in enumerate(labels) if first[int(lab)] != i}


@pytest.fixture(scope="module")
def truth(planted: tuple[Path, list[str]]) -> set[int]:
    return _ground_truth(planted[1])


def test_precision_and_recall_against_exact_jaccard(
    planted: tuple[Path, list[str]], truth: set[int], tmp_path: Path
) -> None:
    src, docs = planted
    kept, summary = _run(src, tmp_path / "o", verify=True)
    removed = set(range(len(docs))) - kept
    tp = len(removed & truth)
    precision = tp / len(removed)
    recall = tp / len(truth)
    assert len(truth) > 250  # planted copies plus the corpus's natural duplicates
    assert precision >= 0.98, (precision, recall)
    assert recall >= 0.95, (precision, recall)
    assert summary["removed"] == len(removed)
    audit = pq.read_table(summary["audit"]).to_pylist()
    assert len(audit) == len(removed)
    assert all(
        (a["kept_task"], a["kept_row"]) < (a["removed_task"], a["removed_row"]) for a in audit
    )


def _short_documents(rng: random.Random, n_base: int, n_planted: int) -> list[str]:
    """Runs of 10 to 13 words cut from the BBC articles (about 70 characters), plus edited
    copies: the same words in another case, a word added, dropped, replaced or swapped."""
    chunks = []
    for text in bbc_texts()[::3]:
        words = text.split()
        chunks += [" ".join(words[i : i + 12]) for i in range(0, len(words) - 12, 12)]
    base = rng.sample(chunks, n_base)
    docs = list(base)
    for _ in range(n_planted):
        w = rng.choice(base).split()
        kind = rng.randrange(6)
        i = rng.randrange(len(w))
        if kind == 0:
            w = [x.upper() for x in w]
        elif kind == 1:
            w.append(rng.choice(w))
        elif kind == 2:
            w.pop(rng.choice([0, -1]))
        elif kind == 3:
            w[i] = f"edit{rng.randrange(10**6)}"
        elif kind == 4 and i + 1 < len(w):
            w[i], w[i + 1] = w[i + 1], w[i]
        docs.append(" ".join(w))
    rng.shuffle(docs)
    return docs


def test_short_documents_precision_and_recall(tmp_path: Path) -> None:
    """Short texts (8 or so word 5-grams each) leave most of the 128 one-permutation bins
    empty: densified signatures still find the planted near-duplicates."""
    docs = _short_documents(random.Random(3), 3000, 700)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(docs)))
    truth = _ground_truth(docs)
    for verify in (True, False):
        kept, _ = _run(src, tmp_path / f"o{verify}", verify=verify)
        removed = set(range(len(docs))) - kept
        precision, recall = len(removed & truth) / len(removed), len(removed & truth) / len(truth)
        assert len(truth) > 300
        if verify:
            assert precision >= 0.98 and recall >= 0.95, (precision, recall)
        else:  # banding for the threshold alone (9 x 13): some pairs near it are missed
            assert precision >= 0.9 and recall >= 0.8, (precision, recall)


def test_signature_estimates_track_exact_jaccard() -> None:
    texts = bbc_texts()[:200]
    rng = random.Random(1)
    pairs = [(t, _edit(t, rng.choice([0.01, 0.05, 0.2]), rng)) for t in texts]
    arr = pa.array([x for p in pairs for x in p])
    sh, off = doc_shingles(arr, ngram=5)
    for scheme in ("oph", "perm"):
        sig = signatures(sh, off, num_perm=128, scheme=scheme)
        est = np.array([(sig[2 * i] == sig[2 * i + 1]).mean() for i in range(len(pairs))])
        exact = np.array(
            [
                jaccard(sh[off[2 * i] : off[2 * i + 1]], sh[off[2 * i + 1] : off[2 * i + 2]])
                for i in range(len(pairs))
            ]
        )
        ref = np.array([_true_jaccard(a, b) for a, b in pairs])
        assert np.abs(exact - ref).max() < 0.02  # our shingles are the documented ones
        assert np.abs(est - exact).mean() < 0.05, scheme


@pytest.mark.engine
def test_same_result_on_every_backend(
    planted: tuple[Path, list[str]], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from _engines import make_backend

    src, _ = planted
    expected, _ = _run(src, tmp_path / "local", task_bytes=400_000)
    for name in ["ray", "spark", "dask"]:
        b = make_backend(name, request)
        try:  # every step on the engine, the components too (star rounds over edge partitions)
            kept, summary = _run(
                src,
                tmp_path / name,
                backend=b,
                task_bytes=400_000,
                components="distributed",
                memory_budget=1_000_000,
            )
        finally:
            b.close()
        assert kept == expected and summary["components_mode"] == "distributed", name


def test_distributed_components_equal_in_memory(
    planted: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, _ = planted
    a, sa = _run(src, tmp_path / "mem", components="memory")
    b, sb = _run(src, tmp_path / "dist", components="distributed", partitions=3)
    assert sa["components_mode"] == "memory" and sb["components_mode"] == "distributed"
    assert a == b
    assert (
        pq.read_table(sa["audit"])
        .sort_by("removed_row")
        .equals(pq.read_table(sb["audit"]).sort_by("removed_row"))
    )


def test_deterministic_across_task_splits_and_workers(
    planted: tuple[Path, list[str]], tmp_path: Path
) -> None:
    src, _ = planted
    a, _ = _run(src, tmp_path / "a", task_bytes=2_000_000)
    b, _ = _run(src, tmp_path / "b", task_bytes=150_000, backend="thread")
    assert a == b


def test_empty_and_short_documents(tmp_path: Path) -> None:
    rows = [
        {"id": 0, "text": ""},
        {"id": 1, "text": ""},
        {"id": 2, "text": None},
        {"id": 3, "text": "   "},
        {"id": 4, "text": "hello world"},
        {"id": 5, "text": "Hello,  World!"},
        {"id": 6, "text": "goodbye moon"},
        {"id": 7, "text": "one two three"},
        {"id": 8, "text": "one two four"},
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, summary = _run(src, tmp_path / "o", task_bytes=10**6)
    assert kept == {0, 1, 2, 3, 4, 6, 7, 8}  # empty docs never cluster; short docs shingle whole
    assert summary["documents_with_shingles"] == 5


@pytest.mark.slow
def test_giant_cluster_of_50000_copies_is_linear(tmp_path: Path) -> None:
    text = bbc_texts()[0]
    table = pa.table(
        {"id": list(range(50_000)), "text": [text] * 49_990 + [t for t in bbc_texts()[1:11]]}
    )
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=5_000)
    r = (
        read_parquet(str(tmp_path / "in.parquet"))
        .dedup("minhash", column="text", verify=True)
        .write_parquet(str(tmp_path / "o"))
        .run(backend="local", progress=False)
    )
    summary = json.loads(Path(r.manifest).read_text())["dedup"]["minhash_dedup"]
    assert r.rows_out == 11
    assert summary["largest_cluster"] == 49_990
    # star edges, not pairs: fewer than 2 per document per band
    assert summary["candidate_edges"] < 50_000 * summary["bands"]


def test_parameters() -> None:
    b, r = optimal_bands(0.8, 128)
    assert b * r <= 128 and 5 <= r <= 20
    assert recall_bands(0.8, 128) == (15, 8)
    for t, k in [(0.8, 128), (0.7, 128), (0.9, 256), (0.5, 64)]:  # verified runs: recall first
        vb, vr = recall_bands(t, k)
        assert vb * vr <= k and _mean_recall(t, vb, vr) >= 0.99
        assert _mean_recall(t, vb - 1, vr) < 0.99  # the fewest bands that reach it
        # every banding with more rows (fewer false candidates at a given band count) misses it
        assert all(_mean_recall(t, k // r, r) < 0.99 for r in range(vr + 1, k + 1))


def _mean_recall(t: float, b: int, r: int) -> float:
    """The chance to become a candidate, averaged over similarities uniform in [t, 1]."""
    s = np.linspace(t, 1.0, 201)
    return float(np.trapezoid(1 - (1 - s**r) ** b, s)) / (1 - t)


def test_recall_banding_finds_planted_pairs_with_fewer_false_candidates() -> None:
    # 600 planted pairs of 200-shingle sets, Jaccard spread over [0.8, 1], and 600 pairs at 0.6
    from shardwise.dedup.lsh import band_hashes

    rng = np.random.default_rng(7)
    n, size = 600, 200
    base = rng.integers(0, 2**63, (n, size), dtype=np.uint64)

    def variant(jac: np.ndarray) -> np.ndarray:
        # replace k shingles of each set: J = (size - k) / (size + k)
        k = np.round(size * (1 - jac) / (1 + jac)).astype(np.int64)
        out = base.copy()
        mask = np.arange(size) < k[:, None]
        out[mask] = rng.integers(0, 2**63, int(mask.sum()), dtype=np.uint64)
        return out

    def candidate_share(other: np.ndarray, b: int, r: int) -> float:
        both = np.concatenate([base, other]).ravel()
        off = np.arange(0, 2 * n * size + 1, size)
        sig = signatures(both, off, num_perm=128, seed=3)
        h = band_hashes(sig, b, r)
        return float((h[:n] == h[n:]).any(axis=1).mean())

    near, far = variant(rng.uniform(0.8, 1.0, n)), variant(np.full(n, 0.6))
    b, r = recall_bands(0.8, 128)
    assert candidate_share(near, b, r) >= 0.97  # 0.99 expected
    # fewer candidates at similarity 0.6 than the former 18 x 7 (0.40 and 0.22 expected)
    assert candidate_share(far, b, r) < candidate_share(far, 18, 7) - 0.1
    with pytest.raises(ConfigError, match="bands \\* rows"):
        read_jsonl("x").dedup("minhash", bands=20, rows=10)
    with pytest.raises(ConfigError, match="tokenization"):
        read_jsonl("x").dedup("minhash", tokenization="bpe")
    with pytest.raises(ConfigError, match="dedup method"):
        read_jsonl("x").dedup("fuzzy")


def test_char_tokenization_finds_char_level_near_duplicates(tmp_path: Path) -> None:
    base = bbc_texts()[5]
    typo = base.replace("the ", "teh ", 3)
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": i, "text": t}) + "\n"
            for i, t in enumerate([base, typo, bbc_texts()[9]])
        )
    )
    kept, _ = _run(src, tmp_path / "o", tokenization="char", ngram=5)
    assert kept == {0, 2}


# with combining marks (U+0301 composes with an ASCII letter before it under NFKC, alone it
# is no letter) and Hangul jamo (compose with each other)
_WORDY = list("aeZ09 ,.-'\t\n") + [
    "é",
    "É",
    "ß",
    "ﬁ",
    "²",
    "—",
    "\u00a0",
    "\u3000",
    "日本",
    "Ω",
    "\u0301",
    "\u0327",
    "\u1100",
    "\u1161",
    "\u212a",
]


@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(_WORDY), max_size=30).map("".join)),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_word_hashes_match_regex_words(texts: list[str | None]) -> None:
    """The byte-level word tokenizer finds exactly the words of the regex definition
    (runs of letters and digits after NFKC and lower case), and a word's hash depends on
    the word only."""
    import pyarrow.compute as pc

    from shardwise.dedup.shingles import _normalise, _word_hashes

    arr = pa.array(texts, pa.string())
    ref = pc.utf8_split_whitespace(
        pc.utf8_trim_whitespace(
            pc.replace_substring_regex(
                pc.utf8_lower(pc.utf8_normalize(pc.fill_null(arr, ""), "NFKC")), r"[^\pL\pN]+", " "
            )
        )
    ).to_pylist()
    ref = [[w for w in words if w] for words in ref]
    hashes, offsets = _word_hashes(_normalise(arr), 0)
    assert np.diff(offsets).tolist() == [len(words) for words in ref]
    by_word: dict[str, int] = {}
    for word, h in zip([w for words in ref for w in words], hashes.tolist()):
        assert by_word.setdefault(word, h) == h
    assert len(set(by_word.values())) == len(by_word)  # no collisions among these words


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.lists(st.sampled_from([*_WORDY, "_", "!", "“", "！"]), max_size=30).map("".join),
        ),
        min_size=1,
        max_size=12,
    )
)
@settings(max_examples=200, deadline=None)
def test_char_normalisation_matches_its_definition(texts: list[str | None]) -> None:
    """``tokenization="char"`` shingles NFKC, lower-cased text with every run of
    characters outside letters and digits as one space, trimmed, in every row (ASCII or
    not)."""
    import pyarrow.compute as pc

    from shardwise.dedup.shingles import _normalise_chars

    arr = pa.array(texts, pa.string())
    ref = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(
            pc.utf8_lower(pc.utf8_normalize(pc.fill_null(arr, ""), "NFKC")), r"[^\pL\pN]+", " "
        )
    )
    assert _normalise_chars(arr).to_pylist() == ref.to_pylist()


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=120))
@settings(max_examples=100, deadline=None)
def test_numpy_components_equal_scipy(edges: list[tuple[int, int]]) -> None:
    """Small graphs are joined in numpy (no SciPy import); large ones by SciPy: both give
    every node its component's smallest id."""
    import shardwise.dedup.components as comp

    u = np.array([e[0] * 7 + 3 for e in edges], dtype=np.uint64)  # sparse, unsorted ids
    v = np.array([e[1] * 7 + 3 for e in edges], dtype=np.uint64)
    nodes, roots = comp.components_in_memory(u, v)
    saved = comp.SCIPY_ABOVE
    comp.SCIPY_ABOVE = -1
    try:
        nodes2, roots2 = comp.components_in_memory(u, v)
    finally:
        comp.SCIPY_ABOVE = saved
    assert np.array_equal(nodes, nodes2) and np.array_equal(roots, roots2)
    # a chain of 10,000 nodes in shuffled order ends with one root, the smallest
    chain = np.random.default_rng(len(edges)).permutation(10_000).astype(np.uint64)
    n3, r3 = comp.components_in_memory(chain[:-1], chain[1:])
    assert len(n3) == 10_000 and (r3 == 0).all()


@given(
    st.lists(
        st.one_of(
            st.none(),
            st.lists(st.sampled_from([*_WORDY, "_", "!", "“", "！"]), max_size=40).map("".join),
        ),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
    st.integers(0, 2),
)
@settings(max_examples=200, deadline=None)
def test_piecewise_normalisation_equals_whole_rows(
    texts: list[str | None], large: bool, cut: int
) -> None:
    """Running the Unicode kernels on the pieces around non-ASCII characters only gives
    the text they give on whole rows (also for large strings and sliced arrays)."""
    import pyarrow.compute as pc

    from shardwise.dedup.shingles import _normalise

    arr = pa.array(texts, pa.large_string() if large else pa.string()).slice(
        min(cut, len(texts) - 1)
    )
    ref = pc.replace_substring_regex(
        pc.utf8_lower(pc.utf8_normalize(pc.fill_null(arr, ""), "NFKC")), r"[^\x00-\x7f\pL\pN]+", " "
    )
    assert _normalise(arr).to_pylist() == ref.to_pylist()


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2**64 - 1) | st.integers(0, 5)), max_size=60
    )
)
@settings(max_examples=100, deadline=None)
def test_unique_pairs_equals_numpy_unique_rows(rows: list[tuple[int, int]]) -> None:
    from shardwise.dedup.components import unique_pairs

    u = np.array([a for a, _ in rows], dtype=np.uint64)
    v = np.array([b for _, b in rows], dtype=np.uint64)
    pairs, inverse = unique_pairs(u, v)
    want, want_inverse = np.unique(
        np.stack([u, v], axis=1).reshape(-1, 2), axis=0, return_inverse=True
    )
    assert pairs.shape == want.shape and (pairs == want).all()
    assert (inverse == want_inverse.ravel()).all()


@given(
    st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "dd", "é", "x1"]), max_size=12).map(" ".join),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 6),
    st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_rolling_shingle_hashes_equal_a_per_window_reference(
    texts: list[str], ngram: int, unique: bool
) -> None:
    """The n-gram hashes formed over the whole token array at once (one pass per token of
    the window) equal the polynomial of each window computed one window at a time; a
    document shorter than ``ngram`` is one shingle of all its tokens."""
    from shardwise.dedup.shingles import _POLY, _mix, _tokens, doc_shingles

    tok, off = _tokens(pa.array(texts), "word", 0)
    want: list[list[int]] = []
    for d in range(len(texts)):
        t = [int(x) for x in tok[off[d] : off[d + 1]]]
        windows = (
            [t[i : i + ngram] for i in range(len(t) - ngram + 1)]
            if len(t) >= ngram
            else [t]
            if t
            else []
        )
        hashes = []
        for w in windows:
            h = 0
            for x in w:
                h = (h * int(_POLY) + x) % 2**64
            h = h if len(t) >= ngram else h ^ 0x5348
            hashes.append(int(_mix(np.array([h], dtype=np.uint64))[0]))
        want.append(sorted(set(hashes)) if unique else hashes)
    sh, offsets = doc_shingles(pa.array(texts), ngram=ngram, unique=unique)
    got = [sh[offsets[d] : offsets[d + 1]].tolist() for d in range(len(texts))]
    assert got == want


def test_word_bytes_by_comparisons_equal_the_table() -> None:
    from shardwise.dedup.shingles import _WORD_BYTE, _word_bytes

    every = np.arange(256, dtype=np.uint8)
    assert (_word_bytes(every) == _WORD_BYTE[every]).all()
    assert _word_bytes(np.frombuffer(b"aZ09 _-\xc3\xa9", dtype=np.uint8)).tolist() == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
        True,
        True,
    ]
