"""The light road for small S3 GETs: signatures equal to botocore's, the same bytes as
s3fs (odd keys included), one request per file, the filesystems it leaves to s3fs, and
every failure handed back to s3fs (whose errors a user then sees)."""

from __future__ import annotations

import calendar
import io
import time
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs
from _latencyproxy import LatencyProxy
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from shardwise import StorageError
from shardwise.index import index_dataset
from shardwise.index.footers import index_parquet
from shardwise.parallel import parallel_backend
from shardwise.storage import FileInfo, s3gets
from shardwise.storage.sigv4 import Signer, encode_key

_KEYS = [
    "plain/part-0.parquet",
    "with space/é ü/a+b=c~d!e*f'g(h)$&,;@:.parquet",
    "double//slash/%41.parquet",
]


@pytest.mark.parametrize("token", [None, "temporary-token/+="])
@pytest.mark.parametrize("key", _KEYS)
@pytest.mark.parametrize(
    "base", ["https://s3.eu-west-1.amazonaws.com/bucket", "http://127.0.0.1:8333/bucket"]
)
def test_signature_is_botocores(base: str, key: str, token: str | None) -> None:
    url = f"{base}/{encode_key(key)}"
    request = AWSRequest(method="GET", url=url, headers={})
    request.context["client_config"] = None
    S3SigV4Auth(Credentials("AKIDEXAMPLE", "secret/key+", token), "s3", "eu-west-1").add_auth(
        request
    )
    stamp = request.headers["X-Amz-Date"]
    now = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    host, path = url.split("://", 1)[1].split("/", 1)
    ours = Signer("AKIDEXAMPLE", "secret/key+", token, "eu-west-1").headers(host, "/" + path, now)
    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-content-sha256"] == request.headers["X-Amz-Content-SHA256"]


def _fs(**kwargs: Any) -> Any:
    return s3fs.S3FileSystem(key="k", secret="s", skip_instance_cache=True, **kwargs)


def test_the_clients_timeouts_are_the_roads() -> None:
    fs = _fs(
        client_kwargs={"endpoint_url": "http://127.0.0.1:1"},
        config_kwargs={"read_timeout": 2, "connect_timeout": 3},
    )

    async def timeouts() -> tuple[float | None, float | None]:
        light = await s3gets.LightGets.open(fs, 4)
        assert light is not None
        timeout = light._open_session().timeout
        await light.close()
        return timeout.sock_read, timeout.sock_connect

    assert fsspec.asyn.sync(fs.loop, timeouts) == (2.0, 3.0)


def test_filesystems_left_to_s3fs() -> None:
    plain = s3gets._plain
    assert plain(_fs())
    assert plain(_fs(client_kwargs={"endpoint_url": "http://127.0.0.1:1"}))
    assert plain(_fs(config_kwargs={"max_pool_connections": 64}))
    assert not plain(s3fs.S3FileSystem(anon=True, skip_instance_cache=True))
    assert not plain(_fs(requester_pays=True))
    assert not plain(_fs(version_aware=True))
    assert not plain(_fs(s3_additional_kwargs={"SSECustomerKey": "x" * 32}))
    assert not plain(_fs(client_kwargs={"verify": False}))
    assert not plain(_fs(config_kwargs={"proxies": {"https": "http://p:1"}}))
    assert not plain(_fs(cache_regions=True))


# --------------------------------------------------------------------------- SeaweedFS


def _table_bytes(i: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(5 + i), pa.int64())}), buf)
    return buf.getvalue()


def _options(server: dict[str, Any], endpoint: str) -> dict[str, Any]:
    return {
        "key": server["key"],
        "secret": server["secret"],
        "client_kwargs": {"endpoint_url": endpoint},
    }


@pytest.fixture
def light_hits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """[GETs the light road answered, GETs it handed back to s3fs]."""
    counts = [0, 0]
    real = s3gets.LightGets.get

    async def counted(self: Any, url: str, path: str, *rest: Any) -> bytes | None:
        got = await real(self, url, path, *rest)
        counts[got is None] += 1
        return got

    monkeypatch.setattr(s3gets.LightGets, "get", counted)
    return counts


def _upload(fs: Any, prefix: str) -> list[str]:
    keys = [f"{prefix}/{k}" for k in _KEYS] + [f"{prefix}/n/{i:03d}.parquet" for i in range(20)]
    for i, key in enumerate(keys):
        fs.pipe_file(key, _table_bytes(i))
    return keys


def _reference(url: str, opts: dict[str, Any]) -> str:
    with parallel_backend("thread"):  # the per-file reader: s3fs alone
        return index_dataset(url, storage_options=opts, refresh=True, progress=False).to_json()


@pytest.mark.engine
def test_odd_keys_one_light_get_each(
    s3_server: dict[str, Any], bucket: tuple[str, Any], light_hits: list[int]
) -> None:
    name, fs = bucket
    keys = _upload(fs, f"{name}/odd")
    with LatencyProxy(s3_server["endpoint_url"]) as proxy:
        opts = _options(s3_server, proxy.url)
        got = index_dataset(f"s3://{name}/odd", storage_options=opts, progress=False)
        gets = [p for m, p in proxy.paths if m == "GET" and ".parquet" in p]
        assert len(gets) == len(keys), gets
        assert light_hits == [len(keys), 0]
        assert got.to_json() == _reference(f"s3://{name}/odd", opts)
    assert got.num_samples == sum(5 + i for i in range(len(keys)))


@pytest.mark.engine
def test_a_refused_signature_turns_the_road_off(
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    light_hits: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, fs = bucket
    keys = _upload(fs, f"{name}/refused")
    real = Signer.headers

    def wrong(self: Signer, host: str, path: str, now: float | None = None) -> dict[str, str]:
        headers = real(self, host, path, now)
        headers["authorization"] = headers["authorization"][:-4] + "0000"
        return headers

    monkeypatch.setattr(Signer, "headers", wrong)
    with LatencyProxy(s3_server["endpoint_url"]) as proxy:
        opts = _options(s3_server, proxy.url)
        got = index_dataset(f"s3://{name}/refused", storage_options=opts, progress=False)
        gets = [p for m, p in proxy.paths if m == "GET" and ".parquet" in p]
        # the refused ones (those already in flight when the first answer came), then s3fs
        assert light_hits[0] == 0 and light_hits[1] == len(keys)
        assert len(gets) - len(keys) <= 64, gets
        assert got.to_json() == _reference(f"s3://{name}/refused", opts)


@pytest.mark.engine
def test_a_missing_file_is_s3fs_error(
    s3_server: dict[str, Any], bucket: tuple[str, Any], light_hits: list[int]
) -> None:
    name, fs = bucket
    _upload(fs, f"{name}/gone")
    opts = _options(s3_server, s3_server["endpoint_url"])
    url = f"s3://{name}/gone/n/999.parquet"  # listed once, deleted since
    with pytest.raises(StorageError) as err:
        index_parquet([FileInfo(url, 1000, "x")], opts, progress=False)
    assert url in str(err.value)
    assert light_hits == [0, 1]


async def _no_road() -> None:
    return None


@pytest.mark.engine
def test_a_file_changed_since_the_listing_is_refused(
    s3_server: dict[str, Any], bucket: tuple[str, Any], light_hits: list[int]
) -> None:
    name, fs = bucket
    fs.pipe_file(f"{name}/ch/a.parquet", _table_bytes(3))
    url = f"s3://{name}/ch/a.parquet"
    opts = _options(s3_server, s3_server["endpoint_url"])
    size = len(_table_bytes(3))
    etag = fs.info(f"{name}/ch/a.parquet")["ETag"].strip('"')
    assert (
        index_parquet([FileInfo(url, size, etag)], opts, progress=False)[0][0][0].num_samples == 8
    )
    # replaced by another of the same size since it was listed: its ETag says so
    with pytest.raises(StorageError, match="changed while it was indexed") as err:
        index_parquet([FileInfo(url, size, "0" * 32)], opts, progress=False)
    assert url in str(err.value)
    # shorter than listed: the last bytes asked for are not all there (both roads)
    with pytest.raises(StorageError, match="changed while it was indexed"):
        index_parquet([FileInfo(url, size + 10, "")], opts, progress=False)
    # emptied: the range starts past the end (416 on both roads), an error naming the file
    with pytest.raises(StorageError, match="changed while it was indexed") as gone:
        index_parquet([FileInfo(url, size + 10**6, "")], opts, progress=False)
    assert url in str(gone.value)
    with pytest.MonkeyPatch.context() as m:  # s3fs alone (the road left to it)
        m.setattr(s3gets.LightGets, "open", classmethod(lambda cls, fs, n: _no_road()))
        with pytest.raises(StorageError) as by_s3fs:
            index_parquet([FileInfo(url, size + 10**6, "")], opts, progress=False)
    assert url in str(by_s3fs.value) and light_hits == [1, 1]  # the short read went to s3fs


def test_a_local_file_shorter_than_listed_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "a.parquet"
    path.write_bytes(_table_bytes(2))
    size = path.stat().st_size
    with pytest.raises(StorageError, match="changed while it was indexed") as err:
        index_parquet([FileInfo(str(path), size + 5, "")], {}, progress=False)
    assert str(path) in str(err.value)


def test_an_endpoint_without_its_scheme_is_named() -> None:
    opts = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": "127.0.0.1:1"}}
    with pytest.raises(StorageError, match="starts with http://") as err:
        index_dataset("s3://bucket/data", storage_options=opts, progress=False)
    assert "s3://bucket/data" in str(err.value)


@pytest.mark.engine
def test_a_path_the_store_calls_bad_is_named(
    s3_server: dict[str, Any], bucket: tuple[str, Any]
) -> None:
    name, fs = bucket
    fs.pipe_file(f"{name}/dots/x.parquet", _table_bytes(1))
    opts = _options(s3_server, s3_server["endpoint_url"])
    url = f"s3://{name}/dots/./x.parquet"
    with pytest.raises(StorageError, match="refused the request") as err:
        index_dataset(url, storage_options=opts, progress=False)
    assert url in str(err.value)
