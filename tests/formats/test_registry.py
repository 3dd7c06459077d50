"""The format registry and suffix table (formats/__init__.py, formats/base.py)."""

from __future__ import annotations

import pytest

from shardwise.errors import FormatError
from shardwise.formats import detect_format, get_format


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
