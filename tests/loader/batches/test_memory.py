"""A dataset's window memory: a mapping is handed out again only once nothing refers to
it, within a size range, with the free ones bounded; epochs that reuse it give the same
batches as fresh memory."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardwise.loader.batches.memory as memory
from shardwise import StreamingDataset
from shardwise.loader.batches.memory import SMALL, WindowMemory

MB = 1 << 20


def _address(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def test_a_mapping_is_handed_out_again_only_once_nothing_refers_to_it() -> None:
    pool = WindowMemory()
    a = pool.take(4 * MB)
    first = _address(a)
    view = a[100:200].view(np.int32)  # a view of a view: still a reference
    buf = pa.py_buffer(a[:64])  # an Arrow buffer over it
    del a
    b = pool.take(4 * MB)
    assert _address(b) != first  # the first is still referred to
    del view
    c = pool.take(4 * MB)
    assert _address(c) not in (first, _address(b))  # the Arrow buffer still holds it
    del buf
    d = pool.take(4 * MB)
    assert _address(d) == first
    d[:] = 1
    assert int(d.sum()) == 4 * MB and d.flags.writeable


def test_a_free_mapping_serves_requests_from_four_fifths_of_its_size() -> None:
    pool = WindowMemory()
    a = pool.take(8 * MB)  # mapped with 1/8 more room: 9 MB
    first = _address(a)
    del a
    assert _address(pool.take(9 * MB)) == first  # a slightly larger column fits the room
    b = pool.take(5 * MB)  # too small for the free 9 MB: a new mapping
    assert _address(b) != first
    small = pool.take(SMALL - 1)
    assert isinstance(small, np.ndarray) and len(small) == SMALL - 1  # heap memory, no mapping


def test_free_mappings_are_kept_up_to_the_bytes_in_use() -> None:
    pool = WindowMemory()
    held = [pool.take(4 * MB) for _ in range(4)]
    del held
    assert pool.mapped == 4 * (4 * MB + MB // 2)
    big = pool.take(64 * MB)  # fits none: the free ones beyond the bytes in use go
    assert pool.mapped <= 2 * len(big) + 2 * MB * 4
    del big
    assert (
        pool.take(60 * MB) is not None and pool.mapped == 72 * MB
    )  # the 64 MB one (72 with room) again


def test_a_forked_process_starts_without_its_parents_mappings() -> None:
    pool = WindowMemory()
    pool.take(4 * MB)
    parents = list(pool._maps)
    pool._pid = -1  # as a child sees its parent's pool
    pool.take(4 * MB)
    assert len(pool._maps) == 1 and pool._maps[0] is not parents[0]


def _data(root: Path) -> Path:
    rng = np.random.default_rng(3)
    for f, n in enumerate((3000, 2200, 4100)):
        ids = np.arange(f * 10_000, f * 10_000 + n)
        text = ["w" * int(k) + str(i) for i, k in zip(ids, rng.integers(0, 400, n))]
        emb = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 64, dtype=np.float32)), 64)
        pq.write_table(
            pa.table({"id": ids, "text": text, "emb": emb}),
            root / f"p{f}.parquet",
            row_group_size=int(rng.integers(700, 1500)),
        )
    return root


def _epoch(ds: StreamingDataset, epoch: int) -> list[tuple[list[int], list[str], float]]:
    ds.set_epoch(epoch)
    return [(b["id"].tolist(), b["text"].tolist(), float(np.asarray(b["emb"]).sum())) for b in ds]


def test_epochs_on_kept_memory_give_the_batches_of_fresh_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    anonymous = memory._anonymous
    monkeypatch.setattr(memory, "_anonymous", lambda n: made.append(n) or anonymous(n))
    root = _data(tmp_path)
    kw = dict(
        batch_size=64, shuffle=True, seed=5, batch_format="numpy", num_workers=None, progress=False
    )
    ds = StreamingDataset(str(root), interleave=4, **kw)  # several windows per epoch
    first = _epoch(ds, 0)
    assert made and ds._memory.mapped > 0
    maps = len(made)
    again, other = _epoch(ds, 0), _epoch(ds, 1)
    assert len(made) == maps  # the later epochs took the first one's mappings
    assert again == first
    assert other == _epoch(
        StreamingDataset(str(root), interleave=4, **kw), 1
    )  # fresh memory, same batches
    ids = [i for b, _, _ in other for i in b]
    assert (
        len(ids) == len(set(ids)) == sum(len(b) for b, _, _ in first)
    )  # no row twice (each epoch its own tail)
