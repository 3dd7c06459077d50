"""Pieces of the in-process path: gathered and converted on pool threads, then cut into
batches on the training thread as views of the piece's columns.

A piece of windows built as their units arrived is one ``take`` per column
(:meth:`~shardwise.loader.batches.arrival.ArrivalWindow.piece`); a piece of windows of
unit tables is one gather (:func:`~shardwise.loader.batches.gather.gather_columns`).
``batch["x"]`` of a numpy batch is a slice of the piece's array, and a torch batch's
tensors share the piece's buffers (``torch.from_numpy`` once per piece), so nothing is
copied after the gather. Strings and binary values stay Arrow in pieces; each batch's
become Python objects on the training thread as the batch is cut (see
:mod:`shardwise.loader.batches.texts`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.convert import column_to_numpy, is_ragged, pad, torch_other
from shardwise.loader.batches.gather import column_to_arrow, gather_columns
from shardwise.loader.batches.numpy_column import NumpyColumn
from shardwise.loader.batches.package import package
from shardwise.loader.batches.pieces import Parts, joined
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.texts import batch_objects, is_text, large_text
from shardwise.loader.batches.windows import Window

__all__ = ["Piece", "PieceMaker"]

_log = logging.getLogger(__name__)


@dataclass
class Piece:
    """Rows of whole batches, converted: batches are cut out of it as views."""

    rows: int
    arrays: dict[str, Any] = field(default_factory=dict)  # numpy arrays or torch tensors
    ragged: dict[str, pa.Array] = field(default_factory=dict)  # padded per batch
    arrow: pa.RecordBatch | None = None


class PieceMaker:
    """Gathers and converts pieces (on pool threads) and cuts them into batches."""

    def __init__(self, reading: Reading) -> None:
        self.fmt = reading.batch_format or "numpy"
        self.size = reading.batch_size
        self.pad_to = reading.pad_to
        self.pin = reading.pin_memory and self.fmt == "torch" and _cuda()
        if reading.pin_memory and not self.pin:
            _log.info(
                "pin_memory=True has no effect here: batches are pinned only as torch "
                "tensors with CUDA available"
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
        columns = [
            c if isinstance(c, np.ndarray) else c.combine_chunks()
            for c in gather_columns(tables, unit_ids, order, views)
        ]
        piece = Piece(len(unit_ids))
        if self.fmt == "arrow" or not len(schema):
            piece.arrow = _record_batch(columns, schema)
            return piece
        for f, col in zip(schema, columns):
            if isinstance(col, np.ndarray):  # gathered into a buffer of its own: no copy
                piece.arrays[f.name] = self._package(col)
            elif self.pad_to is not None and is_ragged(col.type):
                piece.ragged[f.name] = col
            elif is_text(col.type):
                piece.arrays[f.name] = col
            else:
                writable = np.require(column_to_numpy(col), requirements="W")
                piece.arrays[f.name] = self._package(writable)
        return piece

    def _package(self, arr: np.ndarray) -> Any:
        """A column of the piece in the batch format (see
        :func:`~shardwise.loader.batches.package.package`)."""
        return package(arr, self.fmt, self.pin)

    def batches(self, piece: Piece) -> Iterator[tuple[Any, int]]:
        """The piece's batches, as views of its columns."""
        size = self.size
        for a in range(0, piece.rows, size):
            if piece.arrow is not None:
                yield (piece.arrow.slice(a, size) if piece.arrow.num_columns else piece.arrow), size
                continue
            i = a // size
            out = {
                k: v[i] if type(v) is list else self._objects(v, a, size)
                for k, v in piece.arrays.items()
            }
            for name, col in piece.ragged.items():
                values, lengths = pad(col.slice(a, size), self.pad_to)
                out[name], out[f"{name}_lengths"] = self._package(values), self._package(lengths)
            yield out, size

    def _objects(self, values: pa.Array, a: int, size: int) -> np.ndarray:
        """Rows ``a`` to ``a + size`` of a piece's text, as Python objects made now."""
        objects = batch_objects(values.slice(a, size))
        return objects.view(NumpyColumn) if self.fmt == "numpy" else objects


def _record_batch(columns: list[Any], schema: pa.Schema) -> pa.RecordBatch:
    """Gathered columns as one Arrow record batch."""
    if not len(schema):
        return pa.record_batch([], schema=schema)
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
