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
from shardwise.formats.jsonl._fits import misfit
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
    objects = _object_lines(block) if depth_bound(block) <= MAX_DEPTH else None
    if objects is not None:
        try:
            block.decode("utf-8")
            opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
            # one thread: blocks are read by tasks that already run side by side, and handing
            # a block to Arrow's thread pool cost up to 5x the parse in wall time when busy
            read = pj.ReadOptions(block_size=max(len(block), 1 << 16), use_threads=False)
            table = pj.read_json(io.BytesIO(block), parse_options=opts, read_options=read)
            # Arrow reads objects separated by any whitespace: a line holding two of them
            # would be two rows where the index counted one record (a bad record instead)
            if table.num_rows == objects:
                return table.select(schema.names)
        except (UnicodeDecodeError, pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    good, _ = _parse_lines(block, schema, path, first_line, on_error, q)
    return good


def _object_lines(block: bytes) -> int | None:
    """How many lines of ``block`` start with ``{``, if every line does or is empty (a BOM
    may open the block); None otherwise (also for indented or whitespace-only lines), and
    the lines are then parsed one by one."""
    if not block:
        return 0
    data = np.frombuffer(block, dtype=np.uint8)
    first = data[np.flatnonzero(data[:-1] == 10) + 1]
    opens = block[:1] == b"{" or block.startswith(_BOM + b"{")
    if not (opens or block[:1] == b"\n") or not np.all((first == 123) | (first == 10)):
        return None
    return int(np.count_nonzero(first == 123)) + int(opens)


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
    row = _json_object(_text_of(raw), raw)
    if schema is not None:
        _fit_schema(row, schema)
    return row


def _text_of(raw: bytes) -> str:
    """The line as text (without a leading BOM), once it is UTF-8 and not nested too deep."""
    if raw.startswith(_BOM):  # as Arrow's parser does: editors put one at the start of a file
        raw = raw[len(_BOM) :]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _BadRecord(f"invalid UTF-8 at byte {exc.start} of the line") from None
    if depth_bound(raw) > MAX_DEPTH and exact_depth(raw) > MAX_DEPTH:
        raise _BadRecord(f"record nested deeper than {MAX_DEPTH} levels")
    return text


def _json_object(text: str, raw: bytes) -> dict[str, Any]:
    """The line's JSON object, whose strings are all text."""
    try:
        row = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise _BadRecord(f"malformed JSON ({what} at column {exc.colno})") from None
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
    return row


def _not_json(name: str) -> Any:
    raise _BadRecord(f"{name} is no JSON value (Arrow's reader refuses it too)")


def _fit_schema(row: dict[str, Any], schema: pa.Schema) -> None:
    """Mixed-type fields turned to JSON text in place, then ``row`` checked against the
    dataset's schema."""
    for name in mixed_fields(schema):
        value = row.get(name)
        if value is not None and not isinstance(value, str):
            row[name] = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    extra = [k for k in row if k not in schema.names]
    if extra:
        raise _BadRecord(f"field(s) {extra} not in the dataset schema {schema.names}")
    for name, value in row.items():
        why = misfit(value, schema.field(name).type)
        if why is not None:
            raise _BadRecord(f"field {name!r}: {why}")
    try:
        pa.Table.from_pylist([row], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise _BadRecord(f"value does not fit the schema: {exc}") from None
