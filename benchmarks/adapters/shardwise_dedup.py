"""shardwise's MinHash dedup: ``read_jsonl().dedup("minhash").write_parquet().run()``.

End to end like every row of the dedup benchmark: the timer covers the whole ``run()``:
starting the local backend's worker processes, reading the JSONL input, the dedup and
writing the kept documents as zstd Parquet (with the run's manifests). Reading the output
back for scoring is not timed.

The HTML run report (``run(report=True)``, the default) is switched off: drawing its
charts is not part of the work the peers are compared on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.versions import dist_version

__all__ = ["dedup"]


def _time_phases(phases: list[tuple[str, float]]) -> None:
    """Record the time of every parallel map and of the dedup decision in ``phases``."""
    from shardwise.dedup.minhash import MinHashDedup
    from shardwise.pipeline.execution import Execution

    def timed(orig: Callable[..., Any], label: Callable[..., str]) -> Callable[..., Any]:
        def run(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = orig(*a, **kw)
            phases.append((label(*a, **kw), time.perf_counter() - t0))
            return out

        return run

    patches: list[tuple[type, str, Callable[..., str]]] = [
        (Execution, "map", lambda self, fn, items, desc: desc),
        (MinHashDedup, "decide", lambda self, ctx: "decide (buckets+edges+components+audit)"),
    ]
    for cls, attr, label in patches:
        setattr(cls, attr, timed(getattr(cls, attr), label))


def _audit_pairs(
    out: Path, summary: dict[str, Any], removed: list[int], n: int
) -> tuple[list[list[int]], str | None]:
    """(removed id, kept id) pairs from the audit table: tasks are contiguous in input
    order and input order is id order."""
    import numpy as np
    import pyarrow.parquet as pq

    rows_per_task = [
        json.loads(p.read_text())["rows_in"]
        for p in sorted((out / "_manifests").glob("task-*.json"))
    ]
    if sum(rows_per_task) != n:
        return [], "task manifests do not add up; pairs not used"
    start = np.concatenate([[0], np.cumsum(rows_per_task)])
    a = pq.read_table(summary["audit"]).to_pydict()
    rem = [int(start[t] + i) for t, i in zip(a["removed_task"], a["removed_row"])]
    kep = [int(start[t] + i) for t, i in zip(a["kept_task"], a["kept_row"])]
    if sorted(rem) != removed:
        return [], "audit ids did not match the output; pairs not used"
    return [[x, y] for x, y in zip(rem, kep)], None


def dedup(
    data: str, tmp: str, cfg: dict[str, Any], verify: bool = True, **options: Any
) -> dict[str, Any]:
    """The local backend with ``cfg["workers"]`` processes; tasks as the pipeline sizes them."""
    import pyarrow.parquet as pq

    import shardwise
    from shardwise.pipeline import read_jsonl

    phases: list[tuple[str, float]] = []
    _time_phases(phases)
    docs = Path(data) / "docs"
    out = Path(tmp) / "out"
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    r = (
        read_jsonl(str(docs))  # default task sizing (by the dedup's work)
        .dedup(
            "minhash",
            column="text",
            ngram=cfg["ngram"],
            num_perm=cfg["num_perm"],
            threshold=cfg["threshold"],
            verify=verify,
            **options,
        )
        .write_parquet(str(out))
        .run(backend="local", num_proc=cfg["workers"], progress=False, report=False)
    )
    seconds = time.perf_counter() - t0
    monitor.stop()
    kept = set(pq.read_table(str(out), columns=["id"]).column("id").to_pylist())
    removed = sorted(set(range(r.rows_in)) - kept)
    summary = next(iter(json.loads(Path(r.manifest).read_text())["dedup"].values()))
    pairs, note = _audit_pairs(out, summary, removed, r.rows_in)
    sig_s = next((s for d, s in phases if d.startswith("stage 1")), None)
    return {
        "seconds": seconds,
        "sig_seconds": sig_s,
        "sig_procs": cfg["workers"],
        "removed": removed,
        "pairs": pairs,
        "peak_rss_mb": monitor.peak_rss_mb,
        "max_procs": monitor.max_procs,
        "cpu_s": monitor.cpu_seconds,
        "phases": phases,
        "tasks": r.tasks,
        "summary": {k: v for k, v in summary.items() if k != "audit"},
        "note": note,
        "versions": {
            "shardwise": shardwise.__version__,
            "numpy": dist_version("numpy"),
            "pyarrow": dist_version("pyarrow"),
        },
    }


def scale(data: str, tmp: str, cfg: dict[str, Any], memory_budget: int) -> dict[str, Any]:
    """The scale row: ``read_parquet().dedup("minhash", verify=True)`` with default task
    sizing and ``memory_budget`` per process; docs/s, peak RSS of the tree, time per stage."""
    import shardwise
    from shardwise.pipeline import read_parquet

    phases: list[tuple[str, float]] = []
    _time_phases(phases)
    out = Path(tmp) / "out"
    monitor = TreeMonitor(interval=0.25).start()
    t0 = time.perf_counter()
    r = (
        read_parquet(str(Path(data) / "docs"))
        .dedup(
            "minhash",
            column="text",
            ngram=cfg["ngram"],
            num_perm=cfg["num_perm"],
            threshold=cfg["threshold"],
            verify=True,
            memory_budget=memory_budget,
        )
        .write_parquet(str(out))
        .run(backend="local", num_proc=cfg["workers"], progress=False, report=False)
    )
    seconds = time.perf_counter() - t0
    monitor.stop()
    summary = next(iter(json.loads(Path(r.manifest).read_text())["dedup"].values()))
    return {
        "seconds": seconds,
        "docs": r.rows_in,
        "removed": r.rows_in - r.rows_out,
        "tasks": r.tasks,
        "peak_rss_mb": monitor.peak_rss_mb,
        "max_procs": monitor.max_procs,
        "cpu_s": monitor.cpu_seconds,
        "phases": phases,
        "summary": {k: v for k, v in summary.items() if k != "audit"},
        "memory_budget": memory_budget,
        "versions": {"shardwise": shardwise.__version__},
    }
