"""Reads served from a node cache's pieces: a read the pieces and the remote file cannot
answer is a StorageError naming the URL, through every format's reader."""

from __future__ import annotations

import pyarrow as pa
import pytest

from shardwise.errors import ShardwiseError, StorageError
from shardwise.formats import Unit
from shardwise.formats.jsonl import JsonlFormat
from shardwise.storage.overlay import SparseFile, serving

URL = "s3://bucket/data/part-0.jsonl"
LINES = b"".join(b'{"x": %d}\n' % i for i in range(100))
SCHEMA = pa.schema([("x", pa.int64())])


def _read_jsonl(pieces: list[tuple[int, bytes]], fallback: object) -> list[int]:
    unit = Unit(URL, 0, 100, len(LINES), start=0, end=len(LINES), first_line=1)
    opener = lambda: SparseFile(len(LINES), pieces, fallback, URL)  # type: ignore[arg-type]  # noqa: E731
    with serving(URL, opener):  # type: ignore[arg-type]
        batches = list(JsonlFormat(block_bytes=64).read_unit(unit, schema=SCHEMA))
    return [v for b in batches for v in b.column("x").to_pylist()]


def test_pieces_and_remote_together_give_the_file() -> None:
    half = len(LINES) // 2
    assert _read_jsonl([(0, LINES[:half])], lambda s, e: LINES[s:e]) == list(range(100))


def test_a_remote_file_shorter_than_indexed_is_a_storage_error_naming_it() -> None:
    half = len(LINES) // 2
    with pytest.raises(StorageError) as info:
        _read_jsonl([(0, LINES[:half])], lambda s, e: b"")
    assert isinstance(info.value, ShardwiseError) and info.value.path == URL
    assert URL in str(info.value) and f"byte {half}" in str(info.value)


def test_a_range_outside_the_pieces_without_remote_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="bytes 10-") as info:
        _read_jsonl([(0, LINES[:10])], None)
    assert info.value.path == URL
