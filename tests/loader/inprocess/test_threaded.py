"""The in-process threaded path: the plan's batches exactly, the worker path's values,
batches as views of the gathered buffers, threads gone after an early stop, and a
corrupt unit raised in the loop naming file and unit."""

from __future__ import annotations

import gc
import logging
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from _loaderdata import make_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

import shardwise.loader.batches.arrival as arrival
import shardwise.loader.batches.piece_maker as piece_maker
import shardwise.loader.batches.pieces as pieces
import shardwise.loader.batches.windows as window_builder
import shardwise.loader.inprocess.threaded as threaded
from shardwise import ConfigError, FormatError, StreamingDataset
from shardwise.loader.batches.pieces import cut_pieces

N = 3001


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("threaded") / "ds", N, files=5)


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Columns of many kinds, some with nulls in some row groups."""
    root = tmp_path_factory.mktemp("typed")
    rng = np.random.default_rng(1)
    start = 0
    for f, n in enumerate((400, 650, 300)):
        ids = np.arange(start, start + n)
        lens = rng.integers(0, 9, n)
        table = pa.table(
            {
                "id": ids,
                "x": (ids * 0.25).astype(np.float32),
                "flag": ids % 3 == 0,
                "score": pa.array([None if f == 1 and i % 5 == 0 else float(i) for i in ids]),
                "text": [f"t{i}" * (i % 4) for i in ids],
                "at": pa.array(ids * 1_000_000_007, pa.timestamp("ns")),
                "emb": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.repeat(ids, 4).astype(np.float16)), 4
                ),
                "tokens": pa.array(
                    [list(range(i, i + k)) for i, k in zip(ids.tolist(), lens.tolist())],
                    pa.list_(pa.int32()),
                ),
                "meta": pa.array(  # a struct with a nested list, some null
                    [None if i % 7 == 0 else {"a": list(range(i % 3)), "s": f"m{i}"} for i in ids],
                    pa.struct([("a", pa.list_(pa.int64())), ("s", pa.string())]),
                ),
            }
        )
        pq.write_table(table, root / f"t{f}.parquet", row_group_size=int(rng.integers(90, 250)))
        start += n
    return root


def _ids(batch: Any) -> list[int]:
    ids = batch.column("id") if isinstance(batch, pa.RecordBatch) else batch["id"]
    return [int(i) for i in (ids.to_pylist() if isinstance(ids, pa.Array) else ids)]


@settings(max_examples=40, deadline=None)
@given(
    world=st.integers(1, 4),
    rank_seed=st.integers(0, 99),
    bs=st.integers(1, 300),
    interleave=st.integers(1, 9),
    seed=st.integers(0, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    threads=st.integers(1, 3),
    fmt=st.sampled_from(["numpy", "torch", "arrow"]),
)
def test_batches_are_the_plans_for_one_worker(
    data: Path,
    world: int,
    rank_seed: int,
    bs: int,
    interleave: int,
    seed: int,
    shuffle: bool,
    drop_last: bool,
    threads: int,
    fmt: str,
) -> None:
    rank = rank_seed % world
    ds = StreamingDataset(
        str(data),
        batch_size=bs,
        rank=rank,
        world_size=world,
        seed=seed,
        shuffle=shuffle,
        drop_last=drop_last,
        interleave=interleave,
        batch_format=fmt,
        num_threads=threads,
        columns=["id", "x"],
    )
    starts = np.cumsum([0, *ds.counts.tolist()])
    expected = [
        [int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(rank)
    ]
    assert [_ids(b) for b in ds] == expected


@pytest.mark.parametrize(
    ("fmt", "pad_to"), [("numpy", None), ("numpy", "longest"), ("torch", 6), ("arrow", None)]
)
def test_values_equal_the_dataloader_worker_path(typed: Path, fmt: str, pad_to: Any) -> None:
    def make() -> Any:
        return StreamingDataset(
            str(typed),
            batch_size=32,
            seed=4,
            interleave=3,
            batch_format=fmt,
            pad_to=pad_to,
            prefetch_bytes=2**16,
        )

    here = list(make())
    there = list(DataLoader(make(), batch_size=None, num_workers=1))
    assert len(here) == len(there) == 1350 // 32
    for a, b in zip(here, there):
        if fmt == "arrow":
            assert a.equals(b)
            continue
        assert list(a) == list(b)
        for k in a:
            if isinstance(a[k], torch.Tensor):
                assert a[k].dtype == b[k].dtype and torch.allclose(
                    a[k], b[k], rtol=0, atol=0, equal_nan=True
                ), k
            elif isinstance(a[k], list):
                assert a[k] == b[k], k
            else:
                assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
                assert [repr(v) for v in a[k].tolist()] == [repr(v) for v in b[k].tolist()], k


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_windows_built_as_units_arrive_and_gathered_give_the_worker_paths_values(
    typed: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # numbers, a fixed-size list, strings: windows are built as their units arrive, except
    # those with a unit whose "score" has nulls (gathered by pieces); pieces span both kinds
    built: list[bool] = []
    original = arrival.ArrivalWindow.complete

    def recording(self: Any) -> bool:
        built.append(original(self))
        return built[-1]

    monkeypatch.setattr(arrival.ArrivalWindow, "complete", recording)
    monkeypatch.setattr(pieces, "PIECE_ROWS", 64)

    def make() -> Any:
        return StreamingDataset(
            str(typed),
            batch_size=16,
            seed=2,
            interleave=2,
            batch_format=fmt,
            columns=["id", "x", "score", "text", "emb"],
            prefetch_bytes=2**16,
        )

    here = list(make())
    there = list(DataLoader(make(), batch_size=None, num_workers=1))
    assert True in built and False in built
    assert len(here) == len(there) == 1350 // 16
    for a, b in zip(here, there):
        assert list(a) == list(b)
        for k in a:
            if isinstance(a[k], list):
                assert a[k] == b[k], k
            else:
                x, y = np.asarray(a[k]), np.asarray(b[k])
                assert x.dtype == y.dtype and x.shape == y.shape, k
                assert [repr(v) for v in x.tolist()] == [repr(v) for v in y.tolist()], k


@pytest.mark.parametrize("path", ["direct", "dataloader-0", "dataloader-1"])
def test_torch_string_columns_are_numpy_object_arrays_on_every_path(typed: Path, path: str) -> None:
    # strings (and variable-length lists, without pad_to) of torch batches: one numpy object
    # array per batch, which torch's default_convert passes as it is (a list it would walk);
    # timestamps, which no tensor holds, stay a list of their values
    ds = StreamingDataset(
        str(typed),
        batch_size=16,
        seed=3,
        interleave=2,
        batch_format="torch",
        columns=["id", "text", "tokens", "at"],
        prefetch_bytes=2**16,
    )
    if path == "direct":
        batches = list(ds)
    else:
        batches = list(DataLoader(ds, batch_size=None, num_workers=int(path[-1])))
    assert len(batches) == 1350 // 16
    for batch in batches:
        ids = batch["id"].tolist()
        assert isinstance(batch["id"], torch.Tensor)
        for name in ("text", "tokens"):
            assert (
                type(batch[name]) is np.ndarray
                and batch[name].dtype == object
                and batch[name].shape == (16,)
            )
        assert batch["text"].tolist() == [f"t{i}" * (i % 4) for i in ids]
        assert all(list(v) == list(range(i, i + len(v))) for i, v in zip(ids, batch["tokens"]))
        assert isinstance(batch["at"], list) and batch["at"] == [i * 1_000_000_007 for i in ids]


def _inside(ptr: int, nbytes: int, bases: list[np.ndarray]) -> bool:
    return any(
        base.ctypes.data <= ptr and ptr + nbytes <= base.ctypes.data + base.nbytes for base in bases
    )


def test_torch_batches_share_storage_with_the_gathered_buffers(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gathered: list[
        np.ndarray
    ] = []  # what rows were gathered into: pieces of unit tables or of windows
    packaged: list[np.ndarray] = []  # what batches are cut from
    original, original_piece, original_package = (
        piece_maker.gather_columns,
        arrival.ArrivalWindow.piece,
        piece_maker.PieceMaker._package,
    )

    def recording(*args: Any, **kwargs: Any) -> Any:
        columns = original(*args, **kwargs)
        gathered.extend(c for c in columns if isinstance(c, np.ndarray))
        return columns

    def recording_piece(self: Any, lo: int, hi: int) -> Any:
        columns = original_piece(self, lo, hi)
        gathered.extend(c for c in columns if isinstance(c, np.ndarray))
        return columns

    def recording_package(self: Any, arr: np.ndarray) -> Any:
        packaged.append(arr)
        return original_package(self, arr)

    monkeypatch.setattr(piece_maker, "gather_columns", recording)
    monkeypatch.setattr(arrival.ArrivalWindow, "piece", recording_piece)
    monkeypatch.setattr(piece_maker.PieceMaker, "_package", recording_package)
    monkeypatch.setattr(pieces, "PIECE_ROWS", 128)  # many pieces of these 3,001 rows
    ds = StreamingDataset(
        str(data), batch_size=64, interleave=2, batch_format="torch", columns=["id", "x"]
    )
    batches = list(ds)
    assert gathered and len({c.ctypes.data for c in gathered}) == len(
        gathered
    )  # new buffers each time
    for batch in batches:
        for name in ("id", "x"):
            tensor = batch[name]
            ptr, nbytes = tensor.data_ptr(), tensor.numel() * tensor.element_size()
            assert _inside(ptr, nbytes, packaged), "a batch tensor is not a view of its piece"
            assert tensor.untyped_storage().data_ptr() in {
                p.ctypes.data for p in packaged
            }  # no copy
    # pieces are views of the gathered buffers, except where a piece spans two windows (joined once)
    joined = [p for p in packaged if not _inside(p.ctypes.data, p.nbytes, gathered)]
    assert len(joined) < 2 * ds.index.num_units and len(joined) < len(packaged) / 2
    before = len(gathered)
    numpy_batch = next(
        iter(StreamingDataset(str(data), batch_size=64, batch_format="numpy", columns=["id"]))
    )
    assert any(np.shares_memory(numpy_batch["id"], c) for c in gathered[before:])
    assert numpy_batch["id"].flags.writeable


def _loader_threads() -> list[threading.Thread]:
    names = ("shardwise-loader", "shardwise-prefetch", "shardwise-columns")
    return [t for t in threading.enumerate() if t.name.startswith(names)]


@pytest.mark.parametrize("through_dataloader", [False, True])
def test_breaking_out_stops_the_threads_and_frees_the_units(
    data: Path, through_dataloader: bool
) -> None:
    ds = StreamingDataset(
        str(data), batch_size=16, interleave=2, batch_format="numpy", num_threads=3
    )
    gc.collect()
    before = _arrow_bytes()
    source = DataLoader(ds, batch_size=None, num_workers=0) if through_dataloader else ds
    for step, _ in enumerate(source):
        if step == 5:
            assert _loader_threads(), "the batches were not made on loader threads"
            break
    del source, _
    gc.collect()
    assert _loader_threads() == []
    assert _arrow_bytes() - before < 2**16  # decoded units released


def _arrow_bytes() -> int:
    """Bytes Arrow holds in every allocator (streaming switches the default to jemalloc)."""
    pools = [pa.system_memory_pool()]
    for make in (pa.jemalloc_memory_pool, pa.mimalloc_memory_pool):
        try:
            pools.append(make())
        except (NotImplementedError, pa.ArrowNotImplementedError):
            pass
    return sum(p.bytes_allocated() for p in pools)


@pytest.mark.timeout(120)
def test_a_corrupt_unit_reaches_the_loop_naming_file_and_row_group(tmp_path: Path) -> None:
    make_parquet(tmp_path, 2000, files=2)
    victim = sorted(tmp_path.glob("*.parquet"))[1]
    ds = StreamingDataset(
        str(tmp_path), batch_size=10, batch_format="numpy", shuffle=False, interleave=1
    )
    meta = pq.ParquetFile(victim).metadata
    col = meta.row_group(1).column(3)  # the text column's pages of row group 1
    raw = bytearray(victim.read_bytes())
    start = col.data_page_offset
    raw[start : start + col.total_compressed_size] = b"\xff" * col.total_compressed_size
    victim.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match=rf"{victim.name}.*row group 1"):
        for _ in ds:
            pass
    gc.collect()
    assert _loader_threads() == []


def test_pieces_cover_the_windows_in_order() -> None:
    pieces = cut_pieces([5, 0, 7, 3], 4)
    assert [sum(hi - lo for _, lo, hi in p) for p in pieces] == [4, 4, 4, 3]
    flat = [(w, i) for p in pieces for w, lo, hi in p for i in range(lo, hi)]
    assert flat == [(w, i) for w, n in enumerate([5, 0, 7, 3]) for i in range(n)]


def test_num_threads_is_checked_and_pin_memory_says_it_does_nothing_on_cpu(
    data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(ConfigError, match="num_threads"):
        StreamingDataset(str(data), batch_format="numpy", num_threads=0)
    ds = StreamingDataset(
        str(data), batch_size=8, batch_format="torch", pin_memory=True, columns=["id"]
    )
    with caplog.at_level(logging.INFO, logger="shardwise.loader.batches.piece_maker"):
        batch = next(iter(ds))
    assert isinstance(batch["id"], torch.Tensor) and not batch["id"].is_pinned()
    assert "pin_memory=True has no effect" in caplog.text


def test_first_units_are_read_while_the_order_is_worked_out(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardwise.plan.worker_share import WorkerPlan

    ds = StreamingDataset(str(data), batch_size=32, interleave=3, batch_format="numpy", seed=4)
    starts = np.cumsum([0, *ds.counts.tolist()])
    expected = [
        [int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)
    ]
    reading = threading.Event()
    seen: list[bool] = []
    original_load, original_windows = window_builder.unit_loader, WorkerPlan.iter_windows

    def recording_loader(*args: Any) -> Any:
        load = original_load(*args)

        def load_unit(u: int) -> Any:
            reading.set()
            return load(u)

        return load_unit

    def windows(self: WorkerPlan) -> Any:
        seen.append(reading.wait(10))  # a unit is being read before the order exists
        return original_windows(self)

    monkeypatch.setattr(window_builder, "unit_loader", recording_loader)
    monkeypatch.setattr(WorkerPlan, "iter_windows", windows)
    got = [_ids(b) for b in ds]
    assert seen == [True]
    assert got == expected  # the plan's batches


@pytest.mark.parametrize(
    ("fmt", "columns"),
    [
        ("numpy", ["id", "text", "tokens"]),
        ("arrow", ["id", "text"]),
        ("numpy", ["id", "text"]),
        ("torch", ["id", "text"]),
    ],
)
def test_strings_stay_arrow_until_a_batch_is_cut(typed: Path, fmt: str, columns: list[str]) -> None:
    from shardwise.loader.batches.reading import Reading

    ds = StreamingDataset(str(typed), batch_size=32, batch_format=fmt, columns=columns)
    reading = Reading(ds.index, ds.columns, None, "raise", ds.batch_format, 32, 3, 2**20)
    table, views = window_builder.unit_loader(reading)(1)
    original = reading.loader()(1).column("text")
    assert (
        table.column("text").equals(original) and views[(1, 1)] is None
    )  # no objects made on reading
    if fmt == "arrow":
        return
    texts = [
        b["text"] for b in ds
    ]  # a batch's strings: a numpy array of Python objects, made as it is cut
    assert all(isinstance(t, np.ndarray) and t.dtype == object and len(t) == 32 for t in texts)
    by_id = {i: t for b in ds for i, t in zip(np.asarray(b["id"]).tolist(), b["text"].tolist())}
    whole = pa.concat_tables(reading.loader()(u) for u in range(ds.index.num_units))
    assert by_id == {
        i: whole.column("text")[k].as_py()
        for k, i in enumerate(whole.column("id").to_pylist())
        if i in by_id
    }


@pytest.mark.parametrize(("value_bytes", "batch"), [(100, 64), (200_000, 64), (200_000, 4)])
@pytest.mark.parametrize("prefetch", [256 << 20, 4096])
def test_pieces_and_the_pieces_ahead_are_sized_by_bytes(
    tmp_path: Path, value_bytes: int, batch: int, prefetch: int
) -> None:
    from shardwise.loader.batches.reading import Reading

    rng = np.random.default_rng(0)
    values = [
        rng.bytes(value_bytes) for _ in range(200)
    ]  # random: stored about as large as decoded
    pq.write_table(
        pa.table({"id": np.arange(200), "blob": values}), tmp_path / "a.parquet", row_group_size=50
    )
    ds = StreamingDataset(str(tmp_path), batch_size=batch, batch_format="numpy", progress=False)
    reading = Reading(ds.index, None, None, "raise", "numpy", batch, 4, prefetch, num_threads=2)
    rows, ahead = threaded.pacing(reading, [list(range(ds.index.num_units))])
    assert rows % batch == 0 and 4 <= ahead <= 16
    if prefetch < (1 << 20):  # a small read-ahead budget: the least, 2 pieces per thread
        assert ahead == 4
    piece_bytes = rows * 2 * value_bytes  # as estimated (twice the stored bytes)
    if (
        value_bytes > 1000
    ):  # wide rows: pieces of about PIECE_BYTES (at least a batch), fewer of them ahead
        assert rows == max(batch, pieces.PIECE_BYTES // (2 * value_bytes) // batch * batch)
        assert ahead * piece_bytes <= max(threaded.AHEAD_BYTES, 4 * piece_bytes) * 1.1
    else:
        assert rows == reading.piece_rows(pieces.PIECE_ROWS)
        assert ahead == (16 if prefetch > (1 << 20) else 4)  # small rows: up to 8 pieces per thread
    got = [i for b in ds for i in _ids(b)]  # the batches still come out, whole and each sample once
    assert len(got) == len(set(got)) >= 200 - 200 % batch - batch and len(got) % batch == 0


def test_the_first_batches_go_out_before_the_later_windows_are_built(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = StreamingDataset(str(data), batch_size=32, interleave=1, batch_format="numpy", seed=4)
    starts = np.cumsum([0, *ds.counts.tolist()])
    expected = [
        [int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)
    ]
    built: list[int] = []
    original = window_builder.WindowBuilder.window

    def window(self: Any, w: int, order: Any) -> Any:
        built.append(w)
        return original(self, w, order)

    monkeypatch.setattr(window_builder.WindowBuilder, "window", window)
    monkeypatch.setattr(threaded, "pacing", lambda reading, windows: (32, 1000))  # all ahead
    it = iter(ds)
    got = [_ids(next(it))]
    at_first = len(built)
    got += [_ids(b) for b in it]
    assert len(set(built)) > 2  # several windows, one unit each
    assert at_first == 1  # only the first window before the first batch
    assert got == expected  # the plan's batches, in order


def test_a_slow_first_unit_does_not_hold_up_the_rest_of_the_first_window(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first window's units are all read before its first batch: while one of them is
    slow, the other thread reads every other unit of the window, not only the few a
    later window's read-ahead allows (4 with 2 threads)."""
    ds = StreamingDataset(str(data), batch_size=32, first_window=None, batch_format="arrow", seed=4)
    assert len(ds.counts) >= 8  # one window of all of them (whole units)
    starts = np.cumsum([0, *ds.counts.tolist()])
    expected = [
        [int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)
    ]
    started: list[int] = []
    lock = threading.Lock()
    others_read: list[bool] = []
    original_load = window_builder.unit_loader

    def recording_loader(*args: Any) -> Any:
        load = original_load(*args)

        def load_unit(u: int) -> Any:
            with lock:
                started.append(u)
                slow = len(started) == 1
            if slow:  # the epoch's first read waits for the window's 7 others to start
                deadline = time.monotonic() + 10
                while len(started) < 8 and time.monotonic() < deadline:
                    time.sleep(0.005)
                others_read.append(len(started) >= 8)
            return load(u)

        return load_unit

    monkeypatch.setattr(window_builder, "unit_loader", recording_loader)
    got = [_ids(b) for b in ds]
    assert others_read == [True]
    assert got == expected  # the plan's batches


@pytest.mark.parametrize("first_window", [None, "heads"])
def test_the_first_piece_is_the_first_batch_alone(
    data: Path, monkeypatch: pytest.MonkeyPatch, first_window: str | None
) -> None:
    """The first batch waits for its window and its own rows, not for a whole piece of
    batches made after it (whole units: one batch; head windows: the head window's whole
    batches); the later pieces are as large as ever, and the batches are the plan's."""
    ds = StreamingDataset(
        str(data), batch_size=16, first_window=first_window, batch_format="arrow", seed=2
    )
    starts = np.cumsum([0, *ds.counts.tolist()])
    expected = [
        [int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)
    ]
    sizes: list[int] = []
    made = piece_maker.PieceMaker.made

    def recording(self: Any, parts: Any) -> Any:
        sizes.append(sum(hi - lo for _, lo, hi in parts))
        return made(self, parts)

    monkeypatch.setattr(piece_maker.PieceMaker, "made", recording)
    got = [_ids(b) for b in ds]
    assert got == expected
    if first_window is None:
        assert sizes[0] == 16 < max(sizes)
    else:
        head_window = int((ds.counts // ds.blocks).sum())  # one group: every unit's head
        assert ds.blocks > 1 and sizes[0] == head_window // 16 * 16


def test_the_heap_is_warmed_for_a_batch_of_wide_objects_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of wide binary values (images) becomes Python objects on the training
    thread: the heap is warmed for about their stored bytes while the first window is read;
    numbers (views) and narrow strings need nothing."""
    from shardwise.loader.batches.reading import Reading

    rng = np.random.default_rng(1)
    shapes = {
        "wide": {"id": np.arange(200), "image": [rng.bytes(20_000) for _ in range(200)]},
        "narrow": {"id": np.arange(200), "text": [f"row {i}" for i in range(200)]},
        "numbers": {
            "emb": pa.array(
                list(rng.random((200, 2048), dtype=np.float32)), pa.list_(pa.float32(), 2048)
            )
        },
    }
    got = {}
    for name, columns in shapes.items():
        (tmp_path / name).mkdir()
        pq.write_table(pa.table(columns), tmp_path / name / "a.parquet", row_group_size=50)
        ds = StreamingDataset(
            str(tmp_path / name), batch_size=32, batch_format="numpy", progress=False
        )
        units = [list(range(ds.index.num_units))]
        for fmt in ("numpy", "torch", "arrow"):
            reading = Reading(ds.index, None, None, "raise", fmt, 32, 4, 1 << 30, num_threads=2)
            got[name, fmt] = threaded.object_bytes(reading, units)
    assert 32 * 20_000 <= got["wide", "numpy"] == got["wide", "torch"] <= 32 * 21_000
    assert got["wide", "arrow"] == 0
    assert {got[n, f] for n in ("narrow", "numbers") for f in ("numpy", "torch", "arrow")} == {0}
    asked: list[int] = []
    monkeypatch.setattr(threaded, "warm_heap", asked.append)
    ds = StreamingDataset(
        str(tmp_path / "wide"), batch_size=32, batch_format="numpy", progress=False
    )
    assert sum(len(b["id"]) for b in ds) == 192
    assert asked == [got["wide", "numpy"]]
    monkeypatch.setenv("SHARDWISE_KEEP_FREED", "0")  # the allocator left alone
    assert sum(len(b["id"]) for b in ds) == 192
    assert asked == [got["wide", "numpy"]]
