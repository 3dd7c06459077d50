"""A Parquet row group's entries are downloaded by ranges on the node cache's download
threads and read as they come in (real S3 server, SeaweedFS); the bytes are the file's,
each entry is fetched once, and it is published as any download is."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _s3server import bucket, s3_server  # noqa: F401  (fixtures: real SeaweedFS S3, a fresh bucket)

from shardwise import index_dataset
from shardwise.loader.read.cached import UnitCache
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.admin import verify_cache
from shardwise.storage.cache.fill import FillView

pytestmark = pytest.mark.engine

ROWS = 4_000


def _upload(fs: Any, name: str, root: Path) -> str:
    """One file of four row groups: an id and a fixed-size list of 64 floats."""
    root.mkdir(parents=True)
    emb = np.random.default_rng(0).random((ROWS, 64), dtype=np.float32)
    t = pa.table(
        {
            "id": np.arange(ROWS, dtype=np.int64),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 64),
        }
    )
    pq.write_table(t, str(root / "a.parquet"), row_group_size=ROWS // 4, compression="none")
    fs.put(str(root / "a.parquet"), f"{name}/emb/a.parquet")
    return f"s3://{name}/emb/a.parquet"


def test_a_row_groups_chunks_are_read_as_their_ranges_come_in(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local")
    local = (tmp_path / "local" / "a.parquet").read_bytes()
    index = index_dataset(url, storage_options=s3_server["storage_options"], progress=False)
    cache = NodeCache(str(tmp_path / "cache"), 10**8)
    units = UnitCache(index, cache, ["id", "emb"])
    with contextlib.ExitStack() as stack:
        pieces = units._pieces(index.units[1], stack)
        assert len(pieces) == 3  # the footer, the id chunk, the emb chunk
        assert all(isinstance(data, FillView) for _, data in pieces)  # not waited for whole
        got = [(start, bytes(data)) for start, data in pieces]
        assert all(data == local[start : start + len(data)] for start, data in got)
    deadline = time.monotonic() + 30
    while len(os.listdir(tmp_path / "cache" / "entries")) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)  # published on a download thread
    with contextlib.ExitStack() as stack:
        again = units._pieces(index.units[1], stack)  # published entries: found on disk
        assert [(start, bytes(data)) for start, data in again] == got
    journal = cache.journal()
    assert sorted(j["column"] for j in journal) == ["(footer)", "emb", "id"]
    assert all(j["kind"] == "download" for j in journal)
    report = verify_cache(str(tmp_path / "cache"))
    assert report.bad == [] and report.checked == 3
