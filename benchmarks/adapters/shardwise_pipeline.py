"""shardwise's cleaning pipeline: read_parquet -> apply x3 -> dedup("exact") -> write_parquet.

The HTML run report (``run(report=True)``, the default) is switched off: drawing its
charts is not part of the work the peers are compared on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from adapters.text_chain import MIN_WORDS

__all__ = ["pipeline"]


def pipeline(data: Path, out: Path, nproc: int) -> dict[str, Any]:
    """On ``get_backend("local", nproc)``; the index beside the input is deleted first, so
    reading the footers is timed too."""
    import shardwise
    from shardwise.parallel import get_backend, parallel_map

    info: dict[str, Any] = {"versions": {"shardwise": shardwise.__version__}}
    t0 = time.perf_counter()
    backend = get_backend("local", nproc)
    parallel_map(abs, list(range(8)), backend=backend, progress=False)  # workers up
    info["startup_s"] = time.perf_counter() - t0
    (data / "input" / "_shardwise_index.json").unlink(missing_ok=True)
    pipe = (
        shardwise.read_parquet(str(data / "input"))
        .apply("normalize_text", column="text", unicode="NFKC", whitespace=True)
        .apply("strip_urls", column="text")
        .apply("word_count_filter", column="text", min=MIN_WORDS)
        .dedup(method="exact", column="text")
        .write_parquet(str(out))
    )
    try:
        t0 = time.perf_counter()
        res = pipe.run(backend=backend, progress=False, report=False)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        backend.close()
    info.update(tasks=res.tasks, reported_rows_out=res.rows_out, dropped=res.dropped)
    return info
