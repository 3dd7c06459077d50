"""MinHash dedup within a memory budget: partitions spilled to scratch, a bounded cache of
task keys, distributed components; and tasks sized by the work of the dedup."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from _corpus import bbc_texts

from shardwise.dedup.candidates import TaskCache
from shardwise.pipeline import read_jsonl


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """BBC articles plus 400 lightly edited copies, in 2 JSONL files (about 5 MB)."""
    rng = random.Random(3)
    texts = bbc_texts()
    docs = list(texts)
    for i in rng.sample(range(len(texts)), 400):
        words = texts[i].split()
        for _ in range(max(1, len(words) // 50)):
            words[rng.randrange(len(words))] = f"w{rng.randrange(10**6)}"
        docs.append(" ".join(words))
    root = tmp_path_factory.mktemp("mem") / "in"
    root.mkdir()
    half = len(docs) // 2
    for part, (lo, hi) in enumerate([(0, half), (half, len(docs))]):
        with open(root / f"p{part}.jsonl", "w") as f:
            f.writelines(json.dumps({"id": j, "text": docs[j]}) + "\n" for j in range(lo, hi))
    return root


def _run(src: Path, out: Path, **kw: Any) -> tuple[Any, dict[str, Any]]:
    r = (
        read_jsonl(str(src), task_bytes=kw.pop("task_bytes", 2_000_000))
        .dedup("minhash", column="text", verify=True, **kw)
        .write_parquet(str(out))
        .run(backend=kw.pop("backend", "local"), num_proc=2, progress=False, report=False)
    )
    return r, json.loads(Path(r.manifest).read_text())["dedup"]["minhash_dedup"]


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in sorted(out.glob("*.parquet")) if not p.name.startswith("_")
    }


def test_spilling_under_a_small_budget_is_byte_identical_to_in_memory(
    corpus: Path, tmp_path: Path
) -> None:
    big, s_big = _run(corpus, tmp_path / "big", memory_budget=2**40)
    small, s_small = _run(corpus, tmp_path / "small", memory_budget=400_000)
    assert s_big["components_mode"] == "memory" and s_small["components_mode"] == "distributed"
    assert s_small["partitions"] > 16 > s_big["partitions"]  # the budget overrides the cap
    # few records: the edges tasks read the band hashes themselves; past the budget: bucket files
    assert s_big["buckets_step"] is False and s_small["buckets_step"] is True
    assert s_big["removed"] == s_small["removed"] >= 400 * 0.9
    files = _files(tmp_path / "big")
    assert files and files == _files(tmp_path / "small")
    assert pq.read_table(s_big["audit"]).equals(pq.read_table(s_small["audit"]))
    assert (big.rows_in, big.rows_out) == (small.rows_in, small.rows_out)


def test_a_small_budget_on_a_corpus_larger_than_it_succeeds(corpus: Path, tmp_path: Path) -> None:
    size = sum(p.stat().st_size for p in corpus.glob("*.jsonl"))
    budget = 256 * 2**10
    assert size > 15 * budget
    r, summary = _run(corpus, tmp_path / "tiny", memory_budget=budget, partitions=4)
    ref, _ = _run(corpus, tmp_path / "ref")
    assert summary["components_mode"] == "distributed" and summary["partitions"] > 16
    kept = set(pq.read_table(tmp_path / "tiny", columns=["id"]).column("id").to_pylist())
    assert kept == set(pq.read_table(tmp_path / "ref", columns=["id"]).column("id").to_pylist())
    assert r.rows_out == ref.rows_out < r.rows_in


class _Keys:
    """Three tasks of known arrays; counts loads."""

    def __init__(self) -> None:
        self.arrays = {
            t: {"sig": np.full((100, 4), t, np.uint64), "lengths": np.arange(100)} for t in range(3)
        }
        self.loads: list[int] = []

    def load(self, task: int, names: Any = None) -> dict[str, np.ndarray]:
        self.loads.append(task)
        return {k: v.copy() for k, v in self.arrays[task].items() if names is None or k in names}


def test_task_cache_stays_under_its_cap_and_reloads() -> None:
    keys = _Keys()
    one = 100 * 4 * 8 + 100 * 8 + 101 * 8  # sig, lengths and the offsets it derives
    cache = TaskCache(keys, ["sig", "lengths"], max_bytes=2 * one)
    for t in [0, 1, 0, 2, 1, 0]:
        got = cache.get(t)
        assert (got["sig"] == t).all() and got["offsets"][-1] == np.arange(100).sum()
        assert cache.bytes <= 2 * one and len(cache.items) <= 2
    assert keys.loads == [0, 1, 2, 1, 0]  # 0 was used again before 2 came, so 1 went first
    small = TaskCache(keys, ["sig"], max_bytes=1)
    assert (small.get(2)["sig"] == 2).all() and len(small.items) == 1  # the last one always stays
    lazy = TaskCache(keys, ["sig", "lengths"], max_bytes=10**9)
    assert set(lazy.get(1, ["sig"])) == {"sig"}  # the shingles are read only when asked for
    assert set(lazy.get(1)) == {"sig", "lengths", "offsets"} and lazy.bytes == one


def test_minhash_sizes_tasks_by_work(corpus: Path) -> None:
    """A CPU-heavy dedup on a small input gets a task for every core of a small machine,
    and the tasks depend on the data and the operators only."""
    small = next(iter(corpus.glob("*.jsonl")))
    size = small.stat().st_size
    assert size < 4 * 2**20
    plain = read_jsonl(str(small)).dedup("exact", column="text")
    heavy = read_jsonl(str(small)).dedup("minhash", column="text")
    from shardwise.pipeline.stages import work_per_byte
    from shardwise.pipeline.task_split import plan_tasks

    n_plain = len(plan_tasks(plain.index(), plain.task_bytes, work=work_per_byte(plain.ops)))
    tasks = plan_tasks(heavy.index(), heavy.task_bytes, work=work_per_byte(heavy.ops))
    assert n_plain <= 2 < len(tasks)
    again = read_jsonl(str(small)).dedup("minhash", column="text")
    assert plan_tasks(again.index(), again.task_bytes, work=work_per_byte(again.ops)) == tasks
