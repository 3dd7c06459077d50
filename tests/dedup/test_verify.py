"""The exact Jaccard check of verification against Python sets, and the bucket order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.dedup import candidates, verify
from shardwise.dedup import sets as sets_module
from shardwise.dedup.candidates import ROW_BITS, Candidates, TaskShingles
from shardwise.dedup.lsh import bucket_order
from shardwise.dedup.sets import shingle_sets
from shardwise.dedup.verify import exact_similar


class _Keys:
    def __init__(self, tasks: list[dict[str, np.ndarray]]) -> None:
        self.tasks = tasks

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.tasks[task].items() if names is None or k in names}


class _MappedKeys:
    """The tasks' arrays as read-only maps of ``.npy`` files, as local key files are read."""

    def __init__(self, tasks: list[dict[str, np.ndarray]], root: str) -> None:
        self.paths = []
        for t, arrays in enumerate(tasks):
            self.paths.append({})
            for name, a in arrays.items():
                self.paths[t][name] = os.path.join(root, f"t{t}-{name}.npy")
                np.save(self.paths[t][name], a)

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        return {
            k: np.load(p, mmap_mode="r")
            for k, p in self.paths[task].items()
            if names is None or k in names
        }


def _doc(task: int, row: int) -> int:
    return task << ROW_BITS | row


@given(
    docs=st.lists(
        st.lists(st.lists(st.integers(0, 40), max_size=25), min_size=1, max_size=8),
        min_size=1,
        max_size=3,
    ),
    spread=st.sampled_from(["hash", "small", "top"]),
    batch=st.integers(1, 400),
    threshold=st.sampled_from([0.2, 0.5, 0.8]),
    loop_from=st.sampled_from([0, 10, 2048]),
    data=st.data(),
)
@settings(max_examples=150, deadline=None)
def test_exact_similar_equals_python_sets(
    docs: list[list[list[int]]],
    spread: str,
    batch: int,
    threshold: float,
    loop_from: int,
    data: st.DataObject,
) -> None:
    # spread: hash-like values, small integers, or the largest values (2**64 - 1 included,
    # the value rows are filled with); repeats within a document are allowed in the text
    def value(x: int) -> int:
        return {"hash": x * 0x9E3779B97F4A7C15 % 2**64, "small": x, "top": 2**64 - 1 - x}[spread]

    tasks = []
    for t in docs:  # stored as the operator stores them: each document's set
        sets, lengths = shingle_sets(
            np.array([value(x) for d in t for x in d], dtype=np.uint64),
            np.concatenate([[0], np.cumsum([len(d) for d in t])]).astype(np.int64),
        )
        assert list(lengths) == [len(set(d)) for d in t]
        assert sets.tolist() == [v for d in t for v in sorted({value(x) for x in d})]
        tasks.append(
            {"shingles": sets, "lengths": lengths, "sig": np.zeros((len(t), 4), dtype=np.uint64)}
        )
    ids = [(t, r) for t, rows in enumerate(docs) for r in range(len(rows))]
    pairs = data.draw(
        st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), min_size=1, max_size=30)
    )
    a = np.array([_doc(*p) for p, _ in pairs], dtype=np.uint64)
    b = np.array([_doc(*q) for _, q in pairs], dtype=np.uint64)
    old = sets_module.PAIR_SHINGLES, verify.PAIR_LOOP_FROM, candidates.LOOP_FROM
    sets_module.PAIR_SHINGLES, verify.PAIR_LOOP_FROM = (
        batch,
        loop_from,
    )  # pairs one by one, or in rows
    keys = _Keys(tasks)
    gathered = Candidates.gather(keys, np.unique(np.concatenate([a, b])), 1 << 30)
    assert gathered is not None and gathered.views is None  # arrays in memory: copied
    try:  # from a cache of whole tasks, from the candidates gathered once, and from views
        got = exact_similar(
            TaskShingles(keys, 1 << 30), a, b, threshold
        )  # of mapped files: the same
        assert (exact_similar(gathered, a, b, threshold) == got).all()
        with tempfile.TemporaryDirectory() as root:
            candidates.LOOP_FROM = 0  # views from the first shingle on (else only for long sets)
            mapped = Candidates.gather(
                _MappedKeys(tasks, root), np.unique(np.concatenate([a, b])), 1 << 30
            )
            assert mapped is not None and mapped.views is not None
            assert (exact_similar(mapped, a, b, threshold) == got).all()
            del mapped
    finally:
        sets_module.PAIR_SHINGLES, verify.PAIR_LOOP_FROM, candidates.LOOP_FROM = old
    assert (
        Candidates.gather(keys, np.unique(np.concatenate([a, b])), 0) is None
    )  # past its cap: not gathered
    for (p, q), ok in zip(pairs, got):
        x, y = set(docs[p[0]][p[1]]), set(docs[q[0]][q[1]])
        union = len(x | y)
        assert ok == (union == 0 or len(x & y) / union >= threshold)


@given(
    lengths=st.lists(st.one_of(st.integers(0, 8), st.integers(60, 300)), min_size=1, max_size=12),
    spread=st.integers(1, 2**64 - 1),
    seed=st.integers(0, 2**32 - 1),
    by_top=st.booleans(),
)
@settings(max_examples=80, deadline=None)
def test_shingle_sets_of_short_and_long_documents_equal_python_sets(
    lengths: list[int], spread: int, seed: int, by_top: bool
) -> None:
    # documents over LOOP_FROM shingles are sorted one by one (by np.sort, or by their top
    # bits and then a merge of the runs, whichever this CPU runs faster: both here), shorter
    # ones in rows: all give each document's sorted set, with repeats and the largest value
    rng = np.random.default_rng(seed)
    docs = [
        rng.integers(0, max(1, n // 2 + 1), n).astype(np.uint64) * np.uint64(spread % 2**64)
        for n in lengths
    ]
    docs = [np.where(d % np.uint64(7) == 0, np.uint64(2**64 - 1), d) for d in docs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.concatenate(docs) if docs else np.zeros(0, np.uint64)
    with mock.patch.object(sets_module, "_top_bits_first", lambda: by_top):
        got, got_lengths = shingle_sets(flat, offsets)
    assert got_lengths.tolist() == [len(set(d.tolist())) for d in docs]
    assert got.tolist() == [v for d in docs for v in sorted(set(d.tolist()))]
    assert flat.tolist() == np.concatenate(docs).tolist()  # the input is left as it was


def test_bucket_order_groups_by_band_and_hash_with_documents_in_order() -> None:
    rng = np.random.default_rng(0)
    for collide in (False, True):
        n = 2_000
        doc = np.sort(rng.integers(0, 300, n)).astype(np.uint64)
        band = rng.integers(0, 4, n).astype(np.uint64)
        h = rng.integers(0, 50, n).astype(np.uint64)
        if not collide:  # a band's hashes apart from every other band's, as band_hashes makes them
            h = h * np.uint64(4) + band
        rec = np.stack([band, h, doc], axis=1)
        got = rec[bucket_order(rec)]
        want = rec[np.lexsort((rec[:, 2], rec[:, 1], rec[:, 0]))]

        # the same buckets, each holding the same documents in the same order
        def buckets(r: np.ndarray) -> dict[tuple[int, int], list[int]]:
            out: dict[tuple[int, int], list[int]] = {}
            for bb, hh, d in r.tolist():
                out.setdefault((bb, hh), []).append(d)
            return out

        assert buckets(got) == buckets(want)
        keys = [tuple(x) for x in got[:, :2].tolist()]
        runs = [k for i, k in enumerate(keys) if i == 0 or k != keys[i - 1]]
        assert len(runs) == len(set(runs)), "a bucket's records are contiguous"


@given(
    a=st.sets(st.integers(0, 2**64 - 1), max_size=60),
    b=st.sets(st.integers(0, 2**64 - 1), max_size=60),
    shared=st.sets(st.integers(0, 2**64 - 1), max_size=30),
)
@settings(max_examples=100, deadline=None)
def test_shared_count_of_two_sets_by_merging(a: set[int], b: set[int], shared: set[int]) -> None:
    x, y = a | shared, b | shared
    got = sets_module.shared_count(
        np.array(sorted(x), dtype=np.uint64), np.array(sorted(y), dtype=np.uint64)
    )
    assert got == len(x & y)


@given(
    values=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=80),
    dtype=st.sampled_from(["int64", "uint16"]),
)
@settings(max_examples=100, deadline=None)
def test_distinct_equals_numpy_unique(values: list[int], dtype: str) -> None:
    a = np.array(values, dtype=np.int64).astype(dtype)
    got = sets_module.distinct(a)
    assert got.dtype == a.dtype
    assert np.array_equal(got, np.unique(a))


def test_a_dedup_run_imports_no_masked_arrays(tmp_path: Path) -> None:
    """numpy.ma costs ~20 ms to import in every fresh process; a MinHash run (planning,
    signatures, verification, the keep-mask, the audit) needs none of it."""
    src = tmp_path / "in.jsonl"
    words = [f"w{i}" for i in range(400)]
    rows = [" ".join(words[i : i + 60]) for i in range(0, 300, 3)] + [" ".join(words[:60])] * 3
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    code = (
        # pyarrow imports pandas (and pandas numpy.ma), when it is installed, on its first
        # to_numpy(): the environment's cost; this checks shardwise's own imports
        "import sys\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, *args):\n"
        "        if name.partition('.')[0] == 'pandas':\n"
        "            raise ImportError('pandas left out')\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "from shardwise.pipeline import read_jsonl; "
        "r = read_jsonl(sys.argv[1]).dedup('minhash', column='text', verify=True, threshold=0.8)"
        ".write_parquet(sys.argv[2]).run(backend='sequential', progress=False, report=False); "
        "assert r.rows_out < r.rows_in, (r.rows_in, r.rows_out); print('numpy.ma' in sys.modules)"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(sets_module.__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", code, str(src), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_the_sort_of_long_sets_is_chosen_once_per_process() -> None:
    first = sets_module._top_bits_first()
    assert isinstance(first, bool)
    assert sets_module._top_bits_first() is first


@given(lengths=st.lists(st.integers(0, 200), max_size=10), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_take_ranges_into_a_given_array_equals_python_slices(lengths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**63, 2000, dtype=np.int64).view(np.uint64)
    starts = np.array([int(rng.integers(0, 2000 - n + 1)) for n in lengths], dtype=np.int64)
    want = [v for s, n in zip(starts.tolist(), lengths) for v in values[s : s + n].tolist()]
    out = np.full(len(want) + 2, 7, dtype=np.uint64)
    sets_module.take_ranges(values, starts, np.array(lengths, dtype=np.int64), out=out[1:-1])
    assert out[1:-1].tolist() == want and out[0] == out[-1] == 7
    assert (
        sets_module.take_ranges(values, starts, np.array(lengths, dtype=np.int64)).tolist() == want
    )
