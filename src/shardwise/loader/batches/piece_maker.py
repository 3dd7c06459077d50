"""Pieces of whole batches converted once, then cut into batches: the one conversion of
both paths (the in-process path runs it on pool threads, a DataLoader worker or a
per-sample dataset on one thread).

A piece of windows built as their units arrived is one ``take`` per column
(:meth:`~shardwise.loader.batches.arrival.ArrivalWindow.piece`); a piece of windows of
unit tables is one gather (:func:`~shardwise.loader.batches.gather.gather_columns`).
Its columns are converted once: numbers and fixed-size lists of numbers are the
gathered numpy arrays (:func:`~shardwise.loader.batches.package.package` makes them
the batch format: ``batch["x"]`` of a numpy batch is a slice of the piece's array, and a
torch batch's tensors share the piece's buffers), other columns go through
:func:`~shardwise.loader.batches.convert.column_to_numpy` once per piece, and
variable-length lists under ``pad_to`` are padded per batch. Strings and binary values
stay Arrow in pieces; each batch's become Python objects as the batch is cut (see
:mod:`shardwise.loader.batches.texts`). Arrow batches and per-sample rows are slices of
the piece as one record batch.

A batch that travels (a numpy batch of a DataLoader worker, see ``travel``) keeps
read-only views (it is copied on the way anyway, and arrives writable) and hands over
the Arrow arrays of its string and binary columns, whose buffers then travel as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.convert import (
    Padding,
    column_to_numpy,
    is_ragged,
    pad,
    torch_other,
)
from shardwise.loader.batches.gather import column_to_arrow, fieldless_batch, gather_columns
from shardwise.loader.batches.numpy_column import NumpyColumn
from shardwise.loader.batches.package import package
from shardwise.loader.batches.pieces import Parts, joined
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.rowviews import list_row_views, viewable
from shardwise.loader.batches.texts import batch_objects, is_text, large_text
from shardwise.loader.batches.windows import Window

__all__ = ["Piece", "PieceMaker", "Travel"]

_log = logging.getLogger(__name__)

# a numpy batch and the Arrow arrays of its string columns -> what goes to the trainer
Travel = Callable[[dict[str, Any], dict[str, pa.Array]], Any]


@dataclass
class Piece:
    """Rows of whole batches, converted: batches are cut out of it as views."""

    rows: int
    arrays: dict[str, Any] = field(default_factory=dict)  # numpy arrays or torch tensors
    ragged: dict[str, pa.Array] = field(default_factory=dict)  # padded per batch
    arrow: pa.RecordBatch | None = None


class PieceMaker:
    """Gathers and converts pieces and cuts them into batches.

    Args:
        fmt: the batch format (None: per-sample rows, cut from Arrow pieces).
        size: rows per batch.
        pad_to: padding of variable-length lists of numbers (numpy and torch batches).
        travel: how a numpy batch leaves this process (a DataLoader worker's ring), if at all.
        pin: pin torch batches (CUDA only).
    """

    def __init__(
        self,
        fmt: str | None,
        size: int,
        pad_to: Padding = None,
        travel: Travel | None = None,
        pin: bool = False,
    ) -> None:
        self.fmt, self.size, self.pad_to, self.travel = fmt, size, pad_to, travel
        self.pin = pin and fmt == "torch" and _cuda()
        if pin and not self.pin:
            _log.info(
                "pin_memory=True has no effect here: batches are pinned only as torch "
                "tensors with CUDA available"
            )

    @classmethod
    def of(cls, reading: Reading, travel: Travel | None = None, pin: bool = True) -> PieceMaker:
        """The piece maker of ``reading``'s batches; ``pin`` where ``reading`` asks for it
        (the in-process path: a DataLoader pins in a thread of its own)."""
        return cls(
            reading.batch_format,
            reading.batch_size,
            reading.pad_to,
            travel,
            pin and reading.pin_memory,
        )

    def made(self, parts: Parts) -> Piece:
        """A piece (on a pool thread), its columns of numbers already cut into the
        batches' views (the training thread then only picks them)."""
        piece = self.make_mixed(parts)
        size = self.size
        for k, v in piece.arrays.items():
            if isinstance(v, pa.Array):
                continue  # text: Python objects are made as each batch is cut
            if not isinstance(v, np.ndarray):  # a tensor
                piece.arrays[k] = list(v.split(size))
            elif self.fmt == "numpy":
                piece.arrays[k] = [v[a : a + size] for a in range(0, piece.rows, size)]
            else:
                piece.arrays[k] = [torch_other(v[a : a + size]) for a in range(0, piece.rows, size)]
        return piece

    def make_mixed(self, parts: Parts) -> Piece:
        """A piece from windows built as their units arrived or gathered by pieces (each
        part made apart, then joined)."""
        if all(w.arrival is None for w, _, _ in parts):
            return self.make(parts)
        subs = [self.taken(p) if p[0].arrival is not None else self.make_mixed([p]) for p in parts]
        if len(subs) == 1:
            return subs[0]
        piece = Piece(sum(s.rows for s in subs))
        for name in subs[0].arrays:
            values = [s.arrays[name] for s in subs]
            piece.arrays[name] = (
                _join(values)
                if isinstance(values[0], pa.Array)
                else self._package(np.concatenate([np.asarray(v) for v in values]))
            )
        return piece

    def taken(self, part: tuple[Window, int, int]) -> Piece:
        """A piece of a window built as its units arrived: one take per column."""
        win, lo, hi = part
        assert win.arrival is not None and win.schema is not None
        piece = Piece(hi - lo)
        for f, values in zip(win.schema, win.arrival.piece(lo, hi)):
            piece.arrays[f.name] = values if isinstance(values, pa.Array) else self._package(values)
        return piece

    def make(self, parts: Parts) -> Piece:
        """Gather ``parts`` into one piece and convert its columns once (text stays
        Arrow until a batch is cut)."""
        tables, views, unit_ids, order = joined(parts)
        schema = next(iter(tables.values())).schema
        lists = self._row_views(tables, unit_ids, order, schema)
        gathered = gather_columns(tables, unit_ids, order, views, skip=frozenset(lists))
        columns = [
            lists[i]
            if i in lists
            else c
            if isinstance(c, (np.ndarray, pa.Array))
            else c.combine_chunks()
            for i, c in enumerate(gathered)
        ]
        return self.converted(len(unit_ids), columns, schema)

    def _row_views(
        self,
        tables: dict[int, pa.Table],
        unit_ids: np.ndarray,
        order: np.ndarray,
        schema: pa.Schema,
    ) -> dict[int, np.ndarray]:
        """The piece's unpadded lists of numbers of numpy and torch batches as views of
        their units' values (see :mod:`~shardwise.loader.batches.rowviews`), by column."""
        if self.fmt not in ("numpy", "torch") or self.pad_to is not None:
            return {}
        found = {
            i: list_row_views(tables, unit_ids, order, i)
            for i, f in enumerate(schema)
            if viewable(f.type)
        }
        return {i: v for i, v in found.items() if v is not None}

    def converted(self, rows: int, columns: list[Any], schema: pa.Schema) -> Piece:
        """A piece of ``rows`` rows from its gathered columns (numpy arrays of their own,
        or Arrow arrays), converted once."""
        piece = Piece(rows)
        if self.fmt in (None, "arrow"):
            piece.arrow = _record_batch(rows, columns, schema)
            return piece
        for f, col in zip(schema, columns):
            if isinstance(col, np.ndarray):  # gathered into a buffer of its own: no copy
                piece.arrays[f.name] = self._package(col)
            elif self.pad_to is not None and is_ragged(col.type):
                piece.ragged[f.name] = col
            elif is_text(col.type) or self._objects_later(col.type):
                piece.arrays[f.name] = col
            else:  # a travelling numpy batch is copied on its way: read-only views will do
                values = column_to_numpy(col)
                ring = self.travel is not None and self.fmt == "numpy"
                writable = values if ring else np.require(values, requirements="W")
                piece.arrays[f.name] = self._package(writable)
        return piece

    def _objects_later(self, t: pa.DataType) -> bool:
        """Whether a column of type ``t`` stays Arrow until each batch is cut, as text does:
        structs of numpy batches in this process (images as ``{bytes, path}``). Converted
        for the whole piece at once, a piece of images made every batch's Python objects
        (and ``to_numpy`` first imported pandas) before the first batch: 116 ms on the
        image benchmark's data as structs."""
        return self.fmt == "numpy" and self.travel is None and pa.types.is_struct(t)

    def table_batches(self, table: pa.Table) -> Iterator[tuple[Any, int]]:
        """The whole batches of ``table`` (rows in order), through the same conversion."""
        rb = table.slice(0, table.num_rows - table.num_rows % self.size).combine_chunks()
        piece = self.converted(rb.num_rows, [c.combine_chunks() for c in rb.columns], rb.schema)
        return self.batches(piece)

    def _package(self, arr: np.ndarray) -> Any:
        """A column of the piece in the batch format (see
        :func:`~shardwise.loader.batches.package.package`)."""
        return package(arr, self.fmt or "numpy", self.pin)

    def batches(self, piece: Piece) -> Iterator[tuple[Any, int]]:
        """The piece's batches, as views of its columns, each with its size."""
        size = self.size
        for a in range(0, piece.rows, size):
            if piece.arrow is not None:
                yield piece.arrow.slice(a, size), size
                continue
            i = a // size
            out = {
                k: v[i] if type(v) is list else self._objects(v, a, size)
                for k, v in piece.arrays.items()
            }
            for name, col in piece.ragged.items():
                values, lengths = pad(col.slice(a, size), self.pad_to)
                out[name], out[f"{name}_lengths"] = self._package(values), self._package(lengths)
            yield (out if self.travel is None else self.travel(out, _strings(piece, a, size))), size

    def _objects(self, values: pa.Array, a: int, size: int) -> np.ndarray:
        """Rows ``a`` to ``a + size`` of a piece's text, as Python objects made now."""
        objects = batch_objects(values.slice(a, size))
        return objects.view(NumpyColumn) if self.fmt == "numpy" else objects


def _strings(piece: Piece, a: int, size: int) -> dict[str, pa.Array]:
    """Rows ``a`` to ``a + size`` of the piece's string and binary columns, whose Arrow
    buffers can travel as they are."""
    return {n: col.slice(a, size) for n, col in piece.arrays.items() if isinstance(col, pa.Array)}


def _record_batch(rows: int, columns: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """Gathered columns as one Arrow record batch of ``rows`` rows (with no columns too:
    records without fields, such as JSON lines ``{}``, are rows all the same)."""
    if not len(schema):
        return fieldless_batch(rows, schema)
    arrays = [
        column_to_arrow(c, f.type) if isinstance(c, np.ndarray) else c
        for c, f in zip(columns, schema)
    ]
    return pa.Table.from_arrays(arrays, schema=schema).combine_chunks().to_batches()[0]


def _join(values: list[pa.Array]) -> pa.Array:
    """Text of consecutive parts as one array (of large offsets where the parts' differ)."""
    if len(values) == 1:
        return values[0]
    if any(v.type != values[0].type for v in values):
        values = [v.cast(large_text(v.type)) for v in values]
    return pa.concat_arrays(values)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
