"""JSONL record rules: how deep a record may nest (checked before any parser sees it)
and how a field whose values have several JSON types is typed (see ``jsonl.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "MAX_DEPTH",
    "depth_bound",
    "exact_depth",
    "infer_schema",
    "mixed_fields",
    "unify_fields",
]

MAX_DEPTH = 64  # deepest nesting of arrays and objects a record may have
_SHORT = 1 << 12  # bytes up to which the openings are counted first
_DEPTH_CHUNK = 1 << 20  # bytes per pass: three temporaries of this size at most
_MIXED = {b"shardwise.mixed": b"json"}  # field metadata: values of several JSON types
_UNTYPED = {b"shardwise.mixed": b"null"}  # field metadata: only nulls seen (a string for now)


def depth_bound(data: bytes) -> int:
    """An upper bound of the nesting depth in ``data`` (brackets inside strings count
    too, so it may overestimate, never underestimate); vectorised over the brackets
    alone: ``b | 0x20`` is ``{`` or ``}`` exactly for the four bracket bytes, and bit 1
    tells an opening from a closing one (a lookup and a running sum per byte cost three
    times Arrow's parse of the block)."""
    if len(data) <= _SHORT and data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return 0  # a short text (one line): counting is cheaper than the arrays
    view = np.frombuffer(data, dtype=np.uint8)
    depth = deepest = openings = 0
    for start in range(0, len(view), _DEPTH_CHUNK):  # bounded memory whatever the block size
        chunk = view[start : start + _DEPTH_CHUNK]
        folded = chunk | np.uint8(0x20)
        at = np.flatnonzero((folded == 0x7B) | (folded == 0x7D))
        if len(at):
            steps = np.where(chunk[at] & np.uint8(2), 1, -1)
            openings += int(np.count_nonzero(steps > 0))
            running = np.cumsum(steps, dtype=np.int32) + depth
            deepest = max(deepest, int(running.max()))
            depth = int(running[-1])
    return deepest if openings > MAX_DEPTH else 0  # too few openings to go deeper than the limit


def exact_depth(raw: bytes) -> int:
    """The nesting depth of one JSON text, ignoring brackets inside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def infer_schema(rows: list[dict[str, Any]]) -> pa.Schema:
    """One Arrow type per field (see the module docstring for mixed types)."""
    names = list(dict.fromkeys(k for row in rows for k in row))
    fields = []
    for name in names:
        t = _value_type([row.get(name) for row in rows])
        if t is None:
            fields.append(pa.field(name, pa.string(), metadata=_MIXED))
            continue
        fields.append(
            pa.field(name, pa.string(), metadata=_UNTYPED)
            if pa.types.is_null(t)
            else pa.field(name, t)
        )
    return pa.schema(fields)


def _value_type(values: list[Any]) -> pa.DataType | None:
    """The one Arrow type of a field's values, None when they have several JSON types.

    Integers beyond int64 are no other JSON type: the field is ``uint64`` when every value
    is a whole number of ``0 .. 2**64 - 1``, else typed from its other values (``int64``
    when there are none), so that a number no Arrow integer holds is a bad record naming
    its file and line, never a column silently turned to text."""
    errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError)
    try:
        return pa.array(values).type
    except errors:
        pass
    if all(v is None or (type(v) is int and 0 <= v < 2**64) for v in values):
        return pa.uint64()
    small = [_in_int64(v) for v in values]
    if small == values:
        return None  # no integer beyond int64: several JSON types
    try:
        t = pa.array(small).type
    except errors:
        return None
    return pa.int64() if pa.types.is_null(t) else t


def _in_int64(value: Any) -> Any:
    """``value`` with integers beyond int64 as nulls (in lists and objects too)."""
    if type(value) is int:
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, list):
        return [_in_int64(v) for v in value]
    if isinstance(value, dict):
        return {k: _in_int64(v) for k, v in value.items()}
    return value


def _mark(f: pa.Field) -> bytes | None:
    return f.metadata.get(b"shardwise.mixed") if f.metadata else None


def mixed_fields(schema: pa.Schema) -> list[str]:
    """Fields that hold values of several JSON types, or whose type is unknown (only
    nulls were seen): their non-string values are stored as JSON text."""
    return [f.name for f in schema if _mark(f) in (b"json", b"null")]


def unify_fields(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The files' schemas as one, by the mixed-type rule: a field mixed in any file, or
    typed differently in two, is mixed; one seen only as nulls takes the others' type."""
    by_name: dict[str, list[pa.Field]] = {}
    for schema in schemas:
        for f in schema:
            by_name.setdefault(f.name, []).append(f)
    return pa.schema([_unify_field(name, fields) for name, fields in by_name.items()])


def _unify_field(name: str, fields: list[pa.Field]) -> pa.Field:
    if any(_mark(f) == b"json" for f in fields):
        return pa.field(name, pa.string(), metadata=_MIXED)
    typed = [f for f in fields if _mark(f) != b"null"]
    if not typed:
        return pa.field(name, pa.string(), metadata=_UNTYPED)
    try:
        one = pa.unify_schemas([pa.schema([f]) for f in typed], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return pa.field(name, pa.string(), metadata=_MIXED)
    return one.field(0)
