"""JSON lines to records: Arrow's parser on clean blocks, one line at a time to name a bad one.

A bad record is malformed JSON, invalid UTF-8, a line that is not a JSON object, a field
not in the schema, a value that does not fit the schema's type, or a record nested deeper
than ``MAX_DEPTH`` levels; each is raised as a :class:`~shardwise.errors.FormatError`
naming the file and line, or quarantined under ``on_error="skip"``.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pj

from shardwise.errors import FormatError
from shardwise.formats.contract import OnError, Quarantine
from shardwise.formats.jsonl._rules import MAX_DEPTH, depth_bound, exact_depth, mixed_fields

__all__ = ["parse_block", "sample_rows"]

_BOM = b"\xef\xbb\xbf"
_SURROGATE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def parse_block(
    block: bytes, schema: pa.Schema, path: str, first_line: int, on_error: OnError, q: Quarantine
) -> pa.Table | None:
    """Fast path with pyarrow.json; per-line fallback to locate bad records."""
    # never hand Arrow's parser deep nesting, nor a line that is not an object: a `null`
    # line crashes it at the start of a block and becomes a row of nulls after an object
    if depth_bound(block) > MAX_DEPTH or not _objects_only(block):
        good, _ = _parse_lines(block, schema, path, first_line, on_error, q)
        return good
    try:
        block.decode("utf-8")
        opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        # one thread: blocks are read by tasks that already run side by side, and handing a
        # block to Arrow's thread pool cost up to 5x the parse in wall time on a busy machine
        read = pj.ReadOptions(block_size=max(len(block), 1 << 16), use_threads=False)
        table = pj.read_json(io.BytesIO(block), parse_options=opts, read_options=read)
        return table.select(schema.names)
    except (UnicodeDecodeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
        good, _ = _parse_lines(block, schema, path, first_line, on_error, q)
        return good


def _objects_only(block: bytes) -> bool:
    """Every line of ``block`` starts with ``{`` or is empty (a BOM may open the block);
    otherwise (also for indented or whitespace-only lines) the lines are parsed one by one."""
    if not block:
        return True
    data = np.frombuffer(block, dtype=np.uint8)
    first = data[np.flatnonzero(data[:-1] == 10) + 1]
    head = block[:1] in (b"{", b"\n") or block.startswith(_BOM + b"{")
    return head and bool(np.all((first == 123) | (first == 10)))


class _BadRecord(Exception):
    """A record that is not one (internal: turned into a FormatError or quarantined)."""


def sample_rows(sample: bytes) -> list[dict[str, Any]]:
    rows = []
    for raw in sample.split(b"\n"):
        if raw.strip(b" \t\r"):
            try:
                rows.append(_decode_line(raw, None))
            except _BadRecord:
                continue  # bad records are found (and named) when the units are read
    return rows


def _parse_lines(
    block: bytes,
    schema: pa.Schema | None,
    path: str,
    first_line: int,
    on_error: OnError,
    q: Quarantine,
) -> tuple[pa.Table | None, int]:
    rows: list[dict[str, Any]] = []
    for offset, raw in enumerate(block.split(b"\n")):
        if not raw.strip(b" \t\r"):
            continue
        where = f"line {first_line + offset}"
        try:
            row = _decode_line(raw, schema)
        except _BadRecord as exc:
            if on_error == "raise":
                raise FormatError(str(exc), path, where) from None
            q.add(path, where, str(exc))
            continue
        rows.append(row)
    if schema is None:
        return (pa.Table.from_pylist(rows) if rows else None), len(rows)
    return pa.Table.from_pylist(rows, schema=schema), len(rows)


def _decode_line(raw: bytes, schema: pa.Schema | None) -> dict[str, Any]:
    if raw.startswith(_BOM):  # as Arrow's parser does: editors put one at the start of a file
        raw = raw[len(_BOM) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRecord(f"invalid UTF-8 at byte {exc.start} of the line") from None
    if depth_bound(raw) > MAX_DEPTH and exact_depth(raw) > MAX_DEPTH:
        raise _BadRecord(f"record nested deeper than {MAX_DEPTH} levels")
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _BadRecord(f"malformed JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise _BadRecord(f"record nested deeper than {MAX_DEPTH} levels") from None
    if not isinstance(row, dict):
        raise _BadRecord(f"expected a JSON object, got {type(row).__name__}")
    if _SURROGATE.search(raw):
        try:  # a lone \\udXXX escape decodes to a str that is not text (cannot be UTF-8)
            json.dumps(row, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _BadRecord(
                "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff)"
            ) from None
    if schema is not None:
        for name in mixed_fields(schema):
            value = row.get(name)
            if value is not None and not isinstance(value, str):
                row[name] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        extra = [k for k in row if k not in schema.names]
        if extra:
            raise _BadRecord(f"field(s) {extra} not in the dataset schema {schema.names}")
        try:
            pa.Table.from_pylist([row], schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise _BadRecord(f"value does not fit the schema: {exc}") from None
    return row
