"""Streaming from a real S3 server (SeaweedFS) through the node cache: the samples equal
local disk's, each unit is fetched once per node (ranks, DataLoader workers and
concurrent jobs sharing the directory), a warm epoch and a resume fetch nothing, the
budget holds on disk, and a run killed with SIGKILL leaves nothing a new run trips on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _cachework import disk_bytes

from shardwise import StreamingDataset
from shardwise.formats import get_format
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.admin import verify_cache

pytestmark = pytest.mark.engine

ROWS = 2_000
JOB = str(Path(__file__).resolve().parents[2] / "support" / "_cachejob.py")


def _table(fmt: str, offset: int = 0) -> pa.Table:
    ids = np.arange(offset, offset + ROWS, dtype=np.int64)
    if fmt == "webdataset":
        return pa.table({"__key__": [f"s{i:06d}" for i in ids], "txt": [f"doc {i}" for i in ids]})
    return pa.table(
        {
            "id": ids,
            "text": [f"doc {i} ünï" * (1 + i % 5) for i in ids],
            "vec": pa.array([[float(i), -float(i)] for i in ids], pa.list_(pa.float32())),
        }
    )


def _upload(fs: Any, name: str, root: Path, fmt: str, prefix: str, offset: int = 0) -> str:
    root.mkdir(parents=True)
    if fmt == "parquet":  # 4 files of 4 row groups: units are byte ranges inside files
        noise = np.random.default_rng(offset).integers(0, 256, (ROWS, 600), dtype=np.uint8)
        t = _table(fmt, offset).append_column(
            "noise", pa.array([r.tobytes() for r in noise], pa.binary())
        )
        for k in range(4):
            pq.write_table(
                t.slice(k * ROWS // 4, ROWS // 4),
                str(root / f"part-{k}.parquet"),
                row_group_size=125,
            )
    else:
        writer = get_format(fmt).open_writer(str(root / "part"), target_shard_bytes=12_000)
        for batch in _table(fmt, offset).to_batches(max_chunksize=97):
            writer.write(batch)
        writer.close()
    for p in sorted(root.iterdir()):
        if not p.name.startswith(("_", ".")):
            fs.put(str(p), f"{name}/{prefix}/{p.name}")
    return f"s3://{name}/{prefix}"


def _common(fmt: str, **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(batch_size=8, seed=5, format=fmt, batch_format="numpy", **kw)
    if fmt == "jsonl":
        out["unit_bytes"] = 8_000
    return out


def _epoch(ds: Any, workers: int = 2) -> list[str]:
    from torch.utils.data import DataLoader

    key = "__key__" if "__key__" in ds.index.schema.names else "id"
    return [
        str(v)
        for batch in DataLoader(ds, batch_size=None, num_workers=workers)
        for v in np.asarray(batch[key]).tolist()
    ]


def _remote(url: str, s3_server: dict[str, Any], cache_dir: Path, fmt: str) -> StreamingDataset:
    """The dataset at ``url`` on the S3 server, through a node cache in ``cache_dir``."""
    return StreamingDataset(
        url,
        storage_options=s3_server["storage_options"],
        cache_dir=str(cache_dir),
        cache_bytes=10**8,
        num_workers=2,
        **_common(fmt),
    )


def _fetches(cache_dir: Path) -> list[dict[str, Any]]:
    return NodeCache(str(cache_dir / "units"), 10**9).journal()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "webdataset"])
def test_cached_dataloader_equals_local_and_fetches_each_unit_once(
    fmt: str, s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", fmt, "ds")
    cache_dir = tmp_path / "cache"
    local = StreamingDataset(str(tmp_path / "local"), num_workers=2, **_common(fmt))
    remote = _remote(url, s3_server, cache_dir, fmt)
    cold = _epoch(remote)
    assert cold == _epoch(local) and len(cold) == len(set(cold)) > ROWS * 0.9
    fetched = _fetches(cache_dir)
    keys = [f["key"] for f in fetched]
    assert all(f["kind"] == "download" for f in fetched) and len(keys) == len(set(keys))
    files = {f.path: f.size for f in remote.index.files}
    if fmt != "parquet":
        assert len(keys) == remote.index.num_units
    else:  # row groups come by byte range; each file's footer (its last 64 KiB) once, no byte twice
        sized = [(f, files[f["source"].split("|", 1)[1]]) for f in fetched]
        assert sum(f["bytes"] for f in fetched) <= sum(files.values())
        row_groups = [f for f, size in sized if f["start"] + f["bytes"] < size]
        assert len(row_groups) >= remote.index.num_units - len(files)
        assert all(f["bytes"] < size / 3 for f, size in sized if f in row_groups)
        assert all(f["bytes"] <= 64 * 2**10 for f, size in sized if f not in row_groups)
    for ds in (local, remote):
        ds.set_epoch(1)
    assert _epoch(remote) == _epoch(local)
    assert len(_fetches(cache_dir)) == len(fetched)  # the warm epoch fetched nothing


def test_a_file_of_one_row_group_comes_in_one_request(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    root = tmp_path / "local"
    root.mkdir()
    noise = np.random.default_rng(1).integers(
        0, 256, (ROWS, 600), dtype=np.uint8
    )  # row groups > 64 KiB
    t = _table("parquet").append_column(
        "noise", pa.array([r.tobytes() for r in noise], pa.binary())
    )
    for k in range(3):  # three files of one row group, one of four
        pq.write_table(t.slice(k * 400, 400), str(root / f"one-{k}.parquet"))
    pq.write_table(t.slice(1200, 800), str(root / "four.parquet"), row_group_size=200)
    for p in sorted(root.iterdir()):
        fs.put(str(p), f"{name}/single/{p.name}")
    cache_dir = tmp_path / "cache"
    local = StreamingDataset(str(root), num_workers=2, **_common("parquet"))
    remote = StreamingDataset(
        f"s3://{name}/single",
        storage_options=s3_server["storage_options"],
        cache_dir=str(cache_dir),
        cache_bytes=10**8,
        num_workers=2,
        **_common("parquet"),
    )
    assert _epoch(remote) == _epoch(local)
    files = {f.path.rsplit("/", 1)[1]: f.size for f in remote.index.files}
    by_file: dict[str, list[dict[str, Any]]] = {}
    for f in _fetches(cache_dir):
        by_file.setdefault(f["source"].rsplit("/", 1)[1], []).append(f)
    for k in range(3):  # footer and row group together: the whole file, one ranged read, one entry
        assert [(f["start"], f["bytes"]) for f in by_file[f"one-{k}.parquet"]] == [
            (0, files[f"one-{k}.parquet"])
        ]
    four = by_file["four.parquet"]  # its footer once, then each row group by its own range
    assert len(four) == 5 and sum(f["bytes"] for f in four) <= files["four.parquet"]
    entries = sorted(os.listdir(cache_dir / "units" / "entries"))
    assert len(entries) == 3 + 5 and sorted(os.listdir(cache_dir / "units" / "verified")) == entries
    for ds in (local, remote):
        ds.set_epoch(1)
    assert _epoch(remote) == _epoch(local)
    assert len(_fetches(cache_dir)) == 3 + 5  # nothing on the warm epoch


def test_set_epoch_downloads_the_first_units_of_every_worker_while_they_start(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", "parquet", "ds")
    local = StreamingDataset(str(tmp_path / "local"), num_workers=2, **_common("parquet"))
    unit = max(u.num_bytes for u in local.index.units)
    cache_dir = tmp_path / "cache"
    remote = StreamingDataset(
        url,
        storage_options=s3_server["storage_options"],
        cache_dir=str(cache_dir),
        cache_bytes=10**8,
        num_workers=2,
        prefetch_bytes=unit,
        **_common("parquet"),
    )
    remote.set_epoch(0)  # a head start of one unit's bytes per worker: each worker's first unit
    assert remote._head is not None
    remote._head.join(60)
    fetched = _fetches(cache_dir)
    assert {f["pid"] for f in fetched} == {os.getpid()}
    firsts = {remote.plan(2).worker(0, w).units()[0] for w in range(2)}
    sizes = {f.path: f.size for f in remote.index.files}
    row_groups = {
        (f["source"].split("|", 1)[1], f["start"])
        for f in fetched
        if f["start"] + f["bytes"] < sizes[f["source"].split("|", 1)[1]]
    }  # not a footer
    assert len(row_groups) == len(firsts) == 2
    assert _epoch(remote) == _epoch(local)
    keys = [f["key"] for f in _fetches(cache_dir)]
    assert len(keys) == len(set(keys))  # nothing fetched twice, by the workers or the head start
    wide = StreamingDataset(
        url,
        storage_options=s3_server["storage_options"],
        cache_dir=str(tmp_path / "c2"),
        cache_bytes=10**8,
        num_workers=2,
        **_common("parquet"),
    )
    for ds in (wide, local):
        ds.set_epoch(1)  # workers start at once, while the head start (all units) is under way
    assert _epoch(wide) == _epoch(local)
    assert wide._head is not None
    wide._head.join(60)
    fetched = _fetches(tmp_path / "c2")
    assert len({f["key"] for f in fetched}) == len(fetched)
    assert sum(f["bytes"] for f in fetched) <= sum(f.size for f in wide.index.files)
    assert os.getpid() in {f["pid"] for f in fetched}
    hits = wide.cache.stats.hits
    wide.set_epoch(2)
    wide._head.join(60)
    assert (
        wide.cache.stats.hits == hits
    )  # on a warm cache the head start only looks (a stat per unit)
    assert _epoch(wide) == (local.set_epoch(2) or _epoch(local))
    assert len(_fetches(tmp_path / "c2")) == len(fetched)  # a warm epoch: nothing fetched


def test_a_resume_fetches_nothing_already_cached(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", "parquet", "ds")
    common = dict(
        _common("parquet", num_workers=1, interleave=1, prefetch_bytes=1), batch_format=None
    )
    opts = dict(
        storage_options=s3_server["storage_options"],
        cache_dir=str(tmp_path / "cache"),
        cache_bytes=10**8,
        **common,
    )
    want = [int(r["id"]) for r in StreamingDataset(str(tmp_path / "local"), **common)]
    first = StreamingDataset(url, **opts)
    got: list[int] = []
    for row in first:
        got.append(int(row["id"]))
        if len(got) == 60 * 8:
            break
    state = first.state_dict(60)
    before = _fetches(tmp_path / "cache")
    second = StreamingDataset(url, **opts)
    second.load_state_dict(state)
    got.extend(int(r["id"]) for r in second)
    assert got == want
    keys = [f["key"] for f in _fetches(tmp_path / "cache")]
    assert len(before) < len(keys) == len(set(keys))  # the rest came once; nothing twice


def _job(spec: dict[str, Any], tmp_path: Path, tag: str, **kw: Any) -> subprocess.Popen[bytes]:
    spec = dict(spec, out=str(tmp_path / f"{tag}.json"), **kw)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(JOB).parent), *sys.path]))
    return subprocess.Popen(
        [sys.executable, JOB, json.dumps(spec)], env=env, start_new_session=True
    )


def _expected(local: Path, seed: int, rank: int = 0, world: int = 1, workers: int = 2) -> list[int]:
    ds = StreamingDataset(
        str(local),
        rank=rank,
        world_size=world,
        num_workers=workers,
        **dict(_common("parquet"), seed=seed),
    )
    return [int(i) for i in _epoch(ds, workers)]


def test_two_ranks_and_concurrent_jobs_share_one_copy(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url_a = _upload(fs, name, tmp_path / "a", "parquet", "a")
    url_b = _upload(fs, name, tmp_path / "b", "parquet", "b", offset=10**6)
    base = dict(
        storage_options=s3_server["storage_options"],
        cache_dir=str(tmp_path / "cache"),
        cache_bytes=10**8,
        format="parquet",
        num_workers=2,
        seed=5,
    )
    jobs = {
        "a0": dict(source=url_a, rank=0, world_size=2),
        "a1": dict(source=url_a, rank=1, world_size=2),
        "other_seed": dict(source=url_a, rank=0, world_size=1, seed=9),
        "other_data": dict(source=url_b, rank=0, world_size=1),
    }
    procs = {tag: _job(base, tmp_path, tag, **kw) for tag, kw in jobs.items()}
    for p in procs.values():
        assert p.wait(300) == 0
    got = {tag: json.loads((tmp_path / f"{tag}.json").read_text()) for tag in jobs}
    assert got["a0"] == _expected(tmp_path / "a", 5, 0, 2) and got["a1"] == _expected(
        tmp_path / "a", 5, 1, 2
    )
    assert got["other_seed"] == _expected(tmp_path / "a", 9)
    assert got["other_data"] == _expected(tmp_path / "b", 5)
    fetched = _fetches(tmp_path / "cache")
    keys = [f["key"] for f in fetched]
    # each range once on this node: never more than the two data sets' bytes
    data_bytes = sum(p.stat().st_size for d in ("a", "b") for p in (tmp_path / d).iterdir())
    assert len(keys) == len(set(keys)) and sum(f["bytes"] for f in fetched) <= data_bytes
    assert {f["source"].split("|", 1)[1].split("/")[3] for f in fetched} == {"a", "b"}


def test_sigkill_mid_run_then_a_new_run_completes(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", "parquet", "ds")
    spec = dict(
        source=url,
        storage_options=s3_server["storage_options"],
        cache_dir=str(tmp_path / "cache"),
        cache_bytes=10**8,
        format="parquet",
        num_workers=2,
        seed=5,
        rank=0,
        world_size=1,
    )
    started = tmp_path / "started"
    p = _job(spec, tmp_path, "killed", started=str(started))
    deadline = time.monotonic() + 120
    while not started.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL)  # the job and its DataLoader workers, mid-epoch
    p.wait(30)
    again = _job(spec, tmp_path, "again")
    assert again.wait(300) == 0
    assert json.loads((tmp_path / "again.json").read_text()) == _expected(tmp_path / "local", 5)
    assert verify_cache(str(tmp_path / "cache")).bad == []


def test_the_budget_holds_on_disk_while_streaming(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", "parquet", "ds")
    sizes = sorted(os.path.getsize(p) for p in (tmp_path / "local").iterdir())
    budget = sizes[-1] * 3 // 2  # about six row groups and their footers: evictions must happen
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
            storage_options=s3_server["storage_options"],
            cache_dir=str(tmp_path / "cache"),
            cache_bytes=budget,
            num_workers=2,
            **_common("parquet"),
        )
        got = _epoch(ds)
    finally:
        stop.set()
        sampler.join()
    assert got == _epoch(
        StreamingDataset(str(tmp_path / "local"), num_workers=2, **_common("parquet"))
    )
    assert 0 < peak[0] <= budget
    assert (
        sum(f["bytes"] for f in _fetches(tmp_path / "cache")) > budget
    )  # more went through than fits


@pytest.mark.parametrize("fmt", ["webdataset", "jsonl"])
def test_the_head_start_fetches_units_read_whole_by_ranges(
    fmt: str,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, fs = bucket
    url = _upload(fs, name, tmp_path / "local", fmt, "ds")
    whole: list[str] = []  # downloads in one piece, by this process
    real = NodeCache._download
    monkeypatch.setattr(
        NodeCache, "_download", lambda self, e, f: whole.append(e.key) or real(self, e, f)
    )
    cache_dir = tmp_path / "cache"
    local = StreamingDataset(str(tmp_path / "local"), num_workers=2, **_common(fmt))
    remote = _remote(url, s3_server, cache_dir, fmt)
    remote.set_epoch(0)
    assert remote._head is not None
    remote._head.join(60)  # the head start waits for its downloads: they are on disk now
    fetched = _fetches(cache_dir)
    firsts = {remote.plan(2).worker(0, w).units()[0] for w in range(2)}
    assert len(fetched) >= len(firsts) and {f["pid"] for f in fetched} == {os.getpid()}
    assert whole == []  # by ranges on the download threads, none in one piece
    assert _epoch(remote) == _epoch(local)
    keys = [f["key"] for f in _fetches(cache_dir)]
    assert len(keys) == len(set(keys)) == remote.index.num_units  # each unit once
