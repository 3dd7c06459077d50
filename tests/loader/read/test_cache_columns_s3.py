"""The node cache stores Parquet column chunks (real S3 server, SeaweedFS, through a proxy
that counts the bytes it serves): a projection fetches only its columns' chunks and the
footers; a later read of other columns reuses the chunks it shares and fetches the rest;
two concurrent jobs with different projections fetch each chunk once; a job killed with
SIGKILL in the middle of a chunk's download leaves nothing a new run trips on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _countproxy import CountingProxy

from shardwise import StreamingDataset
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.admin import verify_cache

pytestmark = pytest.mark.engine

ROWS = 2_000
JOB = str(Path(__file__).resolve().parents[2] / "support" / "_cachejob.py")


def _upload(fs: Any, name: str, root: Path) -> str:
    """Three files of four row groups and one of one: an id, a short label, a wide payload."""
    root.mkdir(parents=True)
    ids = np.arange(ROWS, dtype=np.int64)
    noise = np.random.default_rng(0).integers(0, 256, (ROWS, 2_000), dtype=np.uint8)
    t = pa.table(
        {
            "id": ids,
            "label": [f"label {i % 17}" for i in ids],
            "payload": pa.array([r.tobytes() for r in noise], pa.binary()),
        }
    )
    for k in range(3):
        pq.write_table(t.slice(k * 500, 500), str(root / f"part-{k}.parquet"), row_group_size=125)
    pq.write_table(t.slice(1500, 500), str(root / "one.parquet"))  # one row group
    for p in sorted(root.iterdir()):
        fs.put(str(p), f"{name}/wide/{p.name}")
    return f"s3://{name}/wide"


def _chunk_bytes(root: Path) -> dict[str, int]:
    """Bytes of every column's chunks over the local copies."""
    out: dict[str, int] = {}
    for p in root.iterdir():
        md = pq.ParquetFile(p).metadata
        for g in range(md.num_row_groups):
            for c in range(md.num_columns):
                col = md.row_group(g).column(c)
                name = col.path_in_schema.split(".")[0]
                out[name] = out.get(name, 0) + col.total_compressed_size
    return out


@pytest.fixture
def proxy(s3_server: dict[str, Any]) -> Iterator[CountingProxy]:
    with CountingProxy(s3_server["endpoint_url"]) as p:
        yield p


def _options(s3_server: dict[str, Any], proxy: CountingProxy) -> dict[str, Any]:
    return dict(s3_server["storage_options"], client_kwargs={"endpoint_url": proxy.url})


def _ids(ds: Any) -> list[int]:
    return [int(i) for b in ds for i in np.asarray(b["id"]).tolist()]


def _fetches(cache_dir: Path) -> list[dict[str, Any]]:
    return NodeCache(str(cache_dir / "units"), 10**9).journal()


def test_a_projection_fetches_its_chunks_and_later_ones_only_the_missing(
    s3_server: dict[str, Any], bucket: tuple[str, Any], proxy: CountingProxy, tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local")
    total = sum(p.stat().st_size for p in (tmp_path / "local").iterdir())
    chunks = _chunk_bytes(tmp_path / "local")
    cache_dir = tmp_path / "cache"
    common = dict(batch_size=8, seed=5, format="parquet", batch_format="numpy")
    want = _ids(StreamingDataset(str(tmp_path / "local"), **common))
    fetched: dict[str, int] = {}
    for columns, new in ((["id"], {"id"}), (["id", "label"], {"label"}), (None, {"payload"})):
        ds = StreamingDataset(
            url,
            storage_options=_options(s3_server, proxy),
            cache_dir=str(cache_dir),
            cache_bytes=10**8,
            columns=columns,
            **common,
        )
        proxy.reset()  # the epoch's bytes, not the index's
        assert _ids(ds) == want
        stats = ds.cache.stats
        per_column = dict(stats.bytes_per_column)
        fetched[str(columns)] = proxy.get_bytes
        # every byte fetched went through the cache (a read the client retried: twice here)
        assert stats.bytes_fetched == proxy.get_bytes, (stats, proxy.requests)
        assert set(per_column) - {"(footer)", "(unit)"} <= new  # only the missing columns
        for column in new - {"payload"}:
            assert 0 < per_column[column] <= chunks[column]
        assert all(j["kind"] == "download" for j in _fetches(cache_dir))
    # one small column of a wide table: a small part of the bytes (footers, its chunks)
    assert fetched["['id']"] < total / 4
    assert fetched["['id', 'label']"] <= chunks["label"]  # only the label chunks came
    assert fetched["None"] <= chunks["payload"] + 4 * 2**16
    keys = [j["key"] for j in _fetches(cache_dir)]
    assert len(keys) == len(set(keys))  # no byte range fetched twice on this node
    assert sum(fetched.values()) <= total + 4 * 2**16
    ds = StreamingDataset(
        url,
        storage_options=_options(s3_server, proxy),
        cache_dir=str(cache_dir),
        cache_bytes=10**8,
        columns=["label", "id"],
        **common,
    )
    proxy.reset()
    assert _ids(ds) == want and proxy.get_bytes == 0  # warm: nothing fetched
    print("bytes fetched per projection:", fetched, "of", total, "stored")


def _job(spec: dict[str, Any], tmp_path: Path, tag: str, **kw: Any) -> subprocess.Popen[bytes]:
    spec = dict(spec, out=str(tmp_path / f"{tag}.json"), **kw)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(JOB).parent), *sys.path]))
    return subprocess.Popen(
        [sys.executable, JOB, json.dumps(spec)], env=env, start_new_session=True
    )


def _expected(local: Path, columns: list[str]) -> list[int]:
    from torch.utils.data import DataLoader

    ds = StreamingDataset(
        str(local),
        columns=columns,
        batch_size=8,
        seed=5,
        num_workers=2,
        format="parquet",
        batch_format="numpy",
    )
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    return [int(i) for b in loader for i in np.asarray(b["id"]).tolist()]


def _spec(url: str, s3_server: dict[str, Any], proxy: CountingProxy, cache: Path) -> dict[str, Any]:
    return dict(
        source=url,
        storage_options=_options(s3_server, proxy),
        cache_dir=str(cache),
        cache_bytes=10**8,
        format="parquet",
        num_workers=2,
        seed=5,
        rank=0,
        world_size=1,
    )


def test_two_concurrent_jobs_with_other_projections_fetch_each_chunk_once(
    s3_server: dict[str, Any], bucket: tuple[str, Any], proxy: CountingProxy, tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local")
    chunks = _chunk_bytes(tmp_path / "local")
    spec = _spec(url, s3_server, proxy, tmp_path / "cache")
    projections = {"ids": ["id"], "labels": ["id", "label"]}
    procs = {tag: _job(spec, tmp_path, tag, columns=cols) for tag, cols in projections.items()}
    for p in procs.values():
        assert p.wait(300) == 0
    for tag, cols in projections.items():
        got = json.loads((tmp_path / f"{tag}.json").read_text())
        assert got == _expected(tmp_path / "local", cols)
    fetched = _fetches(tmp_path / "cache")
    keys = [f["key"] for f in fetched]
    assert len(keys) == len(set(keys))  # each chunk once on the node, whichever job wanted it
    by_column: dict[str, int] = {}
    for f in fetched:
        by_column[f.get("column", "")] = by_column.get(f.get("column", ""), 0) + f["bytes"]
    assert set(by_column) <= {"id", "label", "(footer)"}  # never the payload
    node = NodeCache(str(tmp_path / "cache" / "units"), 10**9).node_fetched()
    assert node["bytes_per_column"] == by_column
    assert node["bytes_fetched"] == sum(by_column.values())  # nothing read outside the entries
    assert by_column["id"] <= chunks["id"] and by_column["label"] <= chunks["label"]
    total = sum(p.stat().st_size for p in (tmp_path / "local").iterdir())
    assert sum(by_column.values()) < total / 4


def test_sigkill_in_the_middle_of_a_chunk_download(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local")
    cache = tmp_path / "cache"
    with CountingProxy(s3_server["endpoint_url"], stall=30.0, stall_above=100_000) as slow:
        spec = _spec(url, s3_server, slow, cache)
        p = _job(spec, tmp_path, "killed", columns=["id", "payload"])
        tmp = cache / "units" / "tmp"
        deadline = time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:
            parts = list(tmp.glob("*.part")) if tmp.is_dir() else []
            if any(slow.requests[-1:]) and parts:
                break
            time.sleep(0.01)
        time.sleep(0.5)  # the payload chunk's response is stalled half-way
        assert p.poll() is None and list(tmp.glob("*.part"))
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)
        slow.stall = 0.0
        again = _job(spec, tmp_path, "again", columns=["id", "payload"])
        assert again.wait(300) == 0
    got = json.loads((tmp_path / "again.json").read_text())
    assert got == _expected(tmp_path / "local", ["id", "payload"])
    report = verify_cache(str(cache))
    assert report.bad == [] and report.checked > 0
    assert list(tmp.glob("*.part")) == []  # the killed download's part file is gone


@pytest.mark.parametrize("first_window", [None, "auto"])
def test_the_budget_holds_with_chunk_entries(
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
    first_window: str | None,
) -> None:
    from _cachework import disk_bytes

    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local")
    chunks = _chunk_bytes(tmp_path / "local")
    budget = 600_000  # a few payload chunks and the footers: evictions must happen
    root = tmp_path / "cache" / "units"
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            if (root / "tmp").is_dir():
                peak[0] = max(peak[0], disk_bytes(str(root)))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        ds = StreamingDataset(
            url,
            storage_options=_options(s3_server, proxy),
            cache_dir=str(tmp_path / "cache"),
            cache_bytes=budget,
            columns=["payload", "id"],
            batch_size=8,
            seed=5,
            format="parquet",
            batch_format="numpy",
            first_window=first_window,
        )
        got = _ids(ds)
    finally:
        stop.set()
        sampler.join()
    local = StreamingDataset(
        str(tmp_path / "local"),
        batch_size=8,
        seed=5,
        format="parquet",
        batch_format="numpy",
        first_window=first_window,
    )
    assert got == _ids(local)
    assert 0 < peak[0] <= budget
    assert ds.cache.stats.evictions > 0
    assert sum(f["bytes"] for f in _fetches(tmp_path / "cache")) > budget
    assert "label" not in ds.cache.stats.bytes_per_column
    # whole units: each chunk once. Head windows read a unit in two windows; a budget of a
    # few chunks cannot keep it between them, so a rest may download its chunk again
    once = ds.cache.stats.bytes_per_column["payload"] <= chunks["payload"]
    twice = ds.cache.stats.bytes_per_column["payload"] <= 2 * chunks["payload"]
    assert once if first_window is None else twice


def test_a_large_last_chunk_is_one_entry_read_in_place(
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    proxy: CountingProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last column chunk of a file crosses into the footer's last 64 KiB: it is one
    entry (its last bytes held twice, a sliver of it), so a warm read takes it in place
    instead of copying 10 MB out of two entries on every read. A read of every column
    keeps each row group as one entry (Arrow reads a row group's chunks as one range)."""
    from shardwise.storage import overlay

    name, fs = bucket
    local = tmp_path / "local"
    local.mkdir()
    rows = np.random.default_rng(1).integers(0, 256, (200, 100_000), dtype=np.uint8)
    t = pa.table({"id": np.arange(200), "payload": [r.tobytes() for r in rows]})
    pq.write_table(t, str(local / "big.parquet"), row_group_size=100, compression="none")
    fs.put(str(local / "big.parquet"), f"{name}/big/big.parquet")
    size = (local / "big.parquet").stat().st_size
    md = pq.ParquetFile(local / "big.parquet").metadata
    last = md.row_group(1).column(1)
    first = min(last.data_page_offset, last.dictionary_page_offset or last.data_page_offset)
    chunk_end = first + last.total_compressed_size
    assert size - 2**16 < chunk_end < size  # the case at hand: it reaches the footer's read
    views: list[bool] = []
    read_at = overlay.SparseFile.read_at

    def spy(self: Any, n: int, start: int) -> memoryview:
        if n >= 2**20:
            views.append(self._view(start, start + n) is not None)
        return read_at(self, n, start)

    monkeypatch.setattr(overlay.SparseFile, "read_at", spy)
    common = dict(batch_size=16, seed=3, format="parquet", batch_format="numpy")
    for columns in (["payload"], ["id", "payload"], None):
        want = _heads(StreamingDataset(str(local), columns=columns, **common))
        cache_dir = tmp_path / f"cache-{columns}"
        for epoch in ("cold", "warm"):
            ds = StreamingDataset(
                f"s3://{name}/big",
                storage_options=_options(s3_server, proxy),
                cache_dir=str(cache_dir),
                cache_bytes=10**9,
                columns=columns,
                **common,
            )
            proxy.reset()
            views.clear()
            assert _heads(ds) == want
            if epoch == "cold":  # each byte once, but for the sliver held twice
                assert 0 < proxy.get_bytes <= size * (1 + 1 / 128), proxy.get_bytes
            else:
                assert proxy.get_bytes == 0 and views and all(views), views
        ends = {j["start"] + j["bytes"] for j in _fetches(cache_dir)}
        assert chunk_end in ends  # the chunk (or its row group) is one entry


def _heads(ds: Any) -> list[bytes]:
    """Each row's payload's first bytes, in the order read."""
    return [bytes(p[:16]) for b in ds for p in b["payload"]]
