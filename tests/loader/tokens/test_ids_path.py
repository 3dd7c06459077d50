"""TokenStream's ``input_ids``-only ``concat`` batches (made on the iterating thread, one
copy each) equal the ``input_ids`` of the every-field batches: in file order and shuffled,
on every rank, in DataLoader workers, as torch tensors, and after a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tokendata import make_token_shards

from shardwise import FormatError
from shardwise.loader.tokens import TokenStream

IDS = ("input_ids",)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_token_shards(tmp_path_factory.mktemp("tokids"))[0]


def _ids(batches: list[dict[str, Any]]) -> list[np.ndarray]:
    return [np.asarray(b["input_ids"]) for b in batches]


def _equal(got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected) > 0
    for a, e in zip(got, expected):
        assert a.dtype == e.dtype == np.int64 and np.array_equal(a, e)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize(("seq_len", "batch_size"), [(64, 4), (200, 3), (7, 1)])
def test_ids_equal_every_field_batches_on_every_rank(
    shards: Path, shuffle: bool, seq_len: int, batch_size: int
) -> None:
    kw: dict[str, Any] = {"seq_len": seq_len, "batch_size": batch_size, "shuffle": shuffle}
    for rank in range(2):
        kw |= {"rank": rank, "world_size": 2, "seed": 3}
        only = TokenStream(str(shards), fields=IDS, **kw)
        got = list(only)
        assert all(list(b) == ["input_ids"] for b in got) and len(got) == len(only)
        _equal(_ids(got), _ids(list(TokenStream(str(shards), **kw))))


@pytest.mark.parametrize("shuffle", [False, True])
def test_ids_resume_where_every_field_batches_resume(shards: Path, shuffle: bool) -> None:
    kw: dict[str, Any] = {"seq_len": 96, "batch_size": 2, "shuffle": shuffle, "seed": 1}
    ds = TokenStream(str(shards), fields=IDS, **kw)
    it = iter(ds)
    first = [next(it) for _ in range(7)]
    state = ds.state_dict(7)
    full = TokenStream(str(shards), **kw)
    everything = _ids(list(full))
    assert full.state_dict(7) == state  # the state does not depend on how batches are made
    _equal(_ids(first), everything[:7])
    for fields in (IDS, None):
        again = TokenStream(str(shards), **kw, **({"fields": fields} if fields else {}))
        again.load_state_dict(state)
        _equal(_ids(list(again)), everything[7:])


def test_ids_in_dataloader_workers_as_torch(shards: Path) -> None:
    import torch
    from torch.utils.data import DataLoader

    kw: dict[str, Any] = {"seq_len": 128, "batch_size": 2, "num_workers": 2, "shuffle": False}
    only = TokenStream(str(shards), fields=IDS, batch_format="torch", **kw)
    full = TokenStream(str(shards), batch_format="torch", **kw)
    got = [b["input_ids"] for b in DataLoader(only, batch_size=None, num_workers=2)]
    expected = [b["input_ids"] for b in DataLoader(full, batch_size=None, num_workers=2)]
    assert all(isinstance(x, torch.Tensor) for x in got)
    _equal([x.numpy() for x in got], [x.numpy() for x in expected])


def test_reads_through_open_files_and_given_lengths_equal_plain_reads(shards: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from shardwise.loader.tokens.mapped import OpenFiles

    ds = TokenStream(str(shards), seq_len=64)
    plan, units = ds.plan(), ds.units
    order = [u for _ in range(2) for u in range(len(ds.docs))][::-1]  # files alternate, evicted
    files = OpenFiles(keep=1)
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda u: units.read(u, plan.unit_lengths(u), files), order))
    assert len({units.index.units[u].path for u in order}) > 1
    for u, (tokens, offsets) in zip(order, got):
        plain, plain_offsets = units.read(u)
        assert np.array_equal(tokens, plain) and np.array_equal(offsets, plain_offsets)
        assert not tokens.flags.owndata  # still a view of the file
    wrong = plan.unit_lengths(0)[:-1]  # lengths that do not fit the unit: the plan's
    with pytest.raises(FormatError, match="documents where the unit holds"):  # are wrong
        units.read(0, wrong)


def test_local_units_are_read_on_the_iterating_thread(shards: Path) -> None:
    import threading

    from shardwise.loader.tokens.units import UnitFeed

    ds = TokenStream(str(shards), seq_len=64)
    assert all(ds.units.mapped_here(u) for u in range(len(ds.docs)))  # local Parquet files
    from shardwise.loader.tokens.mapped import mapped_local

    assert not mapped_local("s3://bucket/tokens/part-0.parquet")
    assert mapped_local("file://" + str(next(shards.glob("*.parquet"))))
    readers: list[str] = []

    def read(unit: int) -> int:
        readers.append(threading.current_thread().name)
        if unit == 2:
            raise OSError("unit 2 does not read")
        return unit * 10

    units = np.array([0, 0, 1, 3, 3, 2])
    feed = UnitFeed(units, read, ahead=2, inline=lambda u: u != 3)
    got = []
    with pytest.raises(OSError, match="unit 2"):  # raised where the unit is needed
        for _, laid in feed.windows(2):
            got.append(laid)
    assert got == [{0: 0}, {1: 10, 3: 30}]
    main = threading.current_thread().name
    assert readers.count(main) == 3 and len(readers) == 4  # unit 3 on a reading thread


def test_a_failed_feed_leaves_no_read_running() -> None:
    """A unit that does not read ends the feed, and the reads already running end with
    it: none goes on reading a file (a changed one could end the process) after the
    error reached the stream."""
    import threading
    import time

    from shardwise.loader.tokens.units import UnitFeed

    finished: list[int] = []

    def read(unit: int) -> int:
        if unit == 0:
            raise OSError("unit 0 does not read")
        time.sleep(0.3)
        finished.append(unit)
        return unit

    feed = UnitFeed(np.array([0, 1, 2]), read, ahead=2)
    with pytest.raises(OSError, match="unit 0"):
        for _ in feed:
            pass
    alive = [t.name for t in threading.enumerate() if t.name.startswith("shardwise-tokens")]
    assert alive == [] and finished  # the running read was waited for, not left behind
