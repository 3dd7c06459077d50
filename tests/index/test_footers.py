"""The concurrent Parquet indexer: the same index as the per-file reader, byte for byte
(local disk and S3); one request per file cold; a warm open lists once and reads only the
saved index; a changed file is noticed and re-read alone; the progress bar."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _latencyproxy import LatencyProxy

from shardwise import FormatError
from shardwise.index import INDEX_NAME, index_dataset
from shardwise.index.footers import index_parquet
from shardwise.parallel import parallel_backend
from shardwise.storage import FileInfo, info


def _parquet_bytes(i: int, wide: bool = False) -> bytes:
    """Small files of varied shapes; ``wide`` makes a footer larger than 64 KiB."""
    n = 5 + i % 7
    cols: dict[str, Any] = {
        "id": pa.array(range(n), pa.int64()),
        "t": [f"r{i}-{j}" for j in range(n)],
    }
    if wide:
        cols.update({f"c{k:03d}_{'x' * 40}": pa.array(range(n), pa.int32()) for k in range(400)})
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf, row_group_size=2 + i % 3)
    return buf.getvalue()


def _local_files(root: Path, count: int) -> list[Path]:
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        p = root / f"part-{i:04d}.parquet"
        p.write_bytes(_parquet_bytes(i, wide=i == 3))
        paths.append(p)
    return paths


def _reference_json(url: str, **kwargs: Any) -> str:
    """The index as the per-file reader (``list_units`` + ``read_schema``) builds it."""
    with parallel_backend("thread"):
        return index_dataset(url, refresh=True, progress=False, **kwargs).to_json()


def test_same_index_as_the_per_file_reader_on_local_files(tmp_path: Path) -> None:
    paths = _local_files(tmp_path / "pq", 40)
    tail = paths[3].read_bytes()[-8:]
    assert int.from_bytes(tail[:4], "little") > 64 * 1024  # its footer needs a second read
    fast = index_dataset(str(tmp_path / "pq"), refresh=True, progress=False)
    assert fast.to_json() == _reference_json(str(tmp_path / "pq"))
    assert fast.num_samples == sum(pq.ParquetFile(p).metadata.num_rows for p in paths)


def test_indexer_keeps_order_and_names_a_bad_file(tmp_path: Path) -> None:
    paths = _local_files(tmp_path / "pq", 20)
    infos = [FileInfo(str(p), p.stat().st_size, "") for p in paths]
    got = index_parquet(infos, {}, progress=False)
    assert [units[0].path for units, _ in got] == [str(p) for p in paths]
    paths[7].write_bytes(paths[7].read_bytes()[:-3])
    infos[7] = FileInfo(str(paths[7]), paths[7].stat().st_size, "")
    with pytest.raises(FormatError, match="not a readable Parquet file") as err:
        index_parquet(infos, {}, progress=False)
    assert str(paths[7]) in str(err.value)


@pytest.mark.parametrize(
    "data",
    [b"", b"PAR1", b"PAR1" + b"\xff\xff\xff\x7fPAR1", b"PAR1" + b"\x04\x00\x00\x00PAR1"],
    ids=["empty", "short", "footer-beyond-file", "bad-footer"],
)
def test_damaged_footers_give_the_per_file_readers_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(data)
    with pytest.raises(FormatError) as fast:
        index_dataset(str(path), refresh=True, progress=False)
    with pytest.raises(FormatError) as slow, parallel_backend("thread"):
        index_dataset(str(path), refresh=True, progress=False)
    assert str(fast.value) == str(slow.value) and str(path) in str(fast.value)


def test_progress_bar_shows_files_per_second(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHARDWISE_PROGRESS", raising=False)
    _local_files(tmp_path / "pq", 20)
    index_dataset(str(tmp_path / "pq"), refresh=True, progress=True)
    err = capfd.readouterr().err
    assert "index files" in err and "20/20" in err and "files/s" in err
    index_dataset(str(tmp_path / "pq"), refresh=True, progress=False)
    assert "index files" not in capfd.readouterr().err


# --------------------------------------------------------------------------- S3 (SeaweedFS)


def _upload(fs: Any, prefix: str, count: int) -> None:
    for i in range(count):
        fs.pipe_file(f"{prefix}/part-{i:04d}.parquet", _parquet_bytes(i, wide=i == 3))


def _options(server: dict[str, Any], endpoint: str) -> dict[str, Any]:
    return {
        "key": server["key"],
        "secret": server["secret"],
        "client_kwargs": {"endpoint_url": endpoint},
    }


def _data_requests(proxy: LatencyProxy, method: str) -> list[str]:
    return [p for m, p in proxy.paths if m == method and "/part-" in p]


def _listings(proxy: LatencyProxy) -> list[str]:
    """Listings of the dataset (not those atomic_write makes while saving the index)."""
    return [p for m, p in proxy.paths if "list-type" in p and "_shardwise_index" not in p]


def _file_gets(proxy: LatencyProxy, prefix: str) -> list[str]:
    return [
        p for m, p in proxy.paths if m == "GET" and p.split("?")[0].startswith(f"/{prefix}/part-")
    ]


@pytest.mark.engine
def test_s3_cold_warm_and_a_changed_file(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    _upload(fs, f"{name}/ds", 30)
    url = f"s3://{name}/ds"
    with LatencyProxy(s3_server["endpoint_url"]) as proxy:
        opts = _options(s3_server, proxy.url)
        cold = index_dataset(url, storage_options=opts, progress=False)
        # one listing; one ranged GET per file (two for the file whose footer is larger);
        # then the index is saved (atomic_write's own requests, none per file)
        assert _data_requests(proxy, "HEAD") == [] and len(_listings(proxy)) == 1, proxy.paths
        gets = _file_gets(proxy, f"{name}/ds")
        assert len(gets) == 31 and len(set(gets)) == 30, gets
        assert cold.location == f"{url}/{INDEX_NAME}"
        assert cold.to_json() == _reference_json(url, storage_options=opts)

        proxy.reset()
        warm = index_dataset(url, storage_options=opts, progress=False)
        counts = proxy.snapshot()
        assert warm.reused_files == 30 and warm.to_json() == cold.to_json()
        # the listing, then the saved index: nothing per file, nothing written
        assert counts == {"GET": 2, "LIST": 1, "total": 2}, (counts, proxy.paths)

        time.sleep(1.1)  # a new modification time even where it has whole seconds
        fs.pipe_file(f"{name}/ds/part-0011.parquet", _parquet_bytes(50))
        proxy.reset()
        changed = index_dataset(url, storage_options=opts, progress=False)
        assert changed.reused_files == 29
        assert (
            _file_gets(proxy, f"{name}/ds")
            == [p for m, p in proxy.paths if m == "GET" and "part-0011" in p]
            and len(_file_gets(proxy, f"{name}/ds")) == 1
        )
        assert _data_requests(proxy, "HEAD") == [] and len(_listings(proxy)) == 1, proxy.paths
        entry = {f.path: f for f in changed.files}[f"{url}/part-0011.parquet"]
        assert entry.fingerprint == info(f"{url}/part-0011.parquet", **opts).fingerprint
        assert entry.num_samples == 5 + 50 % 7
        assert changed.to_json() == _reference_json(url, storage_options=opts)


@pytest.mark.engine
def test_s3_glob_index_in_the_cache_dir(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    _upload(fs, f"{name}/g", 12)
    pattern = f"s3://{name}/g/*.parquet"
    with LatencyProxy(s3_server["endpoint_url"]) as proxy:
        opts = _options(s3_server, proxy.url)
        cache = str(tmp_path / "cache")
        cold = index_dataset(pattern, storage_options=opts, cache_dir=cache, progress=False)
        assert cold.location.startswith(cache) and os.path.exists(cold.location)
        assert cold.to_json() == _reference_json(pattern, storage_options=opts, cache_dir=cache)
        proxy.reset()
        warm = index_dataset(pattern, storage_options=opts, cache_dir=cache, progress=False)
        assert warm.reused_files == 12
        assert proxy.snapshot() == {"LIST": 1, "GET": 1, "total": 1}, proxy.paths
