"""Run in a subprocess by test_memory.py: generate a JSONL file of the given size,
index it and read every unit, then print the peak RSS in MiB as JSON."""

from __future__ import annotations

import json
import os
import resource
import sys


def generate(path: str, size: int) -> int:
    rows = 0
    line_tpl = '{"id": %d, "text": "%s", "score": %d.5, "tags": ["a", "b"]}\n'
    filler = "lorem ipsum dolor sit amet " * 12
    with open(path, "w", buffering=1 << 20) as f:
        written = 0
        block: list[str] = []
        while written < size:
            line = line_tpl % (rows, filler[: 100 + rows % 200], rows % 97)
            block.append(line)
            written += len(line)
            rows += 1
            if len(block) == 4096:
                f.write("".join(block))
                block.clear()
        f.write("".join(block))
    return rows


def main() -> None:
    path, size = sys.argv[1], int(sys.argv[2])
    rows = generate(path, size)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from shardwise import index_dataset
    from shardwise.formats import get_format

    index = index_dataset(path, progress=False)
    fmt = get_format("jsonl")
    read = 0
    ids_sum = 0
    for unit in index.units:
        for batch in fmt.read_unit(unit, schema=index.schema):
            read += batch.num_rows
            ids_sum += int(batch.column("id").to_numpy().sum())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "rows": rows,
                "indexed": index.num_samples,
                "read": read,
                "units": index.num_units,
                "ids_ok": ids_sum == rows * (rows - 1) // 2,
                "bytes": os.path.getsize(path),
                "peak_rss_mib": peak,
                "rss_before_index_mib": base,
            }
        )
    )


if __name__ == "__main__":
    main()
