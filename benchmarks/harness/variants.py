"""Variants of a benchmark's rows: the same system run against another checkout's sources.

``--before SRC`` adds, for every chosen row that runs in shardwise's interpreter, a row
``<name>@before`` whose worker gets ``PYTHONPATH=SRC`` (e.g. ``/tmp/before/src``, a git
worktree of an earlier commit); the plain row gets ``PYTHONPATH=<this checkout>/src``. Both
are alternated in the same rounds, so a before/after ratio compares like with like.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from harness.runner import System

__all__ = ["SUFFIX", "base", "before_after", "variant_env", "with_variants", "worker_systems"]

SUFFIX = "@before"


def base(name: str) -> str:
    """The row a (possibly variant) name measures."""
    return name.removesuffix(SUFFIX)


def with_variants(names: list[str], systems: dict[str, System]) -> list[str]:
    """``names`` with each main-interpreter row followed by its ``@before`` variant."""
    return [v for n in names for v in ((n, n + SUFFIX) if systems[n].env == "main" else (n,))]


def worker_systems(systems: dict[str, System]) -> dict[str, System]:
    """``systems`` plus every ``@before`` variant (what a worker looks its name up in)."""
    return systems | {n + SUFFIX: replace(s, name=n + SUFFIX) for n, s in systems.items()}


def variant_env(name: str, after_src: str, before_src: str | None) -> dict[str, str]:
    """The worker's ``PYTHONPATH``: the earlier sources for a variant, ours otherwise."""
    if before_src is None:
        return {}
    return {"PYTHONPATH": before_src if name.endswith(SUFFIX) else after_src}


def _paired(after: dict[str, Any], before: dict[str, Any]) -> float | None:
    mine, theirs = after.get("by_round", {}), before.get("by_round", {})
    ratios = [mine[k] / theirs[k] for k in mine if theirs.get(k)]
    return statistics.median(ratios) if ratios else None


def before_after(results: dict[str, dict[str, Any]]) -> list[list[Any]]:
    """Table rows: name, rows/s after and before (medians), their ratio, the median of the
    rounds' own ratios, the rounds, and the 1-minute load range over both rows' runs."""
    rows: list[list[Any]] = []
    for name, after in results.items():
        before = results.get(name + SUFFIX)
        if name.endswith(SUFFIX) or before is None or "error" in after or "error" in before:
            continue
        loads = [
            x for r in (after, before) for x in r.get("loads", []) if isinstance(x, (int, float))
        ]
        paired = _paired(after, before)
        rows.append(
            [
                name,
                f"{after['rows_per_s']:,.0f}",
                f"{before['rows_per_s']:,.0f}",
                f"{after['rows_per_s'] / before['rows_per_s']:.2f}x",
                f"{paired:.2f}x" if paired is not None else "n/a",
                f"{after.get('median_of', 1)}/{before.get('median_of', 1)}",
                f"{min(loads):.1f}-{max(loads):.1f}" if loads else "?",
            ]
        )
    return rows
