"""Record batches of a plain tar built straight from member bytes.

For each batch the headers of ``batch_rows`` samples are walked first (see
:mod:`._plainwalk`), then every projected member is read once, in file order, into its
column's data buffer (one copy, from the file to the array), and each column is
made with ``pa.Array.from_buffers`` from its validity bitmap (a sample without the field is
null), offsets and data. No Python ``bytes`` per value, no ``from_pylist``. A local file's
members are read by ``os.preadv``, a run of close members per call (:mod:`._positional`),
into memory used again once the batch before is freed (:mod:`._buffers`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO

import numpy as np
import pyarrow as pa

from shardwise.errors import FormatError
from shardwise.formats.webdataset._buffers import POOL
from shardwise.formats.webdataset._plainwalk import PlainSample, usable, walk
from shardwise.formats.webdataset._positional import Positional

__all__ = ["buildable", "plain_batches"]

_OFFSETS = {
    pa.binary(): np.int32,
    pa.string(): np.int32,
    pa.large_binary(): np.int64,
    pa.large_string(): np.int64,
}
_TOO_BIG = np.iinfo(np.int32).max


def buildable(schema: pa.Schema) -> bool:
    """Every column (``__key__`` first, a string; the rest binary) can be built from bytes."""
    types = schema.types
    return (
        usable()
        and bool(types)
        and (pa.types.is_string(types[0]) or pa.types.is_large_string(types[0]))
        and all(pa.types.is_binary(t) or pa.types.is_large_binary(t) for t in types[1:])
    )


def plain_batches(
    path: str, f: IO[bytes], schema: pa.Schema, batch_rows: int
) -> Iterator[pa.RecordBatch | None]:
    """The shard's batches; ``None`` (and no more) where the fast walk gives up: the caller
    reads on with the tarfile-based walk, past the rows already yielded (always whole
    batches, so later batches keep their boundaries)."""
    src = Positional(f, f.seek(0, 2))
    samples: list[PlainSample] = []
    for sample in walk(src, src.size):
        if sample is None:
            yield None
            return
        samples.append(sample)
        if len(samples) >= batch_rows:
            batch = build(path, src, samples, schema)
            yield batch
            if batch is None:
                return
            samples = []
    if samples:
        yield build(path, src, samples, schema)


def build(
    path: str, f: IO[bytes] | Positional, samples: Sequence[PlainSample], schema: pa.Schema
) -> pa.RecordBatch | None:
    """One batch of ``samples``: ``__key__`` and every other column of ``schema`` read from
    ``f`` (the members of a field the schema does not name are not read); None when a
    column would not fit its offsets (over 2 GiB in a ``binary`` column)."""
    keys = [s.key.encode("utf-8") for s in samples]
    names = schema.names[1:]
    sizes = np.zeros((len(names), len(samples)), np.int64)
    present = np.zeros((len(names), len(samples)), np.bool_)
    col = {name: i for i, name in enumerate(names)}
    for j, s in enumerate(samples):
        for ext, (_, size, _) in s.fields.items():
            i = col.get(ext)
            if i is not None:
                sizes[i, j], present[i, j] = size, True
    totals = [int(row.sum()) for row in sizes] + [sum(len(k) for k in keys)]
    types = [*schema.types[1:], schema.types[0]]  # in the order of totals
    if any(_OFFSETS[t] is np.int32 and n > _TOO_BIG for t, n in zip(types, totals)):
        return None
    starts = np.zeros_like(sizes)
    np.cumsum(sizes[:, :-1], axis=1, out=starts[:, 1:])
    datas = [POOL.take(n) for n in totals[:-1]]
    src = f if isinstance(f, Positional) else Positional(f, f.seek(0, 2))
    _fill(path, src, samples, col, starts, datas)
    key_data = np.frombuffer(b"".join(keys), np.uint8)
    arrays = [_array(schema.types[0], [len(k) for k in keys], key_data)]
    arrays += [_array(t, sizes[i], datas[i], present[i]) for i, t in enumerate(schema.types[1:])]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _fill(
    path: str,
    src: Positional,
    samples: Sequence[PlainSample],
    col: dict[str, int],
    starts: np.ndarray,
    datas: list[np.ndarray],
) -> None:
    """Read every wanted member into its place, in file order (runs of close members in
    one read: see :mod:`._positional`)."""
    views = [d.data for d in datas]  # writable views of the columns' buffers
    members: list[tuple[int, memoryview]] = []
    names: dict[int, str] = {}
    for j, s in enumerate(samples):
        for ext, (offset, size, name) in s.fields.items():
            i = col.get(ext)
            if i is not None and size:
                at = int(starts[i, j])
                members.append((offset, views[i][at : at + size]))
                names[offset] = name
    short = src.read_members(members)
    if short is not None:
        (offset, view), got = short
        raise FormatError(
            f"truncated member data ({got} of {len(view)} bytes)", path, f"member {names[offset]}"
        )


def _array(
    t: pa.DataType,
    sizes: Sequence[int] | np.ndarray,
    data: np.ndarray,
    present: np.ndarray | None = None,
) -> pa.Array:
    """A (large) binary or string array of ``len(sizes)`` values laid end to end in ``data``,
    null where ``present`` is False."""
    n = len(sizes)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    validity, nulls = None, 0
    if present is not None and not present.all():
        nulls = n - int(present.sum())
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
    return pa.Array.from_buffers(
        t, n, [validity, pa.py_buffer(offsets.astype(_OFFSETS[t])), pa.py_buffer(data)], nulls
    )
