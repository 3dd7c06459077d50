"""JSONL record rules: how deep a record may nest (checked before any parser sees it)
and how a field whose values have several JSON types is typed (see ``jsonl.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["MAX_DEPTH", "depth_bound", "exact_depth", "infer_schema", "mixed_fields"]

MAX_DEPTH = 64  # deepest nesting of arrays and objects a record may have
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1
_DEPTH_CHUNK = 1 << 18
_MIXED = {b"shardwise.mixed": b"json"}  # field metadata: values of several JSON types


def depth_bound(data: bytes) -> int:
    """An upper bound of the nesting depth in ``data`` (brackets inside strings count
    too, so it may overestimate, never underestimate); vectorised."""
    if data.count(b"[") + data.count(b"{") <= MAX_DEPTH:
        return 0  # too few openings to go deeper than the limit
    view = np.frombuffer(data, dtype=np.uint8)
    depth = deepest = 0
    for start in range(0, len(view), _DEPTH_CHUNK):  # bounded memory whatever the block size
        running = np.cumsum(_OPEN[view[start : start + _DEPTH_CHUNK]], dtype=np.int32) + depth
        deepest = max(deepest, int(running.max()))
        depth = int(running[-1])
    return deepest


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
        values = [row.get(name) for row in rows]
        try:
            t = pa.array(values).type
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            fields.append(pa.field(name, pa.string(), metadata=_MIXED))
            continue
        fields.append(pa.field(name, pa.string() if pa.types.is_null(t) else t))
    return pa.schema(fields)


def mixed_fields(schema: pa.Schema) -> list[str]:
    return [f.name for f in schema if f.metadata and f.metadata.get(b"shardwise.mixed") == b"json"]
