"""datasketch: ``MinHash.update_batch`` per document, then ``MinHashLSH`` query-then-insert.

End to end like every row of the dedup benchmark: the timer covers reading the JSONL input
(``json.loads`` per line), the shingles and signatures, the LSH query-then-insert pass, and
writing the kept documents (``id``, ``text``) to one zstd Parquet file with pyarrow, the
format and codec shardwise's ``write_parquet`` writes. Imports (datasketch, pyarrow) are
not timed, as shardwise's row imports shardwise before its timer.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.shingling import read_docs, shingles
from adapters.versions import dist_version

__all__ = ["dedup"]


def _write_kept(out: Path, ids: list[int], texts: list[str], removed: list[int]) -> int:
    """The kept documents, in input order, to ``out/part-0.parquet``; their count."""
    import pyarrow as pa  # imported before the timer starts (by dedup)
    import pyarrow.parquet as pq

    gone = set(removed)
    keep = [k for k, i in enumerate(ids) if i not in gone]
    out.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [ids[k] for k in keep], "text": [texts[k] for k in keep]})
    pq.write_table(table, out / "part-0.parquet", compression="zstd")
    return len(keep)


def dedup(data: str, tmp: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Single process, the way datasketch's docs use it (Python shingling included)."""
    import pyarrow.parquet  # noqa: F401  # imports are not timed (shardwise's row imports before its timer too)
    from datasketch import MinHash, MinHashLSH

    num_perm = cfg["num_perm"]
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    ids, texts = read_docs(Path(data))
    t_sig = time.perf_counter()
    sigs = []
    for t in texts:
        m = MinHash(num_perm=num_perm)
        m.update_batch([s.encode("utf-8") for s in shingles(t, cfg["ngram"])])
        sigs.append(m)
    sig_s = time.perf_counter() - t_sig
    lsh = MinHashLSH(threshold=cfg["threshold"], num_perm=num_perm)
    removed, pairs = [], []
    for i, m in zip(ids, sigs):
        hit = lsh.query(m)
        if hit:
            removed.append(i)
            pairs.append([i, min(hit)])
        else:
            lsh.insert(i, m)
    kept = _write_kept(Path(tmp) / "out", ids, texts, removed)
    seconds = time.perf_counter() - t0
    monitor.stop()
    return {
        "seconds": seconds,
        "sig_seconds": sig_s,
        "sig_procs": 1,
        "removed": sorted(removed),
        "pairs": pairs,
        "peak_rss_mb": monitor.peak_rss_mb,
        "max_procs": monitor.max_procs,
        "cpu_s": monitor.cpu_seconds,
        "summary": {"bands_rows": [lsh.b, lsh.r], "kept": kept},
        "versions": {
            "datasketch": dist_version("datasketch"),
            "numpy": dist_version("numpy"),
            "pyarrow": dist_version("pyarrow"),
        },
    }
