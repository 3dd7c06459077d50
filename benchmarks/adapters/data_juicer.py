"""Data-Juicer: ``DocumentMinhashDeduplicator`` on a ``NestedDataset`` (compute_hash, process).

End to end like every row of the dedup benchmark: the timer covers reading the JSONL input
(``json.loads`` per line into a ``datasets.Dataset``), the two steps of its
``Deduplicator.run`` and writing the kept documents (``id``, ``text``) with
``Dataset.to_parquet`` (Parquet like shardwise's ``write_parquet``, with the ``datasets``
library's own column options: snappy, which it does not let a caller override).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.shingling import read_docs
from adapters.versions import dist_version

__all__ = ["dedup"]


def dedup(data: str, tmp: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Read, ``dataset.map(op.compute_hash, num_proc=2)``, ``op.process``, write."""
    import pyarrow.parquet  # noqa: F401  # imports are not timed (as in every row)
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.deduplicator.document_minhash_deduplicator import (
        DocumentMinhashDeduplicator,
    )

    op = DocumentMinhashDeduplicator(
        tokenization="space",
        window_size=cfg["ngram"],
        lowercase=True,
        ignore_pattern=r"\p{P}",
        num_permutations=cfg["num_perm"],
        jaccard_threshold=cfg["threshold"],
        num_proc=cfg["workers"],
    )
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    ids, texts = read_docs(Path(data))
    ds = NestedDataset(Dataset.from_dict({"id": ids, "text": texts}))
    t_sig = time.perf_counter()
    hashed = ds.map(op.compute_hash, num_proc=cfg["workers"], desc="compute_hash")
    sig_s = time.perf_counter() - t_sig
    out, _ = op.process(hashed)
    (Path(tmp) / "out").mkdir(parents=True, exist_ok=True)
    out.select_columns(["id", "text"]).to_parquet(str(Path(tmp) / "out" / "part-0.parquet"))
    seconds = time.perf_counter() - t0
    monitor.stop()
    kept = set(out["id"])
    return {
        "seconds": seconds,
        "sig_seconds": sig_s,
        "sig_procs": cfg["workers"],
        "removed": sorted(set(ids) - kept),
        "pairs": [],
        "peak_rss_mb": monitor.peak_rss_mb,
        "max_procs": monitor.max_procs,
        "cpu_s": monitor.cpu_seconds,
        "summary": {"bands_rows": [op.num_bands, op.num_rows_per_band], "kept": len(kept)},
        "versions": {
            "py-data-juicer": dist_version("py-data-juicer"),
            "datasets": dist_version("datasets"),
            "numpy": dist_version("numpy"),
        },
    }
