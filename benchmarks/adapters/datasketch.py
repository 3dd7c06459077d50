"""datasketch: ``MinHash.update_batch`` per document, then ``MinHashLSH`` query-then-insert."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.shingling import read_docs, shingles
from adapters.versions import dist_version

__all__ = ["dedup"]


def dedup(data: str, tmp: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Single process, the way datasketch's docs use it (Python shingling included)."""
    from datasketch import MinHash, MinHashLSH

    ids, texts = read_docs(Path(data))
    num_perm = cfg["num_perm"]
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    sigs = []
    for t in texts:
        m = MinHash(num_perm=num_perm)
        m.update_batch([s.encode("utf-8") for s in shingles(t, cfg["ngram"])])
        sigs.append(m)
    sig_s = time.perf_counter() - t0
    lsh = MinHashLSH(threshold=cfg["threshold"], num_perm=num_perm)
    removed, pairs = [], []
    for i, m in zip(ids, sigs):
        hit = lsh.query(m)
        if hit:
            removed.append(i)
            pairs.append([i, min(hit)])
        else:
            lsh.insert(i, m)
    seconds = time.perf_counter() - t0
    monitor.stop()
    return {"seconds": seconds, "sig_seconds": sig_s, "sig_procs": 1, "removed": sorted(removed),
            "pairs": pairs, "peak_rss_mb": monitor.peak_rss_mb, "max_procs": monitor.max_procs,
            "cpu_s": monitor.cpu_seconds, "summary": {"bands_rows": [lsh.b, lsh.r]},
            "versions": {"datasketch": dist_version("datasketch"), "numpy": dist_version("numpy")}}
