"""JSONL integers beyond int64: a faithful ``uint64`` column where every value fits it,
else a bad record naming the file and line; never a column silently turned to text (they
were JSON text, as if the field had values of several JSON types)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from shardwise.errors import FormatError
from shardwise.formats import Quarantine
from shardwise.formats.jsonl import JsonlFormat
from shardwise.loader import StreamingDataset


def _write(tmp_path: Path, name: str, values: list[str]) -> str:
    path = tmp_path / name
    path.write_text("".join(f'{{"i": {n}, "a": {v}}}\n' for n, v in enumerate(values)))
    return str(path)


def test_integers_of_uint64_are_a_uint64_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "u.jsonl", ["1", str(2**63), str(2**64 - 1), "null"])
    assert JsonlFormat().read_schema(path).field("a").type == pa.uint64()
    got = list(StreamingDataset(path, shuffle=False, rank=0, world_size=1))
    assert [r["a"] for r in got] == [1, 2**63, 2**64 - 1, None]


@pytest.mark.parametrize(
    ("values", "line"),
    [
        (["1", str(2**64)], 2),  # beyond uint64
        ([str(-(2**63) - 1), "5"], 1),  # below int64
        (["[1, 2]", f"[3, {10**20}]"], 2),  # in a list
        (['{"x": 1}', f'{{"x": {2**70}}}'], 2),  # in an object
    ],
)
def test_an_integer_no_arrow_type_holds_is_a_bad_record(
    tmp_path: Path, values: list[str], line: int
) -> None:
    path = _write(tmp_path, "big.jsonl", values)
    schema = JsonlFormat().read_schema(path)
    assert not pa.types.is_string(schema.field("a").type)
    with pytest.raises(FormatError, match=f"line {line}: .*outside the range of int64") as e:
        list(StreamingDataset(path, shuffle=False, rank=0, world_size=1))
    assert e.value.path == path and "write such numbers as JSON strings" in str(e.value)
    fmt, q = JsonlFormat(), Quarantine()
    (unit,) = fmt.list_units(path, Path(path).stat().st_size)
    kept = [r for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()]
    assert len(kept) == 1 and q.count == 1 and q.examples[0][1] == f"line {line}"


def test_an_integer_beyond_int64_among_floats_is_a_float(tmp_path: Path) -> None:
    """Integers and floats give floats (the rule for any integer), as Arrow's reader does."""
    path = _write(tmp_path, "f.jsonl", ["1.5", str(10**20)])
    got = list(StreamingDataset(path, shuffle=False, rank=0, world_size=1))
    assert [r["a"] for r in got] == [1.5, 1e20]
