"""``DaliInput`` without a pipeline: the sources iterated directly (as DALI's worker
does), their pickling, epochs, resume, merge, the Arrow-to-array conversion and errors."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _daliwds import make_shards
from _daliwds import source_epoch as _epoch

from shardwise.errors import ConfigError, MissingExtraError, PlanError
from shardwise.integrations._arrays import column_arrays
from shardwise.integrations.dali import DaliInput

SIZES = [5, 40, 3, 22, 17, 1, 30]  # 118 samples


@pytest.fixture
def shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "cache"))
    make_shards(tmp_path / "wds", SIZES)
    return str(tmp_path / "wds")


def _src(path: str, rank: int = 0, **kw: Any) -> DaliInput:
    opts: dict[str, Any] = {
        "world_size": 2,
        "num_workers": 3,
        "per_worker": 5,
        "columns": ["cls", "jpg"],
        "seed": 3,
    }
    opts.update(kw)
    return DaliInput(path, rank=rank, **opts)


def test_sources_split_ranks_and_workers_exactly(shards: str) -> None:
    per: list[list[list[int]]] = []
    for rank in range(2):
        src = _src(shards, rank)
        assert src.iterations == 118 // 30 and src.batch_size == 15
        for ws in src.sources():
            batches = _epoch(ws)
            assert len(batches) == len(ws) == src.iterations
            assert all(len(b) == 5 for b in batches)
            per.append(batches)
    labels = [x for p in per for b in p for x in b]
    assert len(labels) == len(set(labels)) == 6 * 5 * 3 and set(labels) <= set(range(118))


def test_each_iter_is_the_next_epoch_and_seeded(shards: str) -> None:
    ws = _src(shards).sources()[1]
    first, second = _epoch(ws), _epoch(ws)
    assert first != second
    again = _src(shards).sources()[1]
    assert _epoch(again) == first and _epoch(again) == second
    later = _src(shards)
    later.set_epoch(1)
    assert _epoch(later.sources()[1]) == second


def test_a_pickled_source_counts_epochs_of_its_own(shards: str) -> None:
    ws = _src(shards).sources()[0]
    first = _epoch(ws)
    clone = pickle.loads(pickle.dumps(ws))  # what a spawned DALI worker receives
    assert _epoch(clone) != first  # the pid-keyed count travels; a new process starts at 0
    ws2 = _src(shards).sources()[0]
    iter(ws2)  # DALI's graph building calls iter() once in the main process
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_epoch, (ws2,)) == first


def test_drop_last_false_pads_with_documented_repeats(shards: str) -> None:
    labels = []
    for rank in range(2):
        for ws in _src(shards, rank, drop_last=False).sources():
            labels += [x for b in _epoch(ws) for x in b]
    assert set(labels) == set(range(118)) and len(labels) == 120


def test_resume_after_some_iterations_continues_exactly(shards: str) -> None:
    full = [[_epoch(ws) for ws in _src(shards, r).sources()] for r in range(2)]
    state = _src(shards).state_dict(iterations=2)
    for rank in range(2):
        src = _src(shards, rank)
        src.load_state_dict(state)
        assert src.iterations == full[rank][0].__len__() - 2
        assert [_epoch(ws) for ws in src.sources()] == [b[2:] for b in full[rank]]
    with pytest.raises(PlanError, match="iterations must be in"):
        _src(shards).state_dict(iterations=99)


def test_resume_on_another_topology_repeats_nothing(shards: str) -> None:
    consumed = [
        x for r in range(2) for ws in _src(shards, r).sources() for b in _epoch(ws)[:1] for x in b
    ]
    state = _src(shards).state_dict(iterations=1)
    rest = []
    for rank in range(3):
        src = _src(shards, rank, world_size=3, num_workers=2, per_worker=4)
        src.load_state_dict(state)
        rest += [x for ws in src.sources() for b in _epoch(ws) for x in b]
    assert not set(consumed) & set(rest) and len(rest) == len(set(rest))


def test_merge_joins_source_outputs_in_order(shards: str) -> None:
    src = _src(shards)
    a = [np.arange(5), np.full(5, 9)]
    b = [np.arange(5, 10), np.full(5, 8)]
    merged = src.merge([*a, *b, np.arange(10, 15), np.full(5, 7)])
    assert isinstance(merged, list)
    assert (
        merged[0].tolist() == list(range(15)) and merged[1].tolist() == [9] * 5 + [8] * 5 + [7] * 5
    )
    names = src.output_names(["img", "y"])
    assert names == ["img_w0", "y_w0", "img_w1", "y_w1", "img_w2", "y_w2"]
    torch = pytest.importorskip("torch")
    as_dict = src.merge({n: torch.ones(5, 2) * i for i, n in enumerate(names)})
    assert (
        isinstance(as_dict, dict) and set(as_dict) == {"img", "y"} and as_dict["y"].shape == (15, 2)
    )
    ragged = src.merge([[np.zeros(i)] for i in range(3)])
    assert [len(x) for x in ragged[0]] == [0, 1, 2]
    with pytest.raises(ConfigError, match="multiple of 3"):
        src.merge(a)


def test_columns_become_dali_arrays() -> None:
    binary = pa.array([b"ab", None, b"", b"xyz"])
    out = column_arrays("jpg", binary.slice(1))
    assert [x.tolist() for x in out] == [[], [], [120, 121, 122]] and out[0].dtype == np.uint8
    assert [
        bytes(x) for x in column_arrays("__key__", pa.array(["k1", "ü"], pa.large_string()))
    ] == [b"k1", "ü".encode()]
    assert column_arrays("y", pa.array([1, 2], pa.int32())).tolist() == [1, 2]
    fixed = column_arrays("v", pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)))
    assert isinstance(fixed, np.ndarray) and fixed.shape == (2, 2)
    ragged = column_arrays("ids", pa.array([[1, 2, 3], None, [4]], pa.list_(pa.int64())))
    assert [x.tolist() for x in ragged] == [[1, 2, 3], [], [4]]
    with pytest.raises(ConfigError, match="'s'.*cannot be passed to DALI"):
        column_arrays("s", pa.array([{"a": 1}]))
    with pytest.raises(ConfigError, match="'y' has nulls"):
        column_arrays("y", pa.array([1, None]))


def test_bad_arguments_and_missing_dali(shards: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="per_worker"):
        _src(shards, per_worker=0)
    with pytest.raises(ConfigError, match="columns"):
        _src(shards, columns="jpg")
    with pytest.raises(ConfigError, match="nope"):
        _src(shards, columns=["nope"])
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)
    with pytest.raises(MissingExtraError, match=r'pip install "shardwise\[dali\]"'):
        _src(shards)


def test_a_pipeline_that_cannot_take_the_sources_batches_is_refused(shards: str) -> None:
    """A pipeline batch smaller than ``per_worker``, or ``batch=False``: a ``ConfigError``
    as the graph is defined, not DALI's error at the first run."""
    from nvidia.dali import pipeline_def

    src = _src(shards, num_workers=2, per_worker=4)

    def defined(batch_size: int, **kwargs: Any) -> None:
        @pipeline_def(batch_size=batch_size, num_threads=1, device_id=None, py_num_workers=2)
        def pipe() -> tuple[Any, ...]:
            return tuple(out for outs in src.external_sources(**kwargs) for out in outs)

        pipe()  # defines the graph; builds and starts nothing

    with pytest.raises(ConfigError, match="batch_size=2 .* per_worker=4"):
        defined(2)
    with pytest.raises(ConfigError, match="batch=True"):
        defined(4, batch=False)
    defined(8)  # a larger batch takes the sources' batches of 4


def test_a_model_parallel_group_gets_the_same_sources(shards: str) -> None:
    group = [_src(shards, r, world_size=4, replication=2) for r in (2, 3)]
    assert [s.rank for s in group[0].sources()] == [1, 1, 1]
    assert [_epoch(ws) for ws in group[0].sources()] == [_epoch(ws) for ws in group[1].sources()]
    other = _src(shards, 0, world_size=4, replication=2).sources()[0]
    assert not {x for b in _epoch(other) for x in b} & {
        x for b in _epoch(group[0].sources()[0]) for x in b
    }


# DALI starts its source workers by spawning fresh interpreters: what they import is paid
# at every pipeline's start (torch alone took 2.3 s of each worker's start here)
NO_TORCH = """
import pickle, sys
from _daliwds import source_epoch
feed = pickle.loads(sys.stdin.buffer.read())
print(sum(map(len, source_epoch(feed))), "torch" in sys.modules)
"""


def test_a_source_worker_runs_without_importing_torch(shards: str) -> None:
    import subprocess

    feed = pickle.dumps(_src(shards).sources()[0])
    out = subprocess.run(
        [sys.executable, "-c", NO_TORCH], input=feed, capture_output=True, check=True
    ).stdout.split()
    assert out == [b"15", b"False"], out  # 3 iterations of 5 read, torch never imported
