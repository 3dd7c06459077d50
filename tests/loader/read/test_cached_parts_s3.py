"""Head windows through the node cache on a real S3 server (SeaweedFS, behind a proxy that
counts the bytes it serves), through 2 DataLoader workers: the batches are the local
read's, the cold epoch fetches each byte range once (as many bytes as an epoch without
head windows), the warm epoch fetches nothing, and no lease is left behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _countproxy import CountingProxy
from _partsdata import leases_left, write_files

from shardwise import StreamingDataset
from shardwise.storage.cache import NodeCache

pytestmark = pytest.mark.engine


@pytest.fixture
def proxy(s3_server: dict[str, Any]) -> Iterator[CountingProxy]:
    with CountingProxy(s3_server["endpoint_url"]) as p:
        yield p


def _epoch(ds: Any, epoch: int) -> list[int]:
    from torch.utils.data import DataLoader

    ds.set_epoch(epoch)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    return [int(i) for b in loader for i in np.asarray(b["id"]).tolist()]


def _journal(cache: Path) -> list[dict[str, Any]]:
    return NodeCache(str(cache / "units"), 10**9).journal()


@pytest.mark.parametrize("columns", [None, ["id", "emb"]])
def test_two_workers_read_heads_through_the_cache_fetching_each_range_once(
    columns: list[str] | None,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
) -> None:
    name, fs = bucket
    local = tmp_path / "local"
    for p in write_files(local):
        fs.put(str(p), f"{name}/ds/{p.name}")
    options = dict(s3_server["storage_options"], client_kwargs={"endpoint_url": proxy.url})
    common: dict[str, Any] = dict(
        batch_size=16, seed=7, batch_format="numpy", columns=columns, num_workers=2, interleave=4
    )

    def remote(cache: Path, first_window: str | None = "heads") -> Any:
        return StreamingDataset(
            f"s3://{name}/ds",
            storage_options=options,
            cache_dir=str(cache),
            cache_bytes=10**8,
            first_window=first_window,
            **common,
        )

    here = StreamingDataset(str(local), first_window="heads", **common)
    ds = remote(tmp_path / "cache")
    proxy.reset()  # the epoch's bytes, not the index's
    assert ds.blocks > 1 and _epoch(ds, 0) == _epoch(here, 0)
    cold = proxy.get_bytes
    journal = _journal(tmp_path / "cache")
    keys = [j["key"] for j in journal]
    assert all(j["kind"] == "download" for j in journal) and len(keys) == len(set(keys))
    assert cold == sum(j["bytes"] for j in journal)  # every byte through the cache, once
    groups = [j for j in journal if j.get("column") != "(footer)"]
    assert len(groups) == ds.index.num_units * (len(columns) if columns else 1)
    assert leases_left(tmp_path / "cache") == []
    proxy.reset()
    assert _epoch(ds, 1) == _epoch(here, 1) and proxy.get_bytes == 0  # warm: nothing fetched
    assert leases_left(tmp_path / "cache") == []
    _epoch(remote(tmp_path / "whole", first_window=None), 0)
    # the cache downloaded as many bytes as for an epoch of whole units
    assert sum(j["bytes"] for j in _journal(tmp_path / "whole")) == cold
