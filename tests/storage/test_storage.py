"""Storage layer: path expansion, memory:// and s3:// URLs, retries, atomic commit.

The S3 tests run against a real SeaweedFS server started by the ``s3_server``
fixture (tests/_s3server.py) and are marked ``engine``.
"""

import errno
import io
import json
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import CommitError, ConfigError, EmptyDatasetError, StorageError
from shardwise.formats import get_format
from shardwise.index import index_dataset
from shardwise.storage import (
    atomic_write,
    expand,
    info,
    join,
    open_arrow_input,
    open_input,
    resolve,
    with_retries,
)
from shardwise.storage.refusals import named
from shardwise.storage.retry import is_transient

# --------------------------------------------------------------------------- expand


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_expand_glob_is_sorted_and_stable(tmp_path: Path) -> None:
    # created out of order, so directory order is not sorted order
    for name in ["part-10.jsonl", "part-02.jsonl", "part-1.jsonl", "Part-3.jsonl", "part-00.jsonl"]:
        _touch(tmp_path / name)
    first = expand(str(tmp_path / "*.jsonl"))
    names = [os.path.basename(p) for p in first]
    assert (
        names
        == sorted(names)
        == ["Part-3.jsonl", "part-00.jsonl", "part-02.jsonl", "part-1.jsonl", "part-10.jsonl"]
    )
    assert all(os.path.isabs(p) and os.path.exists(p) for p in first)
    for _ in range(3):
        assert expand(str(tmp_path / "*.jsonl")) == first


def test_expand_skips_hidden_and_underscore_files(tmp_path: Path) -> None:
    _touch(tmp_path / "a.parquet")
    _touch(tmp_path / ".a.parquet.crc")
    _touch(tmp_path / ".hidden.parquet")
    _touch(tmp_path / "_SUCCESS")
    _touch(tmp_path / "_shardwise_index.json")
    _touch(tmp_path / "_tmp.0123abcd.b.parquet")
    _touch(tmp_path / "sub" / "b.parquet")
    _touch(tmp_path / "sub" / "_c.parquet")
    assert expand(str(tmp_path)) == [
        str(tmp_path / "a.parquet"),
        str(tmp_path / "sub" / "b.parquet"),
    ]
    assert expand(str(tmp_path / "*")) == [
        str(tmp_path / "a.parquet")
    ]  # the sub directory itself is not a file
    assert expand(str(tmp_path / "**" / "*.parquet")) == [
        str(tmp_path / "a.parquet"),
        str(tmp_path / "sub" / "b.parquet"),
    ]


def test_expand_directories_recursively_and_keeps_input_order(tmp_path: Path) -> None:
    for rel in ["z/2.tar", "z/deep/er/1.tar", "a/9.tar", "a/10.tar", "m.tar"]:
        _touch(tmp_path / rel)
    z = expand(str(tmp_path / "z"))
    assert z == [str(tmp_path / "z" / "2.tar"), str(tmp_path / "z" / "deep" / "er" / "1.tar")]
    both = expand([str(tmp_path / "z"), str(tmp_path / "a"), str(tmp_path / "m.tar")])
    assert both == z + [
        str(tmp_path / "a" / "10.tar"),
        str(tmp_path / "a" / "9.tar"),
        str(tmp_path / "m.tar"),
    ]
    assert expand(tmp_path / "m.tar") == [str(tmp_path / "m.tar")]  # PathLike works too


def test_expand_extension_filter(tmp_path: Path) -> None:
    for name in ["a.jsonl", "b.jsonl.gz", "c.parquet", "d.txt"]:
        _touch(tmp_path / name)
    got = expand(str(tmp_path), extensions=(".jsonl", ".jsonl.gz"))
    assert [os.path.basename(p) for p in got] == ["a.jsonl", "b.jsonl.gz"]
    with pytest.raises(EmptyDatasetError):
        expand(str(tmp_path), extensions=(".tar",))


def test_expand_empty_glob_is_a_clear_error(tmp_path: Path) -> None:
    pattern = str(tmp_path / "nothing-*.parquet")
    with pytest.raises(EmptyDatasetError) as err:
        expand(pattern)
    assert str(err.value) == f"no data files matched {pattern}"
    assert err.value.path == pattern
    assert isinstance(err.value, StorageError)


def test_expand_takes_a_name_with_glob_characters_literally_when_nothing_matches(
    tmp_path: Path,
) -> None:
    _touch(tmp_path / "part[1].parquet")
    _touch(tmp_path / "run[a]" / "x.parquet")
    _touch(tmp_path / "b1.parquet")
    _touch(tmp_path / "b[1].parquet")
    assert expand(str(tmp_path / "part[1].parquet")) == [str(tmp_path / "part[1].parquet")]
    assert expand(str(tmp_path / "run[a]")) == [str(tmp_path / "run[a]" / "x.parquet")]
    # a pattern that matches is a pattern, as in a shell
    assert expand(str(tmp_path / "b[1].parquet")) == [str(tmp_path / "b1.parquet")]
    with pytest.raises(EmptyDatasetError, match="no data files matched"):
        expand(str(tmp_path / "part[2].parquet"))


def test_expand_glob_matching_only_hidden_files_is_empty(tmp_path: Path) -> None:
    _touch(tmp_path / "_tmp.abc.part.parquet")
    _touch(tmp_path / ".part.parquet")
    with pytest.raises(EmptyDatasetError, match="no data files matched"):
        expand(str(tmp_path / "*part.parquet"))


def test_expand_missing_path_and_no_paths(tmp_path: Path) -> None:
    missing = str(tmp_path / "does" / "not" / "exist.jsonl")
    with pytest.raises(EmptyDatasetError, match=f"no such file or directory: {missing}"):
        expand(missing)
    with pytest.raises(EmptyDatasetError, match="no paths given"):
        expand([])


@pytest.mark.parametrize("key", ["client_kwargs", "config_kwargs", "s3_additional_kwargs"])
def test_a_mapping_option_given_as_text_is_a_config_error(key: str) -> None:
    with pytest.raises(ConfigError, match=f"storage option '{key}' must be a dict.*s3://b/x"):
        expand("s3://b/x.parquet", **{key: "http://127.0.0.1:1"})


def test_join_and_resolve() -> None:
    assert join("/data/x", "a", "b.parquet") == os.path.join("/data/x", "a", "b.parquet")
    assert join("s3://bucket/pre/", "/a/", "b.parquet") == "s3://bucket/pre/a/b.parquet"
    fs, path = resolve("memory://bkt/k/v.txt")
    assert "memory" in fs.protocol and path == "/bkt/k/v.txt"
    with pytest.raises(StorageError, match="nosuchproto"):
        resolve("nosuchproto://x/y")


def test_info_and_open_input_local(tmp_path: Path) -> None:
    p = _touch(tmp_path / "f.bin", b"0123456789")
    fi = info(str(p))
    assert fi.size == 10 and fi.fingerprint and fi.path == str(p)
    with open_input(str(p)) as f:
        f.seek(4)
        assert f.read(3) == b"456"
    os.utime(p, (1_000_000, 1_000_000))
    assert info(str(p)).fingerprint != fi.fingerprint
    with pytest.raises(StorageError, match="file not found"):
        info(str(tmp_path / "nope"))
    with pytest.raises(StorageError, match="file not found"):
        open_input(str(tmp_path / "nope"))


def test_open_arrow_input_is_native_for_local_files(tmp_path: Path, mem_root: str) -> None:
    p = _touch(tmp_path / "f.bin", b"0123456789")
    for url in (str(p), p.as_uri()):
        with open_arrow_input(url) as f:
            assert isinstance(f, pa.NativeFile)  # read by Arrow itself, not through Python
            f.seek(4)
            assert f.read(3) == b"456"
    with pytest.raises(StorageError, match="file not found"):
        open_arrow_input(str(tmp_path / "nope"))
    with fsspec.open(f"{mem_root}/g.bin", "wb") as g:
        g.write(b"abc")
    with open_arrow_input(f"{mem_root}/g.bin") as f:  # other filesystems: fsspec's file
        assert not isinstance(f, pa.NativeFile) and f.read() == b"abc"


# --------------------------------------------------------------------------- memory://


@pytest.fixture
def mem_root() -> Iterator[str]:
    root = f"memory://sw-{uuid.uuid4().hex[:10]}"
    yield root
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_memory_urls_expand_read_and_write(mem_root: str) -> None:
    for name in ["b.jsonl", "a.jsonl", "_tmp.x.jsonl", "sub/c.jsonl"]:
        with atomic_write(f"{mem_root}/{name}") as f:
            f.write(b'{"v": "%s"}\n' % name.encode())
    files = expand(f"{mem_root}/*.jsonl")
    assert [f.rsplit("/", 1)[-1] for f in files] == ["a.jsonl", "b.jsonl"]
    assert all(f.startswith("memory://") for f in files)
    assert [f.rsplit("/", 1)[-1] for f in expand(mem_root)] == ["a.jsonl", "b.jsonl", "c.jsonl"]
    with open_input(files[0]) as f:
        assert f.read() == b'{"v": "a.jsonl"}\n'
    fi = info(files[1])
    assert fi.size == len(b'{"v": "b.jsonl"}\n') and fi.fingerprint
    fmt = get_format("jsonl")
    (unit,) = fmt.list_units(files[1], fi.size)
    assert [r for b in fmt.read_unit(unit) for r in b.to_pylist()] == [{"v": "b.jsonl"}]


def test_memory_dataset_and_shard_writer(mem_root: str, tmp_path: Path) -> None:
    writer = get_format("parquet").open_writer(
        f"{mem_root}/out/part", target_shard_bytes=1, row_group_rows=10
    )
    for i in range(3):
        writer.write(pa.record_batch({"i": list(range(i * 10, i * 10 + 10))}))
    written = writer.close()
    assert len(written) >= 3 and sum(w.num_rows for w in written) == 30
    assert [w.path for w in written] == [
        f"{mem_root}/out/part-{n:05d}.parquet" for n in range(len(written))
    ]
    index = index_dataset(
        f"{mem_root}/out/*.parquet", progress=False, cache_dir=str(tmp_path / "cache")
    )
    assert index.num_samples == 30 and len(index.files) == len(written)
    fmt = get_format("parquet")
    ids = [i for u in index.units for b in fmt.read_unit(u) for i in b.column("i").to_pylist()]
    assert ids == list(range(30))
    assert not [p for p in fsspec.filesystem("memory").find(mem_root) if "_tmp." in p]


def test_memory_empty_glob(mem_root: str) -> None:
    with pytest.raises(EmptyDatasetError, match="no data files matched"):
        expand(f"{mem_root}/*.parquet")


# --------------------------------------------------------------------------- retries


class Flaky:
    """Fails with the given errors in turn, then returns ``value``."""

    def __init__(self, errors: list[BaseException], value: Any = "ok") -> None:
        self.errors = list(errors)
        self.value = value
        self.calls = 0

    def __call__(self) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


class SlowDown(Exception):
    """Named like the S3 throttling error; recognised by class name."""


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError("reset"),
        TimeoutError("read"),
        SlowDown("please"),
        OSError("HTTP 503 Service Unavailable"),
        RuntimeError("Connection reset by peer"),
    ],
    ids=["reset", "timeout", "slowdown-class", "503-text", "reset-text"],
)
def test_with_retries_retries_transient_errors_with_growing_backoff(error: BaseException) -> None:
    delays: list[float] = []
    fn = Flaky([error] * 4, value=42)
    assert with_retries(fn, attempts=5, base_delay=0.1, max_delay=100, sleep=delays.append) == 42
    assert fn.calls == 5
    assert len(delays) == 4
    for k, d in enumerate(delays):
        assert 0.05 * 2**k <= d <= 0.1 * 2**k  # base * 2^k with jitter in [0.5, 1]
    assert all(later >= earlier for earlier, later in zip(delays, delays[1:]))
    assert delays[-1] > delays[0] * 3


def test_with_retries_caps_delay_and_gives_up() -> None:
    delays: list[float] = []
    fn = Flaky([ConnectionError(f"fail {i}") for i in range(10)])
    with pytest.raises(ConnectionError, match="fail 5"):
        with_retries(fn, attempts=6, base_delay=1.0, max_delay=3.0, sleep=delays.append)
    assert fn.calls == 6 and len(delays) == 5
    # where a URL is named, a failure that outlived its retries is a StorageError naming it
    with pytest.raises(StorageError, match="cannot reach s3://b/k: ConnectionError: fail") as err:
        with named("s3://b/k"):
            with_retries(Flaky([ConnectionError("fail")] * 2), attempts=2, sleep=lambda s: None)
    assert isinstance(err.value.__cause__, ConnectionError)
    assert max(delays) <= 3.0
    assert all(d >= 1.5 for d in delays[2:])  # capped at 3.0, jitter keeps at least half


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad value"),
        FileNotFoundError("gone"),
        PermissionError("denied"),
        KeyError("k"),
        OSError("disk full"),
    ],
)
def test_with_retries_does_not_retry_other_errors(error: BaseException) -> None:
    delays: list[float] = []
    fn = Flaky([error, error])
    with pytest.raises(type(error)):
        with_retries(fn, attempts=5, sleep=delays.append)
    assert fn.calls == 1 and delays == []


def test_with_retries_custom_predicate_and_validation() -> None:
    delays: list[float] = []
    fn = Flaky([KeyError("a"), KeyError("b")], value="done")
    assert (
        with_retries(fn, retry_on=lambda e: isinstance(e, KeyError), sleep=delays.append) == "done"
    )
    assert fn.calls == 3 and len(delays) == 2
    with pytest.raises(ValueError, match="attempts"):
        with_retries(lambda: 1, attempts=0)
    assert with_retries(lambda: 7, attempts=1) == 7


def test_is_transient_classification() -> None:
    assert is_transient(ConnectionAbortedError())
    assert is_transient(Exception("Request timed out"))
    assert is_transient(Exception("Throttling: rate exceeded"))
    assert not is_transient(
        FileNotFoundError("503 in the name")
    )  # never retried, whatever the text
    assert not is_transient(ValueError("nope"))
    # what s3fs makes of a server's 5xx answers (InternalError, ServiceUnavailable) while it starts
    # again
    assert is_transient(
        OSError(
            getattr(errno, "EREMOTEIO", errno.EIO),
            "We encountered an internal error, please try again.",
        )
    )
    assert is_transient(OSError(errno.EBUSY, "Service Unavailable"))
    assert is_transient(Exception("InternalError: we encountered an internal error"))
    assert not is_transient(OSError(errno.EINVAL, "Invalid argument"))


# --------------------------------------------------------------------------- atomic_write


def test_atomic_write_not_visible_until_committed(tmp_path: Path) -> None:
    final = tmp_path / "out" / "part-0.bin"  # parent directory is created
    with atomic_write(str(final)) as f:
        f.write(b"first half ")
        assert not final.exists()
        temps = os.listdir(final.parent)
        assert len(temps) == 1 and temps[0].startswith("_tmp.") and temps[0].endswith("part-0.bin")
        with pytest.raises(EmptyDatasetError):  # readers listing the directory do not see it
            expand(str(final.parent))
        f.write(b"second half")
    assert final.read_bytes() == b"first half second half"
    assert os.listdir(final.parent) == ["part-0.bin"]


def test_atomic_write_error_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "x.jsonl"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(str(final), "w") as f:
            f.write('{"a": 1}\n' * 1000)
            raise RuntimeError("boom")
    assert not final.exists()
    assert os.listdir(tmp_path) == []


def test_atomic_write_interrupt_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "y.bin"
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(str(final)) as f:
            f.write(b"partial")
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_atomic_write_failure_keeps_previous_version(tmp_path: Path) -> None:
    final = tmp_path / "data.txt"
    final.write_text("old complete content")
    with pytest.raises(ValueError):
        with atomic_write(str(final), "w") as f:
            f.write("new partial")
            raise ValueError("stop")
    assert final.read_text() == "old complete content"
    with atomic_write(str(final), "w") as f:
        f.write("new ")
        assert final.read_text() == "old complete content"  # readers see the old one meanwhile
        f.write("complete content")
    assert final.read_text() == "new complete content"
    assert os.listdir(tmp_path) == ["data.txt"]


def test_atomic_write_large_content_is_complete(tmp_path: Path) -> None:
    final = tmp_path / "big.bin"
    payload = os.urandom(3 * 2**20 + 17)
    with atomic_write(str(final)) as f:
        for i in range(0, len(payload), 65536):
            f.write(payload[i : i + 65536])
    assert final.read_bytes() == payload


def test_atomic_write_commit_failure_is_commit_error(tmp_path: Path) -> None:
    final = tmp_path / "target"
    (final / "inside").mkdir(parents=True)  # a non-empty directory cannot be replaced by a file
    with pytest.raises(CommitError) as err:
        with atomic_write(str(final)) as f:
            f.write(b"data")
    assert str(final) in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["target"]


def test_atomic_write_rejects_read_modes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mode"):
        with atomic_write(str(tmp_path / "r"), "rb"):
            pass
    assert os.listdir(tmp_path) == []


def test_atomic_write_concurrent_writers_each_commit_whole(tmp_path: Path) -> None:
    final = tmp_path / "shared.bin"
    payloads = [bytes([i]) * 200_000 for i in range(8)]

    def write(p: bytes) -> None:
        with atomic_write(str(final)) as f:
            for i in range(0, len(p), 10_000):
                f.write(p[i : i + 10_000])

    threads = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert final.read_bytes() in payloads
    assert os.listdir(tmp_path) == ["shared.bin"]


def test_atomic_write_memory_error_leaves_nothing(mem_root: str) -> None:
    with pytest.raises(RuntimeError):
        with atomic_write(f"{mem_root}/d/x.bin") as f:
            f.write(b"abc")
            raise RuntimeError("no")
    fs = fsspec.filesystem("memory")
    assert not fs.exists(f"{mem_root}/d/x.bin")
    assert not fs.exists(mem_root) or fs.find(mem_root) == []
    with atomic_write(f"{mem_root}/d/x.bin") as f:
        f.write(b"abc")
    assert fs.find(mem_root) == [f"{mem_root.removeprefix('memory:/')}/d/x.bin"]
    assert fs.cat(f"{mem_root}/d/x.bin") == b"abc"


# --------------------------------------------------------------------------- S3 (SeaweedFS)


def _parquet_bytes(ids: list[int], row_group_size: int) -> bytes:
    buf = io.BytesIO()
    table = pa.table({"id": pa.array(ids, pa.int64()), "text": [f"ü-{i}" for i in ids]})
    pq.write_table(table, buf, row_group_size=row_group_size)
    return buf.getvalue()


@pytest.fixture
def s3_env(s3_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Credentials and endpoint also in the environment.

    ``index_dataset`` does not yet hand ``storage_options`` to the format that reads
    the files (index.py ``_index_one``), so dataset tests also provide them the way
    every S3 client finds them by default. ``test_s3_open_dataset_uses_storage_options``
    pins that gap.
    """
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server["secret"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server["endpoint_url"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    yield s3_server
    _forget_s3_clients()


def _forget_s3_clients() -> None:
    """Drop cached s3fs instances, so none made from environment credentials is reused."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.engine
def test_s3_atomic_write_and_expand(s3_server: dict[str, Any], bucket: tuple[str, Any]) -> None:
    name, fs = bucket
    opts = s3_server["storage_options"]
    for i in [3, 1, 2, 10]:
        with atomic_write(f"s3://{name}/ds/part-{i:02d}.jsonl", "w", **opts) as f:
            f.write(json.dumps({"i": i}) + "\n")
    with atomic_write(f"s3://{name}/ds/_SUCCESS", **opts) as f:
        f.write(b"")
    got = expand(f"s3://{name}/ds/*.jsonl", **opts)
    assert got == [f"s3://{name}/ds/part-{i:02d}.jsonl" for i in (1, 2, 3, 10)]
    assert expand(f"s3://{name}/ds", **opts) == got
    assert not [k for k in fs.find(name) if "_tmp." in k]
    fi = info(got[0], **opts)
    assert fi.size == len(b'{"i": 1}\n')
    assert len(fi.fingerprint) == 32 and '"' not in fi.fingerprint  # the object's ETag
    with open_input(got[-1], **opts) as f:
        assert json.loads(f.read()) == {"i": 10}
    with pytest.raises(EmptyDatasetError, match="no data files matched"):
        expand(f"s3://{name}/ds/*.parquet", **opts)
    with atomic_write(f"s3://{name}/odd/part[1].jsonl", "w", **opts) as f:
        f.write(json.dumps({"i": 1}) + "\n")
    assert expand(f"s3://{name}/odd/part[1].jsonl", **opts) == [f"s3://{name}/odd/part[1].jsonl"]


@pytest.mark.engine
def test_s3_atomic_write_error_publishes_nothing(
    s3_server: dict[str, Any], bucket: tuple[str, Any]
) -> None:
    name, fs = bucket
    opts = s3_server["storage_options"]
    with pytest.raises(RuntimeError):
        with atomic_write(f"s3://{name}/out/x.parquet", **opts) as f:
            f.write(b"PAR1 partial")
            raise RuntimeError("fail mid-write")
    assert fs.find(name) == []
    with atomic_write(f"s3://{name}/out/x.parquet", **opts) as f:
        f.write(b"whole")
    assert fs.find(name) == [f"{name}/out/x.parquet"]
    assert fs.cat(f"{name}/out/x.parquet") == b"whole"


@pytest.mark.engine
def test_s3_shard_writer_and_dataset(
    s3_env: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    opts = s3_env["storage_options"]
    # Parquet files with uneven row groups, written through atomic_write
    start = 0
    for i, (n, rg) in enumerate([(250, 100), (7, 3), (120, 120)]):
        with atomic_write(f"s3://{name}/ds/part-{i}.parquet", **opts) as f:
            f.write(_parquet_bytes(list(range(start, start + n)), rg))
        start += n
    # JSONL shards through the format's writer (which commits with atomic_write)
    jfmt = get_format("jsonl", storage_options=opts)
    writer = jfmt.open_writer(f"s3://{name}/js/shard", target_shard_bytes=2000)
    for k in range(0, 300, 30):
        writer.write(pa.record_batch({"id": list(range(k, k + 30)), "t": ["日本"] * 30}))
    jfiles = writer.close()
    assert len(jfiles) >= 3 and all(w.path.startswith(f"s3://{name}/js/shard-") for w in jfiles)

    index = index_dataset(
        f"s3://{name}/ds/*.parquet",
        storage_options=opts,
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    assert [u.num_samples for u in index.units] == [100, 100, 50, 3, 3, 1, 120]
    pfmt = get_format("parquet", storage_options=opts)
    ids = [
        i
        for u in index.units
        for b in pfmt.read_unit(u, schema=index.schema)
        for i in b.column("id").to_pylist()
    ]
    assert ids == list(range(377)) and index.num_samples == len(ids)

    jindex = index_dataset(f"s3://{name}/js", storage_options=opts, progress=False, unit_bytes=700)
    assert jindex.location == f"s3://{name}/js/_shardwise_index.json"  # saved beside the data
    assert fs.exists(f"{name}/js/_shardwise_index.json")
    jfmt_small = get_format("jsonl", storage_options=opts, unit_bytes=700)
    jids = [
        i
        for u in jindex.units
        for b in jfmt_small.read_unit(u, schema=jindex.schema)
        for i in b.column("id").to_pylist()
    ]
    assert jids == list(range(300)) and jindex.num_samples == 300 and jindex.num_units > len(jfiles)


@pytest.mark.engine
def test_s3_index_rebuilt_when_object_changes(
    s3_env: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    opts = s3_env["storage_options"]
    for i in range(3):
        with atomic_write(f"s3://{name}/ds/p{i}.parquet", **opts) as f:
            f.write(_parquet_bytes(list(range(10 * (i + 1))), 5))
    url = f"s3://{name}/ds"
    first = index_dataset(url, storage_options=opts, progress=False)
    assert first.num_samples == 60 and first.location == f"{url}/_shardwise_index.json"
    again = index_dataset(url, storage_options=opts, progress=False)
    assert again.reused_files == 3 and again.units == first.units

    before = info(f"{url}/p1.parquet", **opts).fingerprint
    with atomic_write(f"{url}/p1.parquet", **opts) as f:
        f.write(_parquet_bytes(list(range(7)), 2))
    after = info(f"{url}/p1.parquet", **opts).fingerprint
    assert after != before
    changed = index_dataset(url, storage_options=opts, progress=False)
    assert changed.reused_files == 2
    assert changed.num_samples == 10 + 7 + 30
    assert [u.num_samples for u in changed.units if u.path.endswith("p1.parquet")] == [2, 2, 2, 1]
    assert {f.path: f.fingerprint for f in changed.files}[f"{url}/p1.parquet"] == after


def _external_put(s3: dict[str, Any], bucket: str, key: str, body: bytes) -> None:
    """Write an object through a separate client, as another process would."""
    import botocore.session

    client = botocore.session.get_session().create_client(
        "s3",
        endpoint_url=s3["endpoint_url"],
        aws_access_key_id=s3["key"],
        aws_secret_access_key=s3["secret"],
        region_name="us-east-1",
    )
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body)
    finally:
        client.close()


@pytest.mark.engine
def test_s3_sees_changes_made_by_another_client(
    s3_env: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    """Listings and fingerprints are fresh even when this process cached a listing before."""
    name, _ = bucket
    opts = s3_env["storage_options"]
    for i in range(2):
        with atomic_write(f"s3://{name}/ds/p{i}.jsonl", **opts) as f:
            f.write(b'{"a": 1}\n' * (i + 1))
    pattern = f"s3://{name}/ds/*.jsonl"
    cache = str(tmp_path / "cache")
    assert expand(pattern, **opts) == [f"s3://{name}/ds/p0.jsonl", f"s3://{name}/ds/p1.jsonl"]
    old = info(f"s3://{name}/ds/p1.jsonl", **opts)
    assert (
        index_dataset(pattern, storage_options=opts, cache_dir=cache, progress=False).num_samples
        == 3
    )

    _external_put(s3_env, name, "ds/p1.jsonl", b'{"a": 2}\n' * 10)
    _external_put(s3_env, name, "ds/p2.jsonl", b'{"a": 3}\n' * 4)

    assert expand(pattern, **opts) == [f"s3://{name}/ds/p{i}.jsonl" for i in range(3)]
    new = info(f"s3://{name}/ds/p1.jsonl", **opts)
    assert new.size == 90 and new.fingerprint != old.fingerprint
    with open_input(f"s3://{name}/ds/p1.jsonl", **opts) as f:
        assert f.read() == b'{"a": 2}\n' * 10
    index = index_dataset(pattern, storage_options=opts, cache_dir=cache, progress=False)
    assert index.reused_files == 1
    assert [f.num_samples for f in index.files] == [1, 10, 4]


@pytest.mark.engine
def test_s3_open_dataset_uses_storage_options(
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    _forget_s3_clients()
    name, _ = bucket
    opts = s3_server["storage_options"]
    with atomic_write(f"s3://{name}/ds/p.parquet", **opts) as f:
        f.write(_parquet_bytes(list(range(9)), 4))
    index = index_dataset(
        f"s3://{name}/ds/*.parquet",
        storage_options=opts,
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    assert index.num_samples == 9


@pytest.mark.engine
def test_s3_refusals_fail_fast_naming_the_url(
    s3_server: dict[str, Any], bucket: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    name, fs = bucket
    fs.pipe(f"{name}/d/a.jsonl", b'{"id": 1}\n')
    endpoint = {"client_kwargs": {"endpoint_url": s3_server["endpoint_url"]}}
    good = s3_server["storage_options"]
    for var in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_PROFILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    _forget_s3_clients()
    cases = [
        (f"s3://nobucket-{name}/d/", good, EmptyDatasetError, "no such bucket"),
        (f"s3://{name}/d/missing.jsonl", good, EmptyDatasetError, "no such file"),
        (f"s3://{name}/d/", {**good, "secret": "wrong"}, StorageError, "access denied to"),
        (f"s3://{name}/d/", endpoint, StorageError, "no credentials for"),
    ]
    try:
        for url, options, error, words in cases:
            with pytest.raises(error) as info:
                index_dataset(url, storage_options=options, progress=False, refresh=True)
            assert words in str(info.value) and url.rstrip("/") in str(info.value), info.value
            assert not is_transient(
                info.value.__cause__ or info.value
            )  # refused at once, never retried
    finally:
        _forget_s3_clients()


def test_s3_filesystems_of_a_process_share_one_botocore_session() -> None:
    from shardwise.storage.paths import resolve

    a, _ = resolve(
        "s3://bucket/a.parquet",
        key="k",
        secret="s",
        client_kwargs={"endpoint_url": "http://127.0.0.1:1"},
    )
    b, _ = resolve("s3://other/b.parquet", key="k2", secret="s2")
    assert a is not b and a.session is b.session  # parsed once, inherited by forked workers
    c, _ = resolve("s3://bucket/a.parquet", profile="someone")
    assert c.session is not a.session  # a named profile keeps a session of its own
