"""The public surface is small and deliberate: everything in __all__ exists, and
importing shardwise pulls in no optional heavy package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardwise

EXPECTED = {
    "CommitError",
    "ConfigError",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "PlanError",
    "ShardwiseError",
    "Source",
    "StorageError",
    "TaskError",
    "TokenStream",
    "UnsafeMemberError",
    "UnsupportedError",
    "__version__",
    "index_dataset",
    "open_dataset",
    "DatasetIndex",
    "Pipeline",
    "RunResult",
    "StreamingDataset",
    "parallel_backend",
    "parallel_map",
    "prepare",
    "read_jsonl",
    "read_parquet",
    "read_webdataset",
}


def test_all_is_exactly_the_documented_surface() -> None:
    assert set(shardwise.__all__) == EXPECTED
    for name in shardwise.__all__:
        assert hasattr(shardwise, name), name


def test_dir_lists_the_lazy_public_names() -> None:
    assert set(shardwise.__all__) <= set(dir(shardwise))


def test_import_does_not_load_optional_packages() -> None:
    code = (
        "import sys, shardwise, shardwise.index, shardwise.cli;"
        "heavy = [m for m in ('torch', 'ray', 'pyspark', 'dask', 's3fs', 'distributed') if m in "
        "sys.modules];print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_is_lazy_and_names_load_on_first_use() -> None:
    # a pool worker imports shardwise for one task: the package itself costs the error
    # tree only, and a run without a progress bar never loads tqdm
    code = (
        "import sys, shardwise;"
        "eager = [m for m in ('pyarrow', 'numpy', 'fsspec', 'tqdm', 'shardwise.report', "
        "'shardwise.index', 'shardwise.pipeline.api') if m in sys.modules];"
        "from shardwise.preparing.steps import expand_steps;"  # the subpackage first
        "fn = shardwise.prepare; import shardwise.preparing.api;"
        "print(','.join(eager), callable(shardwise.prepare) and fn is shardwise.prepare,"
        " shardwise.read_jsonl.__name__, shardwise.DatasetIndex.__name__,"
        " shardwise.parallel_map(abs, [-1, -2], backend='sequential', progress=False),"
        " 'tqdm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "read_jsonl", "DatasetIndex", "[1,", "2]", "False"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = shardwise.nope


def test_errors_share_one_base() -> None:
    for name in shardwise.__all__:
        obj = getattr(shardwise, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, shardwise.ShardwiseError)


def test_streaming_dataset_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None;"
        "import shardwise; cls = shardwise.StreamingDataset;"
        "print([c.__name__ for c in cls.__mro__])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "IterableDataset" not in out.stdout and "StreamingDatasetBase" in out.stdout


def test_missing_extra_names_the_pip_line() -> None:
    code = (
        "import sys; sys.modules['ray'] = None;"
        "from shardwise.parallel import parallel_map;"
        "parallel_map(abs, [1], backend='ray')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert 'pip install "shardwise[ray]"' in proc.stderr


@pytest.mark.parametrize(
    ("call", "caller", "near"),
    [
        (lambda p: shardwise.StreamingDataset(p, shufle=False), "StreamingDataset", "shuffle"),
        (
            lambda p: shardwise.StreamingDataset(p, storage_option={}),
            "StreamingDataset",
            "storage_options",
        ),
        (lambda p: shardwise.open_dataset(p, unit_byts=3), "open_dataset", "unit_bytes"),
        (lambda p: shardwise.open_dataset(p, cache_di="x"), "open_dataset", "cache_dir"),
        (lambda p: shardwise.index_dataset(p, unit_byts=3), "index_dataset", "unit_bytes"),
        (lambda p: shardwise.read_parquet(p, colums=["id"]), "read_parquet", "columns"),
        (lambda p: shardwise.read_jsonl(p, task_byte=5), "read_jsonl", "task_bytes"),
    ],
)
def test_keyword_typos_name_the_public_call_and_the_nearest_argument(
    tmp_path: Path, call: Any, caller: str, near: str
) -> None:
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "t.parquet")
    with pytest.raises(shardwise.ConfigError) as info:
        call(str(tmp_path / "t.parquet"))
    assert str(info.value).startswith(f"{caller}() got an unexpected keyword argument")
    assert f"did you mean {near!r}" in str(info.value)


def test_bad_rank_is_a_config_error(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "t.parquet")
    with pytest.raises(shardwise.ConfigError, match="rank=5, world_size=2"):
        list(shardwise.StreamingDataset(str(tmp_path / "t.parquet"), rank=5, world_size=2))


@pytest.mark.parametrize(
    ("kw", "near"),
    [
        ("chunk_size", "chunksize"),
        ("n_job", "num_proc"),
        ("n_jobs", "num_proc"),
        ("max_retry", "max_retries"),
    ],
)
def test_parallel_map_keyword_typos_are_named(kw: str, near: str) -> None:
    with pytest.raises(shardwise.ConfigError) as info:
        shardwise.parallel_map(abs, [1, 2], progress=False, **{kw: 2})
    assert str(info.value).startswith(f"parallel_map() got an unexpected keyword argument {kw!r}")
    assert f"did you mean {near!r}" in str(info.value)


def test_prepare_is_the_function_and_its_package_has_its_own_name() -> None:
    import shardwise.preparing

    assert callable(shardwise.prepare)
    assert shardwise.prepare is shardwise.preparing.prepare
    assert not isinstance(shardwise.prepare, type(shardwise))


def test_public_return_types_are_what_the_calls_return(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "t.parquet")
    index = shardwise.index_dataset(str(tmp_path / "t.parquet"), progress=False)
    assert isinstance(index, shardwise.DatasetIndex) and index.num_samples == 10
    pipe = shardwise.read_parquet(str(tmp_path / "t.parquet"))
    assert isinstance(pipe, shardwise.Pipeline)
    out = pipe.write_parquet(str(tmp_path / "out"))
    result = out.run(backend="sequential", progress=False, report=False)
    assert isinstance(result, shardwise.RunResult)


def test_open_dataset_is_a_deprecated_alias_that_warns(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": list(range(10))}), tmp_path / "t.parquet")
    path = str(tmp_path / "t.parquet")
    with pytest.warns(DeprecationWarning, match="use shardwise.index_dataset"):
        old = shardwise.open_dataset(path, progress=False)
    new = shardwise.index_dataset(path, progress=False)
    assert isinstance(old, shardwise.DatasetIndex)
    assert old.num_samples == new.num_samples == 10
    assert [f.path for f in old.files] == [f.path for f in new.files]
