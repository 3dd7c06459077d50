"""A window's units, and the windows the in-process path gathers by pieces.

Windows of numpy and torch batches whose columns are numbers, fixed-size lists of
numbers, strings or binary are built as their units arrive (see
:mod:`shardwise.loader.arrival`). The others (Arrow batches, variable-length lists, a
unit with nulls in a column of numbers) keep their units' tables, and each piece is
gathered from them (see :mod:`shardwise.loader.gather`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from shardwise.loader.arrival import ArrivalWindow
from shardwise.loader.gather import Views

__all__ = ["Window", "load_window"]


@dataclass
class Window:
    """A window's order, and either its unit tables and views (gathered by pieces) or
    its columns built as its units arrived."""

    unit_ids: np.ndarray
    rows: np.ndarray
    tables: dict[int, pa.Table] = field(default_factory=dict)
    views: Views = field(default_factory=dict)
    schema: pa.Schema | None = None
    arrival: ArrivalWindow | None = None


def load_window(window: tuple[list[int], np.ndarray, np.ndarray], units: Iterator[tuple[pa.Table, Views]]) -> Window:
    """The window's units (tables and views), taken from ``units`` (read ahead)."""
    unit_list, unit_ids, rows = window
    win = Window(unit_ids, rows)
    for u in unit_list:
        table, views = next(units)
        win.schema = table.schema
        win.tables[u] = table
        win.views.update(views)
    return win
