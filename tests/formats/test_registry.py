"""The format registry and suffix table (formats/__init__.py, formats/contract.py)."""

from __future__ import annotations

from pathlib import Path

import _formatdata as fd
import pytest

from shardwise.errors import ConfigError, FormatError
from shardwise.formats import check_on_error, detect_format, get_format, guess_format


def test_registry_names_aliases_and_errors() -> None:
    assert get_format("PQ").name == "parquet"
    assert get_format("ndjson").name == "jsonl"
    assert get_format("tar").name == "webdataset"
    assert get_format("jsonl") is get_format("json")
    assert get_format("jsonl", unit_bytes=10) is not get_format("jsonl")
    with pytest.raises(FormatError, match="known formats: jsonl, parquet, webdataset"):
        get_format("csv")
    assert detect_format("s3://b/x.NDJSON.zst") == "jsonl"
    with pytest.raises(FormatError, match="pass format="):
        detect_format("x.csv")


@pytest.mark.parametrize(
    "path,name",
    [
        ("a.parquet", "parquet"),
        ("a.PQ", "parquet"),
        ("s3://b/x.jsonl", "jsonl"),
        ("x.jsonl.gz", "jsonl"),
        ("x.JSONL.ZST", "jsonl"),
        ("x.json", "jsonl"),
        ("x.json.gz", "jsonl"),
        ("x.json.zst", "jsonl"),
        ("x.ndjson", "jsonl"),
        ("x.ndjson.gz", "jsonl"),
        ("x.ndjson.zst", "jsonl"),
        ("shard-0.tar", "webdataset"),
        ("shard-0.tar.gz", "webdataset"),
        ("shard-0.TGZ", "webdataset"),
        ("x.gz", None),
        ("x.csv", None),
        ("tar", None),
    ],
)
def test_one_suffix_table_names_every_format(path: str, name: str | None) -> None:
    assert guess_format(path) == name
    if name is None:
        with pytest.raises(
            FormatError, match=r"\.ndjson\.zst, \.tar, \.tar\.gz, \.tgz\); pass format="
        ):
            detect_format(path)
    else:
        assert detect_format(path) == name and path.lower().endswith(get_format(name).extensions)


def test_on_error_is_checked_once_at_the_edge() -> None:
    assert check_on_error("skip") == "skip" and check_on_error("raise") == "raise"
    with pytest.raises(ConfigError, match="on_error must be 'raise' or 'skip', got 'ignore'"):
        check_on_error("ignore")
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("name", ["parquet", "jsonl", "webdataset"])
def test_every_format_refuses_an_unknown_column(tmp_path: Path, name: str) -> None:
    data = fd.wds_table(5) if name == "webdataset" else fd.table(5)
    [written] = fd.write(name, str(tmp_path / "x"), data, batch_rows=5)
    fmt = get_format(name)
    [unit] = fd.units(name, [written.path])
    for schema in (None, fmt.read_schema(written.path)):
        with pytest.raises(ConfigError, match=r"unknown columns \['nope'\]; the dataset has \["):
            list(fmt.read_unit(unit, columns=["nope"], schema=schema))
        with pytest.raises(ConfigError, match=r"unknown columns \['nope'\]"):
            fmt.read_table(
                unit, columns=["text" if name != "webdataset" else "txt", "nope"], schema=schema
            )
