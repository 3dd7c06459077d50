"""A gathered piece (an Arrow table of whole batches) cut into batches of the batch
format, one thread doing it all: the DataLoader-worker path's conversion.

Columns are converted once per piece and batches are slices of them (the per-batch
cost of converting is most of the cost at ordinary batch sizes); padded columns are
built per batch. A numpy batch that will travel (``travel``, see
:func:`shardwise.loader.workers.transport.ring_batch`) keeps read-only views (it is
copied on the way anyway, and arrives writable) and hands over the Arrow arrays of its
string columns, whose buffers can then travel as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from shardwise.loader.batches.convert import Padding, is_ragged, pad, to_numpy
from shardwise.loader.batches.package import batch_column, package

__all__ = ["Travel", "split"]

# a numpy batch and the Arrow arrays of its string columns -> what goes to the trainer
Travel = Callable[[dict[str, Any], dict[str, pa.Array]], Any]


def split(
    piece: pa.Table, size: int, fmt: str, pad_to: Padding = None, travel: Travel | None = None
) -> Iterator[Any]:
    """The batches of ``size`` rows of ``piece`` in format ``fmt``."""
    n = piece.num_rows // size
    if fmt == "arrow" or not piece.num_columns:
        yield from _arrow_batches(piece, size, n)
        return
    batch = piece.combine_chunks().to_batches()[0]
    padded = [
        name
        for name, col in zip(batch.schema.names, batch.columns)
        if pad_to is not None and is_ragged(col.type)
    ]
    columns = to_numpy(batch.drop_columns(padded), writable=travel is None)
    strings = _strings(batch) if travel is not None else {}
    for i in range(n):
        part = {k: v[i * size : (i + 1) * size] for k, v in columns.items()}
        for name in padded:
            part[name], part[f"{name}_lengths"] = pad(
                batch.column(name).slice(i * size, size), pad_to
            )
        out = {k: batch_column(package(v, fmt), fmt) for k, v in part.items()}
        if travel is None:
            yield out
        else:  # the whole batch travels as one
            yield travel(out, {k: col.slice(i * size, size) for k, col in strings.items()})


def _arrow_batches(piece: pa.Table, size: int, n: int) -> Iterator[pa.RecordBatch]:
    piece = piece.combine_chunks()
    for i in range(n):
        part = piece.slice(i * size, size)
        if piece.num_columns:
            yield part.to_batches()[0]
        else:
            yield pa.record_batch([], schema=piece.schema)


def _strings(batch: pa.RecordBatch) -> dict[str, pa.Array]:
    """The string columns without nulls, whose Arrow buffers can travel as they are."""
    return {
        name: col
        for name, col in zip(batch.schema.names, batch.columns)
        if col.null_count == 0
        and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type))
    }
