"""Tables, writers and readers shared by the format tests (tests/formats/)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import xxhash

from shardwise import index_dataset
from shardwise.formats import Unit, WrittenFile, get_format

# Values chosen to trip encoders: multi-byte UTF-8, escapes, empty strings, nulls.
TEXTS = [
    "héllo wörld",
    "日本語テキスト",
    "emoji 🚀🎉",
    "",
    'quote " back\\slash',
    "tab\tnew\nline",
    None,
]
BATCH_TEXTS = ["plain", "ünïcödé ✓ 漢字", "", 'quote " and \\ backslash', "new\nline", None]


def table(n: int, start: int = 0) -> pa.Table:
    """``n`` rows of id, text, score and flag (nulls in every column but id)."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array([TEXTS[i % len(TEXTS)] for i in ids], pa.string()),
            "score": pa.array([None if i % 5 == 0 else i * 0.5 for i in ids], pa.float64()),
            "flag": pa.array([None if i % 3 == 0 else i % 2 == 0 for i in ids], pa.bool_()),
        }
    )


def batch(n: int, offset: int = 0) -> pa.RecordBatch:
    """``n`` rows of id, text and score, ids from ``offset``."""
    ids = list(range(offset, offset + n))
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array([BATCH_TEXTS[i % len(BATCH_TEXTS)] for i in ids], pa.string()),
            "score": pa.array([i / 4 if i % 7 else None for i in ids], pa.float64()),
        }
    )


def wds_table(n: int, start: int = 0) -> pa.Table:
    """WebDataset samples: a key, binary with NUL and high bytes, text missing on every 3rd."""
    keys = [f"{i:05d}" for i in range(start, start + n)]
    return pa.table(
        {
            "__key__": pa.array(keys, pa.string()),
            # binary with NUL and high bytes; every 4th sample has an empty payload
            "bin": pa.array(
                [bytes([i % 256, 0, 255, 10]) * (i % 4) for i in range(start, start + n)],
                pa.binary(),
            ),
            # unicode text; every 3rd sample lacks it (no member written)
            "txt": pa.array(
                [None if i % 3 == 0 else f"sample {i} ✓ ünï" for i in range(start, start + n)],
                pa.string(),
            ),
        }
    )


def incompressible_table(n: int) -> pa.Table:
    """Hex of distinct hashes: compresses poorly so encoded size tracks the row count."""
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "payload": [
                "".join(xxhash.xxh128(f"{i}-{j}".encode()).hexdigest() for j in range(4))
                for i in range(n)
            ],
        }
    )


def write(
    name: str, prefix: str, data: pa.Table, batch_rows: int, **options: Any
) -> list[WrittenFile]:
    """Write ``data`` through format ``name``'s rolling writer, ``batch_rows`` at a time."""
    writer = get_format(name).open_writer(prefix, **options)
    for b in data.to_batches(max_chunksize=batch_rows):
        writer.write(b)
    return writer.close()


def units(name: str, files: Sequence[str], **fmt_options: Any) -> list[Unit]:
    """The units of ``files`` as format ``name`` lists them."""
    fmt = get_format(name, **fmt_options) if fmt_options else get_format(name)
    return [u for f in files for u in fmt.list_units(f, os.path.getsize(f))]


def read(name: str, files: Sequence[str], **fmt_options: Any) -> pa.Table:
    """Read every unit of ``files`` with a schema unified over all files."""
    fmt = get_format(name, **fmt_options) if fmt_options else get_format(name)
    schema = pa.unify_schemas([fmt.read_schema(f) for f in files], promote_options="permissive")
    batches = []
    for unit in units(name, files, **fmt_options):
        got = list(fmt.read_unit(unit, schema=schema))
        assert sum(b.num_rows for b in got) == unit.num_samples, unit
        batches.extend(got)
    return pa.Table.from_batches(batches, schema=schema)


def read_everything(path: str, **fmt_opts: Any) -> pa.Table:
    """Index ``path`` and read every unit with the index's schema."""
    index = index_dataset(path, progress=False, **fmt_opts)
    fmt = get_format(index.format)
    batches = [b for u in index.units for b in fmt.read_unit(u, schema=index.schema)]
    return (
        pa.Table.from_batches(batches, schema=index.schema)
        if batches
        else index.schema.empty_table()
    )


def check_written(files: list[WrittenFile]) -> None:
    """Each written file's size and checksum are those of its bytes."""
    for wf in files:
        data = Path(wf.path).read_bytes()
        assert wf.num_bytes == len(data)
        assert wf.checksum == xxhash.xxh64(data).hexdigest()
