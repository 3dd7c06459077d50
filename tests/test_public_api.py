"""The public surface is small and deliberate: everything in __all__ exists, and
importing shardwise pulls in no optional heavy package."""

from __future__ import annotations

import subprocess
import sys

import shardwise

EXPECTED = {
    "CommitError",
    "ConfigError",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "PlanError",
    "ShardwiseError",
    "StorageError",
    "TaskError",
    "UnsafeMemberError",
    "__version__",
    "open_dataset",
    "DatasetIndex",
}


def test_all_is_exactly_the_documented_surface() -> None:
    assert set(shardwise.__all__) == EXPECTED
    for name in shardwise.__all__:
        assert hasattr(shardwise, name), name


def test_import_does_not_load_optional_packages() -> None:
    code = (
        "import sys, shardwise, shardwise.index, shardwise.cli;"
        "heavy = [m for m in ('torch', 'ray', 'pyspark', 'dask', 's3fs', 'distributed') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_errors_share_one_base() -> None:
    for name in shardwise.__all__:
        obj = getattr(shardwise, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, shardwise.ShardwiseError)
