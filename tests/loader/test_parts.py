"""The parts a dataset is made of (``loader/parts.py``) carry its checked arguments, its
state's channel goes with it, and what cannot stream is refused when it is made."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pyarrow.compute as pc
import pytest
from _loaderdata import make_parquet

from shardwise import ConfigError, PlanError, StreamingDataset


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("parts") / "ds", 1_003, files=3)


def test_the_planner_and_the_reading_carry_the_checked_arguments(data: Path) -> None:
    ds = StreamingDataset(
        str(data),
        batch_size=8,
        seed=7,
        shuffle=False,
        drop_last=False,
        columns=("id", "label"),
        filter=pc.field("label") < 5,
        batch_format="numpy",
        pad_to="longest",
        interleave=2,
        prefetch_bytes=1 << 20,
        num_threads=3,
        rank=1,
        world_size=4,
        replication=2,
        num_workers=2,
    )
    p = ds.planner
    assert (p.batch_size, p.seed, p.shuffle, p.drop_last, p.interleave) == (8, 7, False, False, 2)
    assert (p.dp_size, p.num_workers, p.mixing, p.canonical_workers) == (2, 2, None, None)
    assert p.counts.sum() == ds.counts.sum() == sum(i % 10 < 5 for i in range(1_003))
    r = ds.reading
    assert r.index is ds.index and r.columns == ["id", "label"] and r.filter is ds.filter
    assert (r.batch_format, r.pad_to, r.batch_size, r.interleave) == ("numpy", "longest", 8, 2)
    assert (r.prefetch_bytes, r.num_threads, r.pin_memory) == (1 << 20, 3, False)
    assert r.on_error == "raise" and r.cache is None
    assert ds.state.counts is ds.counts and ds.state.mixing_key is None


def test_the_workers_channel_is_removed_with_the_dataset(data: Path) -> None:
    ds = StreamingDataset(str(data), rank=0, world_size=1, num_workers=2)
    ds.state.channel.announce(1, 2, epoch=0)
    path = ds.state.channel.path
    assert os.path.exists(path)
    del ds
    gc.collect()
    assert not os.path.exists(path)


def test_what_cannot_stream_is_refused_when_the_dataset_is_made(data: Path) -> None:
    with pytest.raises(ConfigError, match="nope"):
        StreamingDataset(str(data), rank=0, world_size=1, columns=["id", "nope"])
    with pytest.raises(PlanError, match="nothing to stream"):
        StreamingDataset(str(data), rank=0, world_size=1, filter=pc.field("label") > 99)
