#!/usr/bin/env python
"""What the footer check costs where a dataset is indexed, against what pyarrow spends there.

Every Parquet file an index reads has its footer walked once
(``shardwise.formats.parquet._footcheck``: what would abort pyarrow's metadata accessors is
refused by name). This prints, for footers of three shapes written by ``pq.write_table``,
the median over rounds of the check and of pyarrow's open plus the per-chunk sizes an index
reads, alternated in one process, and their ratio::

    PYTHONPATH=src .venv/bin/python benchmarks/footer_check_cost.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time


def _footer(groups: int, columns: int, rows: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({f"c{i}": pa.array(range(rows * groups)) for i in range(columns)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=rows)
    return bytes(sink.getvalue().to_pybytes())


def _timed(fn: object, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) / n


def main() -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardwise.formats.parquet._footcheck import check_footer
    from shardwise.formats.parquet._footer import footer_bytes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print("| footer | bytes | check ms | pyarrow ms | check / pyarrow |")
    print("|---|---:|---:|---:|---:|")
    for groups, columns in ((1, 3), (10, 10), (100, 50)):
        raw = _footer(groups, columns, 100)
        tail = footer_bytes(raw)
        n = max(3, 2000 // (groups * columns))

        def check(tail: memoryview = tail) -> None:
            check_footer(tail, "x")

        def arrow(raw: bytes = raw) -> None:
            md = pq.ParquetFile(pa.BufferReader(raw)).metadata
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))

        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(_timed(check, n))
            theirs.append(_timed(arrow, n))
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        shape = f"{groups} row groups x {columns} columns"
        print(f"| {shape} | {len(tail):,} | {a:.3f} | {b:.3f} | {a / b:.1f} |")


if __name__ == "__main__":
    main()
