"""Head windows through the node cache (``first_window="heads"``, remote Parquet read with
``cache_dir``): every unit is leased and decoded once per epoch (its head's read keeps
the leased entries and the row group open for the rest), the batches are those of the
local read and of the read without a cache, every lease is released after the epoch,
after an early stop, after a reading is closed or dropped, and a unit that cannot be
read in parts (let go after its head, an entry gone bad, a changed object) is read whole
as before. The files here are on fsspec's ``memory://`` filesystem, which the node cache
serves as it serves S3 (the real S3 server's test is ``test_cached_parts_s3.py``)."""

from __future__ import annotations

import gc
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from _partsdata import GROUP, ROWS, leases, leases_left, write_files

from shardwise import StreamingDataset
from shardwise.errors import ShardwiseError
from shardwise.loader.read import cached_parts
from shardwise.loader.read.cached_parts import CachedParts, part_reader
from shardwise.loader.read.unit_heads import UnitParts
from shardwise.loader.read.units import UnitReader
from shardwise.storage.cache import NodeCache


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The files on ``memory://`` (a fresh directory per test), and their local copies."""
    local = tmp_path / "local"
    name = f"/cachedparts-{os.getpid()}-{id(tmp_path)}"
    fs = fsspec.filesystem("memory")
    for p in write_files(local):
        fs.put(str(p), f"{name}/{p.name}")
    yield f"memory://{name}", local
    fs.rm(name, recursive=True)


def _ds(source: str, cache: Path | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        batch_size=16, seed=7, batch_format="numpy", first_window="heads", interleave=4
    )
    if cache is not None:
        args |= dict(cache_dir=str(cache), cache_bytes=10**8)
    return StreamingDataset(source, **(args | kw))


def _batches(ds: Any) -> list[list[Any]]:
    return [[np.asarray(b[c]).tolist() for c in sorted(b)] for b in ds]


def _journal(cache: Path) -> list[dict[str, Any]]:
    return NodeCache(str(cache / "units"), 10**9).journal()


def _few(whole_reads: Counter[int]) -> bool:
    """No unit read whole, but for at most 2 rests whose heads' reads were taken off the
    queue and not yet begun when theirs began (rare on a loaded machine; never wrong)."""
    return sum(whole_reads.values()) <= 2


@pytest.mark.parametrize("columns", [None, ["id", "emb"]])
@pytest.mark.parametrize("threads", [1, 2])
def test_each_unit_is_leased_and_decoded_once_with_the_local_reads_batches(
    remote: tuple[str, Path],
    tmp_path: Path,
    whole_reads: Counter[int],
    columns: list[str] | None,
    threads: int,
) -> None:
    url, local = remote
    cache = tmp_path / "cache"
    ds = _ds(url, cache, columns=columns, num_threads=threads)
    assert ds.blocks > 1 and ds.index.num_units == 3 * ROWS // GROUP
    got = _batches(ds)
    assert _few(whole_reads)  # every head and rest came from one leased read
    assert got == _batches(_ds(str(local), columns=columns, num_threads=threads))
    assert got == _batches(_ds(url, columns=columns, num_threads=threads))  # no cache
    journal = _journal(cache)
    keys = [j["key"] for j in journal]
    assert all(j["kind"] == "download" for j in journal) and len(keys) == len(set(keys))
    # each row group's bytes came once (its range, or its columns' chunks), and the footers
    groups = [j for j in journal if j.get("column") != "(footer)"]
    per_unit = len(columns) if columns is not None else 1
    assert len(groups) == ds.index.num_units * per_unit
    assert ds.cache.stats.downloads == len(journal) and ds.cache.stats.read_through == 0
    assert leases_left(cache) == []
    ds.set_epoch(1)
    whole_reads.clear()
    here = _ds(str(local), columns=columns, num_threads=threads)
    here.set_epoch(1)
    assert _batches(ds) == _batches(here)
    assert len(_journal(cache)) == len(journal) and _few(whole_reads)  # warm: nothing fetched
    assert leases_left(cache) == []


def test_a_local_dataset_with_a_cache_reads_its_parts_once(
    tmp_path: Path, whole_reads: Counter[int]
) -> None:
    local = tmp_path / "local"
    write_files(local)
    ds = _ds(str(local), tmp_path / "cache")
    parts = part_reader(ds.index, None, None, ds.cache, ds.index.schema)
    assert type(parts) is UnitParts  # local files are read where they are
    assert _batches(ds) == _batches(_ds(str(local))) and _few(whole_reads)


def test_an_early_stop_releases_every_lease(remote: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = remote
    cache = tmp_path / "cache"
    ds = _ds(url, cache)
    for threads in (1, 2):
        it = iter(_ds(url, cache, num_threads=threads))
        for _ in range(3):  # inside the head window: units wait for their rests
            next(it)
        del it
        gc.collect()
        assert leases_left(cache) == []
    parts = part_reader(ds.index, None, None, ds.cache, ds.index.schema)
    assert isinstance(parts, CachedParts)
    for u in range(4):
        assert parts.head(u, 10) is not None
    assert parts.held() == [0, 1, 2, 3] and len(leases(cache)) > 0
    parts.close()
    assert leases(cache) == [] and parts.head(5, 10) is not None and parts.held() == []
    parts = part_reader(ds.index, None, None, ds.cache, ds.index.schema)
    assert parts is not None and parts.head(2, 10) is not None and leases(cache)
    del parts  # dropped with a unit open: its file is collected, its leases released
    gc.collect()
    assert leases_left(cache) == []


def test_a_head_and_its_rest_are_the_whole_reads_rows(
    remote: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = remote
    ds = _ds(url, tmp_path / "cache")
    reader = UnitReader(ds.index, ["id", "emb", "text"], cache=ds.cache)
    parts = part_reader(ds.index, ["id", "emb", "text"], None, ds.cache, reader.schema)
    assert isinstance(parts, CachedParts)
    for u in range(ds.index.num_units):
        whole, n = reader.read(u), ds.index.units[u].num_samples
        head = parts.head(u, 37)
        assert head is not None and head.equals(whole.slice(0, 37))
        rest = parts.rest(u, 37, n - 37)
        assert rest is not None and rest.equals(whole.slice(37))
        assert parts.rest(u, 37, n - 37) is None  # read once: else the whole read
    assert leases_left(tmp_path / "cache") == []


def test_units_over_the_held_share_are_let_go_after_their_heads(
    remote: tuple[str, Path],
    tmp_path: Path,
    whole_reads: Counter[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Units waiting for their rests lease at most HELD_SHARE of the budget: past it a
    unit is closed after its head and its rest read whole (from the cache)."""
    url, local = remote
    monkeypatch.setattr(cached_parts, "HELD_SHARE", 1e-9)
    cache = tmp_path / "cache"
    ds = _ds(url, cache)
    assert _batches(ds) == _batches(_ds(str(local)))
    assert sum(whole_reads.values()) == ds.index.num_units  # each rest, read whole
    assert leases_left(cache) == []
    keys = [j["key"] for j in _journal(cache)]
    assert len(keys) == len(set(keys))  # the rests' reads were hits


def test_an_entry_gone_bad_is_fetched_again(remote: tuple[str, Path], tmp_path: Path) -> None:
    url, local = remote
    cache = tmp_path / "cache"
    want = _batches(_ds(str(local)))
    assert _batches(_ds(url, cache)) == want
    entries = cache / "units" / "entries"
    for i, name in enumerate(sorted(os.listdir(entries))):
        path = entries / name
        if i % 2:
            path.unlink()  # evicted
            continue
        data = bytearray(path.read_bytes())
        data[10] ^= 0xFF  # damaged (its size unchanged)
        path.write_bytes(bytes(data))
    ds = _ds(url, cache)
    assert _batches(ds) == want
    assert ds.cache.stats.bad_entries > 0 and ds.cache.stats.downloads > 0
    assert leases_left(cache) == []


@pytest.mark.parametrize("first_window", [None, "heads"])
def test_an_object_changed_after_indexing_errors_as_before(
    remote: tuple[str, Path], tmp_path: Path, first_window: str | None
) -> None:
    url, _ = remote
    cache = tmp_path / "cache"
    ds = _ds(url, cache, first_window=first_window)
    fs = fsspec.filesystem("memory")
    path = url.removeprefix("memory://") + "/part-1.parquet"
    fs.pipe(path, fs.cat(path)[:100_000])  # truncated since it was indexed
    with pytest.raises(ShardwiseError, match="part-1.parquet"):
        _batches(ds)
    assert leases_left(cache) == []  # released as the epoch ended, before the error went up


def test_units_read_ahead_one_at_a_time_download_heads_ahead(
    remote: tuple[str, Path], tmp_path: Path, whole_reads: Counter[int]
) -> None:
    """Arrow batches read units ahead one at a time, downloading the next ones meanwhile:
    a head's unit is downloaded ahead, a rest names nothing (it was downloaded for its
    head); the part ids past the units' count are never taken for units."""
    url, local = remote
    ds = _ds(url, tmp_path / "cache", batch_format="arrow")
    reading = ds.reading
    units = ds.index.num_units
    assert [reading.stored_unit(p) for p in (0, 5, units, units + 5)] == [0, 5, None, None]
    got = [b.column("id").to_pylist() for b in ds]
    assert got == [b.column("id").to_pylist() for b in _ds(str(local), batch_format="arrow")]
    assert _few(whole_reads) and leases_left(tmp_path / "cache") == []
