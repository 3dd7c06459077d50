"""Head windows in the loader (``first_window="heads"``): the plan's batches exactly on
the in-process path and through 2 real DataLoader workers, every row once with the values
of whole reads, heads read alone, exact resumes on the same and other topologies, and
states that do not mix head windows with whole ones."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _loaderdata import make_parquet
from _partsdata import check_head_and_rest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from shardwise import StreamingDataset
from shardwise.errors import ConfigError, PlanError
from shardwise.loader.batches.pieces import cut_pieces
from shardwise.loader.read import unit_heads
from shardwise.loader.read.unit_heads import unit_parts
from shardwise.loader.read.units import UnitReader
from shardwise.plan.blocks import BLOCKS_LAYOUT

N, BATCH = 6000, 16


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("heads") / "ds", N, files=3, seed=2)


def _ds(data: Path, **kw: Any) -> Any:
    args: dict[str, Any] = dict(batch_size=BATCH, seed=5, batch_format="numpy", interleave=8)
    return StreamingDataset(str(data), first_window="heads", **(args | kw))


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in np.asarray(batch["id"]).ravel()]


def _planned(ds: Any, rank: int, workers: int) -> list[list[int]]:
    """The plan's batches as ids: the ``r``-th row of unit ``u`` as reading yields it."""
    reader = UnitReader(ds.index, ["id"], filter=ds.filter)
    ids = [reader.read(u).column("id").to_numpy() for u in range(ds.index.num_units)]
    batches = ds.plan(num_workers=workers).rank_batches(rank)
    return [[int(ids[u][r]) for u, r in b] for b in batches]


def test_blocks_are_chosen_and_the_first_batch_is_made_of_heads(data: Path) -> None:
    ds = _ds(data)
    assert ds.blocks > 1
    first = ds.plan(num_workers=1).rank_batches(0)[0]
    heads = ds.counts // ds.blocks
    assert all(r < heads[u] for u, r in first)  # only heads: read after 1/k of every unit
    assert StreamingDataset(str(data), batch_size=BATCH, first_window=None).blocks == 1


@settings(max_examples=15, deadline=None)
@given(
    world=st.integers(1, 3),
    bs=st.integers(1, 80),
    interleave=st.integers(2, 9),
    seed=st.integers(0, 9),
    threads=st.integers(1, 3),
    fmt=st.sampled_from(["numpy", "torch", "arrow"]),
    filtered=st.booleans(),
)
def test_in_process_batches_are_the_plans(
    data: Path,
    world: int,
    bs: int,
    interleave: int,
    seed: int,
    threads: int,
    fmt: str,
    filtered: bool,
) -> None:
    expr = pc.field("label") != 3 if filtered else None
    ds = _ds(
        data,
        world_size=world,
        rank=world - 1,
        batch_size=bs,
        interleave=interleave,
        seed=seed,
        num_threads=threads,
        batch_format=fmt,
        filter=expr,
    )
    got = [
        [int(i) for i in (b.column("id").to_pylist() if fmt == "arrow" else b["id"])] for b in ds
    ]
    assert got == _planned(ds, world - 1, 1)


def test_two_dataloader_workers_are_the_plans_with_the_values_of_whole_reads(data: Path) -> None:
    here = list(_ds(data))
    there = list(DataLoader(_ds(data), batch_size=None, num_workers=2))
    assert [_ids(b) for b in here] == _planned(_ds(data), 0, 1)
    assert [_ids(b) for b in there] == _planned(_ds(data), 0, 2)
    whole = {
        i: (x, t)
        for b in StreamingDataset(str(data), batch_size=BATCH, batch_format="numpy")
        for i, x, t in zip(_ids(b), b["x"].tolist(), b["text"].tolist())
    }
    for batches in (here, there):
        seen = {
            i: (x, t)
            for b in batches
            for i, x, t in zip(_ids(b), b["x"].tolist(), b["text"].tolist())
        }
        assert len(seen) == sum(len(b["id"]) for b in batches)  # every row once
        assert N - len(seen) < 2 * BATCH
        assert all(whole[i] == v for i, v in seen.items() if i in whole)
        assert all(v == (np.float32(i * 0.5), f"doc {i}") for i, v in seen.items())


def test_a_head_and_its_rest_are_the_rows_of_the_whole_read(data: Path) -> None:
    ds = _ds(data)
    reader = UnitReader(ds.index, ["id", "text"])
    parts = unit_parts(ds.index, ["id", "text"], None, None, reader.schema)
    assert parts is not None
    for u in range(ds.index.num_units):
        whole, n = reader.read(u), ds.index.units[u].num_samples
        table = parts.head(u, 37)
        assert table is not None and table.equals(whole.slice(0, 37))
        rest = parts.rest(u, 37, n - 37)
        assert rest is not None and rest.equals(whole.slice(37))
        assert parts.rest(u, 37, n - 37) is None  # read once: else the whole read
    assert unit_parts(ds.index, None, pc.field("id") > 3, None, reader.schema) is None


@pytest.fixture(scope="module")
def lists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fixed-size lists, text and ids in pages of 1 KB (a head ends inside a page), the
    lists' dictionary pages full after a few hundred values (then plain pages)."""
    root = tmp_path_factory.mktemp("lists")
    rng = np.random.default_rng(4)
    for f in range(3):
        ids = np.arange(f * 10_000, f * 10_000 + 700 + 300 * f)
        values = rng.integers(0, 300, len(ids) * 8).astype(np.float32)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(values), 8)
        table = pa.table({"id": ids, "emb": emb, "text": [f"t{i}" for i in ids]})
        pq.write_table(
            table,
            root / f"p{f}.parquet",
            row_group_size=400,
            data_page_size=1024,
            dictionary_pagesize_limit=1024,
        )
    return root


@pytest.mark.parametrize("pages", ["1", "0"])
def test_heads_and_rests_of_fixed_size_lists_equal_whole_reads(
    lists: Path, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page reader decodes a head's lists and then the rest's (or, switched off,
    Arrow both); either way the parts are the whole read's rows, and the loader's
    batches are the plan's with the whole read's values."""
    monkeypatch.setenv("SHARDWISE_PAGE_READER", pages)
    ds = StreamingDataset(str(lists), first_window="heads", batch_size=16, batch_format="numpy")
    check_head_and_rest(ds, "emb", by_pages=pages == "1")
    reader = UnitReader(ds.index)
    got = {i: e for b in ds for i, e in zip(b["id"].tolist(), b["emb"].tolist())}
    want = {i: e for u in range(ds.index.num_units) for i, e in _rows(reader.read(u))}
    assert [_ids(b) for b in ds] == _planned(ds, 0, 1)
    assert len(got) == ds.plan().samples_per_rank and all(want[i] == e for i, e in got.items())


def _rows(table: Any) -> Any:
    return zip(table.column("id").to_pylist(), table.column("emb").to_pylist())


def _consume(ds: Any, workers: int, steps: int | None) -> tuple[list[int], int]:
    seen: list[int] = []
    done = 0
    for step, batch in enumerate(DataLoader(ds, batch_size=None, num_workers=workers)):
        seen += _ids(batch)
        done = step + 1
        if done == steps:
            break
    return seen, done


@pytest.mark.parametrize(("first", "then"), [(2, 2), (0, 0), (2, 0), (0, 2)])
def test_resume_is_exact_on_the_same_and_other_worker_counts(
    data: Path, first: int, then: int
) -> None:
    ds = _ds(data)
    before, steps = _consume(ds, first, 7)  # inside the head windows
    state = ds.state_dict(consumed_batches=steps)
    assert state["mixing"]["blocks"] == {"k": ds.blocks, "layout": BLOCKS_LAYOUT}
    resumed = _ds(data)
    resumed.load_state_dict(state)
    after, _ = _consume(resumed, then, None)
    everything = before + after
    assert len(everything) == len(set(everything)), "a sample was repeated"
    if first == then:
        unresumed, _ = _consume(_ds(data), first, None)
        assert everything == unresumed
    else:
        assert N - len(everything) < (max(first, 1) + max(then, 1)) * BATCH


def test_resume_onto_another_world_size(data: Path) -> None:
    before: list[int] = []
    ranks = [_ds(data, rank=r, world_size=2) for r in range(2)]
    for ds in ranks:
        seen, steps = _consume(ds, 2, 5)
        before += seen
    state = ranks[0].state_dict(consumed_batches=steps)
    after: list[int] = []
    for r in range(3):
        ds = _ds(data, rank=r, world_size=3)
        ds.load_state_dict(state)
        after += _consume(ds, 1, None)[0]
    everything = before + after
    assert len(everything) == len(set(everything))
    assert N - len(everything) < (2 * 2 + 3) * BATCH


def test_states_of_head_windows_and_whole_units_are_not_mixed(data: Path) -> None:
    heads = _ds(data)
    whole = StreamingDataset(str(data), batch_size=BATCH, interleave=8, seed=5, first_window=None)
    for saved, loading in ((heads, whole), (whole, heads)):
        state = saved.state_dict(consumed_batches=0)
        with pytest.raises(PlanError, match="first_window"):
            loading.load_state_dict(state)
    with pytest.raises(ConfigError, match="first_window"):
        StreamingDataset(str(data), first_window="tails")


def test_canonical_workers_give_the_same_global_batches_with_heads(data: Path) -> None:
    one = _ds(data, canonical_workers=2)
    two = _ds(data, canonical_workers=2)
    here = [_ids(b) for b in one]
    there = [_ids(b) for b in DataLoader(two, batch_size=None, num_workers=2)]
    assert here == _planned(one, 0, 1)
    assert there == _planned(two, 0, 2)
    assert here == there  # the canonical grid's batches on either topology


def test_the_first_piece_is_the_head_windows_whole_batches(data: Path) -> None:
    assert cut_pieces([10, 7], 8, first=4) == [[(0, 0, 4)], [(0, 4, 10), (1, 0, 2)], [(1, 2, 7)]]
    reading = _ds(data).reading
    assert reading.first_piece(6239) == 6224 and reading.first_piece(15) is None
    whole = StreamingDataset(str(data), batch_size=BATCH, first_window=None)
    assert whole.reading.first_piece(6239) is None


def test_per_sample_items_follow_the_plan_with_heads(data: Path) -> None:
    ds = _ds(data, batch_format=None, batch_size=4)
    expected = [i for b in _planned(ds, 0, 1) for i in b]
    assert [int(s["id"]) for s in ds] == expected
    loader = DataLoader(_ds(data, batch_format=None, batch_size=4), batch_size=4, num_workers=2)
    got = [int(i) for b in loader for i in b["id"]]
    assert got == [i for b in _planned(ds, 0, 2) for i in b]


def test_a_unit_with_large_dictionaries_is_let_go_after_its_head(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over HOLD_BYTES of dictionary pages a unit is not kept open: its rest is read
    whole and sliced, and the batches are still the plan's."""
    monkeypatch.setattr(unit_heads, "HOLD_BYTES", 0)
    ds = _ds(data)
    reader = UnitReader(ds.index, ["id", "text"])
    parts = unit_parts(ds.index, ["id", "text"], None, None, reader.schema)
    assert parts is not None
    n = ds.index.units[0].num_samples
    head = parts.head(0, 5)
    assert head is not None and head.equals(reader.read(0).slice(0, 5))
    assert parts.rest(0, 5, n - 5) is None
    assert [_ids(b) for b in ds] == _planned(ds, 0, 1)


@pytest.fixture(scope="module")
def larger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Units of 50-900 rows (about 60 of them): two heads make less than 1/64 of the epoch."""
    return make_parquet(tmp_path_factory.mktemp("lead") / "ds", 30_000, files=3, seed=2)


@pytest.mark.parametrize("threads", [1, 2])
def test_the_first_batch_waits_for_the_lead_windows_heads_alone(
    larger: Path, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process, the epoch's first batch comes once the heads of the lead window are read
    (two here: each head holds over a batch), before the group's other heads: those are
    held back until the first batch is out, and none of them may be waited for."""
    data = larger
    read: list[int] = []
    held: list[bool] = []  # per held-back head: whether it was still held when released
    release = threading.Event()
    head = unit_heads.UnitParts.head
    ds = _ds(data, num_threads=threads)
    windows = ds.plan(num_workers=1).worker(0, 0).windows()
    lead, others = [s.unit for s in windows[0]], [s.unit for s in windows[1]]
    assert len(lead) == 2 and len(others) >= 3

    def counted(self: Any, u: int, rows: int) -> Any:
        read.append(u)
        if u not in lead:
            held.append(release.wait(30))  # False: the first batch waited for this head
        return head(self, u, rows)

    monkeypatch.setattr(unit_heads.UnitParts, "head", counted)
    it = iter(ds)
    first = next(it)
    release.set()
    assert set(lead) <= set(read)
    assert set(_ids(first)) <= set(ids_of_heads(ds, lead))
    rest = [first, *it]
    assert held and all(held)  # heads were held back, and none held up the first batch
    assert sorted(read) == sorted(range(ds.index.num_units))  # every head read once
    assert [_ids(b) for b in rest] == _planned(ds, 0, 1)


def ids_of_heads(ds: Any, units: list[int]) -> list[int]:
    reader = UnitReader(ds.index, ["id"], filter=ds.filter)
    heads = ds.counts // ds.blocks
    return [int(i) for u in units for i in reader.read(u).column("id").to_numpy()[: heads[u]]]
