"""Plain pyarrow: the loader benchmark's raw scans and the pipeline benchmark's baseline."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.loader_common import BATCH, Consumer, columns, emb_dim, parquet_files, payload

__all__ = [
    "pipeline",
    "raw_scan",
    "raw_scan_256",
    "raw_scan_pages",
    "raw_scan_pass2",
    "raw_scan_threads",
]


def raw_scan(
    data: Path,
    consume: Consumer,
    info: dict[str, Any],
    batch_size: int = 65536,
    use_threads: bool = False,
) -> Callable[[], None]:
    """``ParquetFile.iter_batches`` to numpy on one thread: no shuffle, an upper bound.
    ``use_threads=True`` (pyarrow's default) lets Arrow decode the columns of a batch on
    its own thread pool."""
    import pyarrow.parquet as pq

    info["batch_rows"] = batch_size
    info["use_threads"] = use_threads
    cols, hand = columns(data), _handler(data, consume)

    def go() -> None:
        for f in parquet_files(data):
            for rb in pq.ParquetFile(f).iter_batches(
                batch_size=batch_size, columns=cols, use_threads=use_threads
            ):
                hand(rb)

    return go


def _handler(data: Path, consume: Consumer) -> Callable[[Any], None]:
    """What a raw scan does with each record batch: its columns as numpy (``emb`` zero-copy
    as a matrix; text, token lists and image bytes as the loader's numpy batches give them,
    arrays of objects), handed to ``consume``."""
    dim, more = emb_dim(data), payload(data)

    def hand(rb: Any) -> None:
        mat = None
        if dim:
            emb = rb.column("emb")
            # flatten(), not .values: a batch cut from a larger unit is a slice of its lists
            mat = emb.flatten().to_numpy().reshape(len(emb), dim)  # no nulls: zero-copy
        rb.column("id").to_numpy()
        consume(
            rb.column("label").to_numpy(),
            mat,
            rb.column(more).to_numpy(zero_copy_only=False) if more else None,
        )

    return hand


def raw_scan_pages(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The raw scan on one thread, each row group read by shardwise's Parquet reader
    (as the loader reads a unit: the ``emb`` fixed-size lists decoded from their pages,
    the other columns by Arrow), then cut into batches of 65,536 rows: shows how much of
    the loader's rate comes from that decoder rather than from the loader."""
    from shardwise.formats import get_format

    info["batch_rows"] = 65536
    cols, hand = columns(data), _handler(data, consume)
    fmt = get_format("parquet")
    decode: list[float] = []

    def go() -> None:
        for f in parquet_files(data):
            for unit in fmt.list_units(f, Path(f).stat().st_size):
                t0 = time.perf_counter()
                table = fmt.read_table(unit, columns=cols, use_threads=False)
                decode.append(time.perf_counter() - t0)
                assert table is not None
                for rb in table.to_batches(max_chunksize=65536):
                    hand(rb)
        # one unit's decode time: what the loader's time to first batch is judged against
        # (and the first unit's, in the scan's own fresh process: its memory all new)
        info["unit_decode_s"] = {
            "median": sorted(decode)[len(decode) // 2],
            "max": max(decode),
            "first": decode[0],
        }

    return go


def raw_scan_threads(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The raw scan with Arrow's thread pool decoding the columns (pyarrow's default)."""
    return raw_scan(data, consume, info, use_threads=True)


def raw_scan_pass2(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The raw scan's second pass: the first runs untimed in the same process."""
    raw_scan(data, lambda *_: None, {})()
    return raw_scan(data, consume, info)


def raw_scan_256(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The raw scan in batches of 256 rows."""
    return raw_scan(data, consume, info, BATCH)


def pipeline(data: Path, out: Path) -> dict[str, Any]:
    """The cleaning chain file by file, first-index dedup with numpy, one output per input."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from adapters.text_chain import (
        clean_text,
        dedup_hashes,
        first_of_each,
        input_files,
        keep_words,
        word_counts,
    )

    info: dict[str, Any] = {"startup_s": 0.0}
    t0 = time.perf_counter()
    tables, hashes = [], []
    for f in input_files(data):
        t = pq.read_table(f)
        text = clean_text(t.column("text"))
        t = t.set_column(t.schema.get_field_index("text"), pa.field("text", text.type), text)
        t = t.filter(keep_words(word_counts(text)))
        tables.append(t)
        hashes.append(dedup_hashes(t.column("text")))
    allh = np.concatenate(hashes)
    keep = np.zeros(len(allh), dtype=bool)
    keep[first_of_each(allh[:, 0], allh[:, 1])] = True
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, t in enumerate(tables):
        m = keep[start : start + t.num_rows]
        start += t.num_rows
        pq.write_table(
            t.filter(pa.array(m)), str(out / f"part-{i:05d}.parquet"), compression="zstd"
        )
    info["wall_s"] = time.perf_counter() - t0
    return info
