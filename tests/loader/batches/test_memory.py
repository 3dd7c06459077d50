"""A dataset's window memory: a mapping is handed out again only once nothing refers to
it, resized to the request with the pages it keeps still mapped, with the free ones
bounded; epochs that reuse it give the same batches as fresh memory."""

from __future__ import annotations

import mmap
import pickle
import resource
from pathlib import Path
from typing import Any

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


def _thread_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def test_a_free_mapping_is_resized_for_the_next_request_keeping_its_pages() -> None:
    pool = WindowMemory()
    a = pool.take(8 * MB)  # mapped with 1/8 more room: 9 MB
    first = _address(a)
    a[:] = 7
    del a
    assert _address(pool.take(9 * MB)) == first  # a slightly larger column fits the room
    big = pool.take(40 * MB)  # the free 9 MB, grown
    assert pool.mapped == 45 * MB and len(pool._maps) == 1
    assert int(big[: 8 * MB].min()) == 7  # its pages moved with it, as they were
    before = _thread_faults()
    big[: 8 * MB] = 1
    kept = _thread_faults() - before
    big[8 * MB :] = 1
    grown = _thread_faults() - before - kept
    assert kept < 64 and grown >= 32 * MB // memory.PAGE  # only the grown part is new
    del big
    small = pool.take(4 * MB)  # the free 45 MB, shrunk: its other pages go back
    assert pool.mapped == 4 * MB + MB // 2 and len(pool._maps) == 1
    assert len(pool.take(SMALL - 1)) == SMALL - 1 and pool.mapped == len(small) + MB // 2


def test_a_much_larger_free_mapping_is_kept_for_a_larger_column_within_the_high_mark() -> None:
    pool = WindowMemory()
    a, b = pool.take(64 * MB), pool.take(64 * MB)  # 144 MB in use at once
    addresses = {_address(a), _address(b)}
    del a, b
    s1 = pool.take(8 * MB)  # no room under 144 MB for a new one: a 72 MB one shrinks
    assert pool.mapped == 72 * MB + 9 * MB
    s2 = pool.take(8 * MB)  # room now: a new mapping, the free 72 MB kept
    assert _address(s2) not in addresses and pool.mapped == 72 * MB + 18 * MB
    assert _address(pool.take(64 * MB)) in addresses  # the larger column gets it
    assert len({_address(s1), _address(s2)}) == 2


def test_free_mappings_are_kept_up_to_the_most_bytes_in_use_at_once() -> None:
    pool = WindowMemory()
    held = [pool.take(4 * MB) for _ in range(4)]  # 18 MB in use at once
    del held
    assert pool.mapped == 4 * (4 * MB + MB // 2)
    big = pool.take(64 * MB)  # one free mapping grown: the rest go past the most in use
    assert pool.mapped == 72 * MB and len(pool._maps) == 1
    del big
    assert pool.take(60 * MB) is not None and pool.mapped == 72 * MB  # the 72 MB one again


def test_a_small_first_request_keeps_the_larger_free_mappings() -> None:
    """As at an epoch's start: every mapping is free, and the next window's first column is
    small. The larger ones stay for its larger columns."""
    pool = WindowMemory()
    held = [pool.take(n * MB) for n in (4, 16, 64)]
    large = _address(held[2])
    del held
    first = pool.take(2 * MB)
    assert pool.mapped == 2 * MB + MB // 4 + 18 * MB + 72 * MB
    assert _address(pool.take(64 * MB)) == large and len(first) == 2 * MB


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


KW: dict[str, Any] = dict(
    batch_size=64, shuffle=True, seed=5, batch_format="numpy", num_workers=None, progress=False
)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the new mappings window memory makes from now on."""
    sizes: list[int] = []
    anonymous = memory._anonymous
    monkeypatch.setattr(memory, "_anonymous", lambda n: sizes.append(n) or anonymous(n))
    return sizes


def test_epochs_on_kept_memory_give_the_batches_of_fresh_memory(
    tmp_path: Path, made: list[int]
) -> None:
    root = _data(tmp_path)
    ds = StreamingDataset(str(root), interleave=4, **KW)  # several windows per epoch
    first = _epoch(ds, 0)
    assert made and ds._memory.mapped > 0
    maps = len(made)
    again, other = _epoch(ds, 0), _epoch(ds, 1)
    assert len(made) == maps  # the later epochs took the first one's mappings
    assert again == first
    assert other == _epoch(
        StreamingDataset(str(root), interleave=4, **KW), 1
    )  # fresh memory, same batches
    ids = [i for b, _, _ in other for i in b]
    assert (
        len(ids) == len(set(ids)) == sum(len(b) for b, _, _ in first)
    )  # no row twice (each epoch its own tail)


def test_a_pickled_copy_reuses_window_memory_of_its_own(tmp_path: Path, made: list[int]) -> None:
    """As a DataLoader worker started by spawn or forkserver gets the dataset."""
    ds = StreamingDataset(str(_data(tmp_path)), interleave=4, **KW)
    copy = pickle.loads(pickle.dumps(ds))
    assert isinstance(copy._memory, WindowMemory) and copy._memory is not ds._memory
    first = _epoch(copy, 0)
    maps = len(made)
    assert maps and _epoch(copy, 1) and len(made) == maps  # its second epoch took no new one
    assert first == _epoch(ds, 0)


class _NoRemap(mmap.mmap):
    """An anonymous mapping where ``mremap`` is missing: its ``resize`` fails."""

    def resize(self, newsize: int) -> None:
        raise SystemError("mmap: resizing not available--no mremap()")


def test_without_mremap_a_request_no_free_mapping_holds_gets_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    monkeypatch.setattr(memory, "_anonymous", lambda n: _NoRemap(-1, n, flags=flags))
    pool = WindowMemory()
    a = pool.take(8 * MB)
    first = _address(a)
    del a
    b = pool.take(40 * MB)  # the free 9 MB one cannot grow: a new mapping
    assert _address(b) != first and len(b) == 40 * MB
    b[:] = 3
    assert int(b.sum()) == 3 * 40 * MB
    assert pool.mapped == 45 * MB  # the free 9 MB went: past the most in use at once
    del b
    c = pool.take(8 * MB)  # the free 45 MB one cannot shrink: a new one, and it goes
    assert len(c) == 8 * MB and pool.mapped == 9 * MB
