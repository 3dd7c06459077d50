"""Whether a decoded JSON value fits an Arrow type as Arrow's JSON reader takes it.

Lines that Arrow's reader refuses are decoded one by one (:mod:`._records`), and a value
built into the dataset's type by ``pa.Table.from_pylist`` converts more than the reader
does: ``12.5`` or ``12.0`` into an integer column becomes ``12``, ``true`` into a float
column ``1.0``. :func:`misfit` holds those lines to the reader's rules first: integers only
into integer columns, numbers (not booleans) into float columns, booleans only into boolean
columns, strings into string columns, and the same inside lists and structs. Other types
(timestamps, decimals, ...) are left to ``from_pylist``, which refuses what does not fit.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["misfit"]


def misfit(value: Any, t: pa.DataType) -> str | None:
    """Why ``value`` does not fit ``t`` (None: it fits, or ``from_pylist`` decides)."""
    if value is None:
        return None
    if pa.types.is_integer(t):
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and not _lowest(t) <= value < _lowest(t) + 2**t.bit_width:
            return f"{_json(value)} is outside the range of {t}{_beyond(value)}"
    elif pa.types.is_floating(t):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif pa.types.is_boolean(t):
        ok = isinstance(value, bool)
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        ok = isinstance(value, str)
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        if not isinstance(value, list):
            return f"{_json(value)} where a list ({t}) goes"
        return next((m for m in (misfit(v, t.value_type) for v in value) if m), None)
    elif pa.types.is_struct(t):
        if not isinstance(value, dict):
            return f"{_json(value)} where an object ({t}) goes"
        fields = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
        found = (misfit(v, fields[k]) for k, v in value.items() if k in fields)
        return next((m for m in found if m), None)
    else:
        return None
    return None if ok else f"{_json(value)} where a {t} goes"


def _lowest(t: pa.DataType) -> int:
    """The least value of integer type ``t``."""
    return -(2 ** (t.bit_width - 1)) if pa.types.is_signed_integer(t) else 0


def _beyond(value: int) -> str:
    """A hint for an integer no Arrow integer type holds."""
    if -(2**63) <= value < 2**64:
        return ""
    return " (no Arrow integer holds it: write such numbers as JSON strings)"


def _json(value: Any) -> str:
    text = repr(value) if not isinstance(value, bool) else str(value).lower()
    return text if len(text) <= 40 else text[:37] + "..."
