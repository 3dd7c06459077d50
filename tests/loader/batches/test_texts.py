"""A window's text kept as bytes and views: any piece of it is the plan's values, in order."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise.loader.batches.texts as texts
from shardwise.loader.batches.texts import WindowTexts, batch_objects

TYPES = {
    "string": pa.string(),
    "large_string": pa.large_string(),
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
}


def _unit(rng: np.random.Generator, rows: int, t: pa.DataType, nulls: bool, tag: int) -> pa.Table:
    values: list[object] = []
    for r in range(rows):
        if nulls and rng.random() < 0.2:
            values.append(None)
            continue
        s = f"u{tag}r{r}é" * int(rng.integers(0, 4))  # some empty, some not ASCII
        values.append(s.encode() if pa.types.is_binary(t) or pa.types.is_large_binary(t) else s)
    arr = pa.array(values, type=t)
    if rows > 2 and rng.random() < 0.5:  # a sliced array: offsets that do not start at 0
        arr = pa.concat_arrays([pa.array(values[:1], type=t), arr]).slice(1)
    if rows > 3 and rng.random() < 0.3:  # a column of two chunks
        cut = int(rng.integers(1, rows))
        return pa.table(
            {"id": np.arange(rows), "text": pa.chunked_array([arr.slice(0, cut), arr.slice(cut)])}
        )
    return pa.table({"id": np.arange(rows), "text": arr})


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    units=st.integers(1, 6),
    kind=st.sampled_from(sorted(TYPES)),
    nulls=st.booleans(),
    small=st.booleans(),
    threads=st.integers(1, 3),
    wide=st.sampled_from([0, 1, 6]),
)
def test_pieces_are_the_windows_values_in_order(
    seed: int, units: int, kind: str, nulls: bool, small: bool, threads: int, wide: int
) -> None:
    rng = np.random.default_rng(seed)
    t = TYPES[kind]
    tables = [_unit(rng, int(rng.integers(0, 40)), t, nulls, u) for u in range(units)]
    # the window: some rows of each unit, some twice (a repeated source), in a shuffled order
    pairs = [
        (u, r) for u, tb in enumerate(tables) for r in range(tb.num_rows) if rng.random() < 0.8
    ]
    pairs += [pairs[i] for i in rng.integers(0, len(pairs), len(pairs) // 5)] if pairs else []
    pairs = [pairs[i] for i in rng.permutation(len(pairs))]
    unit_ids = np.array([u for u, _ in pairs], dtype=np.int64)
    rows = np.array([r for _, r in pairs], dtype=np.int64)
    old, old_wide = texts.MAX_SEGMENT, texts.WIDE
    texts.MAX_SEGMENT = 16 if small else old  # many segments, and units copied in parts
    texts.WIDE = wide or old_wide  # pieces of wide values kept as views of the window
    starts = np.cumsum([0, *[t.num_rows for t in tables]])
    try:
        window = WindowTexts(tables[0].schema, [1], int(starts[-1]))
        with ThreadPoolExecutor(
            threads
        ) as pool:  # units arrive in any order, written on any thread
            writes = [
                pool.submit(window.add, u, tables[u], int(starts[u]))
                for u in rng.permutation(units).tolist()
            ]
            for w in writes:
                w.result()
    finally:
        texts.MAX_SEGMENT, texts.WIDE = old, old_wide
    expected = [tables[u].column("text")[r].as_py() for u, r in pairs]
    cuts = sorted({0, len(pairs), *rng.integers(0, len(pairs) + 1, 3).tolist()})
    got: list[object] = []
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        (piece,) = window.piece((starts[unit_ids] + rows)[lo:hi])
        assert len(piece) == hi - lo
        got += batch_objects(piece).tolist()
    assert got == expected


def test_batch_objects_are_python_strings_bytes_and_none() -> None:
    got = batch_objects(pa.array(["a", None, "ü"], type=pa.large_string()))
    assert got.dtype == object and got.tolist() == ["a", None, "ü"]
    assert batch_objects(pa.array([b"\x00\xff", None], type=pa.binary())).tolist() == [
        b"\x00\xff",
        None,
    ]


@pytest.mark.parametrize("nbytes", [0, 10, 3 << 20])
def test_window_memory_is_writable_bytes(nbytes: int) -> None:
    from shardwise.loader.batches.memory import window_memory

    buf = window_memory(nbytes)
    assert buf.dtype == np.uint8 and len(buf) == nbytes and buf.flags.writeable
    buf[:] = 7
    assert int(buf.sum()) == 7 * nbytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_map_pages_maps_a_range_before_it_is_written() -> None:
    import resource

    from shardwise.loader.batches.memory import map_pages, window_memory

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    fresh = window_memory(16 << 20)
    before = faults()
    fresh[:] = 1  # page by page: a fault per 4 KiB page
    by_writing = faults() - before
    mapped = window_memory(16 << 20)
    map_pages(mapped[5:])  # an unaligned start: its first partial page is left to the write
    before = faults()
    mapped[:] = 1
    after_mapping = faults() - before
    assert by_writing > 1000 and after_mapping < by_writing // 10
    assert int(mapped.sum()) == 16 << 20


def test_without_views_keeps_values_in_types_the_loader_can_take() -> None:
    from shardwise.loader.read.values import without_views

    n = 6
    table = pa.table(
        {
            "sv": pa.array(
                ["a", None, "long enough to leave the view", "", "é", "x" * 13], pa.string_view()
            ),
            "bv": pa.array([b"\x00", b"", None, b"y" * 20, b"z", b"w"], pa.binary_view()),
            "l": pa.array(
                [["p", None], [], None, ["q" * 14], ["r"], ["s"]], pa.list_(pa.string_view())
            ),
            "ll": pa.array(
                [[b"1"], [b"2" * 13], [], None, [b"3"], [b"4"]], pa.large_list(pa.binary_view())
            ),
            "st": pa.array(
                [{"k": "v" * (i + 10)} for i in range(n)], pa.struct([("k", pa.string_view())])
            ),
            "mp": pa.array([[("k", "v")]] * n, pa.map_(pa.string_view(), pa.string_view())),
            "lv": pa.ListViewArray.from_arrays(
                pa.array([0, 2, 2, 2, 3, 3], pa.int32()),
                pa.array([2, 0, 1, 1, 0, 1], pa.int32()),
                pa.array([1, 2, 3, 4]),
            ),
            "plain": pa.array(range(n)),
        }
    )
    out = without_views(table)
    assert out.to_pylist() == table.to_pylist()
    assert (
        out.schema.field("sv").type == pa.large_string()
        and out.schema.field("bv").type == pa.large_binary()
    )
    assert out.schema.field("l").type.value_type == pa.large_string()
    assert out.schema.field("ll").type.value_type == pa.large_binary()
    assert out.schema.field("st").type.field(0).type == pa.large_string()
    assert out.schema.field("mp").type.key_type == pa.large_string()
    assert out.schema.field("lv").type == table.schema.field("lv").type  # take handles list views
    assert out.take([5, 0]).num_rows == 2  # what the loader's gathers do
    plain = table.select(["plain"])
    assert without_views(plain) is plain  # nothing to change: the same table
