"""Data-Juicer: ``DocumentMinhashDeduplicator`` on a ``NestedDataset`` (compute_hash, process)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.shingling import read_docs
from adapters.versions import dist_version

__all__ = ["dedup"]


def dedup(data: str, tmp: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The two steps of its ``Deduplicator.run``; loading the JSONL is not timed."""
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.deduplicator.document_minhash_deduplicator import (
        DocumentMinhashDeduplicator,
    )

    ids, texts = read_docs(Path(data))
    ds = NestedDataset(Dataset.from_dict({"id": ids, "text": texts}))
    op = DocumentMinhashDeduplicator(tokenization="space", window_size=cfg["ngram"], lowercase=True,
                                     ignore_pattern=r"\p{P}", num_permutations=cfg["num_perm"],
                                     jaccard_threshold=cfg["threshold"], num_proc=cfg["workers"])
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    hashed = ds.map(op.compute_hash, num_proc=cfg["workers"], desc="compute_hash")
    sig_s = time.perf_counter() - t0
    out, _ = op.process(hashed)
    kept = set(out["id"])
    seconds = time.perf_counter() - t0
    monitor.stop()
    return {"seconds": seconds, "sig_seconds": sig_s, "sig_procs": cfg["workers"],
            "removed": sorted(set(ids) - kept), "pairs": [], "peak_rss_mb": monitor.peak_rss_mb,
            "max_procs": monitor.max_procs, "cpu_s": monitor.cpu_seconds,
            "summary": {"bands_rows": [op.num_bands, op.num_rows_per_band]},
            "versions": {"py-data-juicer": dist_version("py-data-juicer"), "datasets": dist_version("datasets"),
                         "numpy": dist_version("numpy")}}
