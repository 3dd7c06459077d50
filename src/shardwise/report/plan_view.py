"""The plan view: what a loader plan gives each rank and worker, computed before training
(drawn by :mod:`shardwise.report.plan_page`).

Steps and samples per rank and worker, the samples padded or left out, how often each
unit is read (read amplification), the sources' shares when sources are mixed, and the
bytes a worker holds at once. Computed from the plan alone: no data is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from shardwise.plan import EpochPlan, Mixing, Plan, Topology, batch_shares, source_counts
from shardwise.plan.report import plan_report

__all__ = ["PlanView", "plan_view", "share_note", "source_rows"]


@dataclass(frozen=True)
class PlanView:
    """The numbers of a plan view.

    Attributes:
        summary: :func:`shardwise.plan.report.plan_report`'s numbers (plus ``interleave``,
            ``drop_last``, ``samples_total`` and ``replication``). With ``replication`` R > 1
            the plan's ranks are groups of R training ranks reading the same batches.
        samples: ``[rank][worker]`` samples each worker yields this epoch.
        units: ``[rank][worker]`` units each worker reads.
        peak_bytes: ``[rank][worker]`` largest on-storage bytes of two consecutive windows.
        padded: ``[rank][worker]`` repeated samples (``drop_last=False``; empty when the
            plan kind does not place them by position, as for mixed or canonical plans).
        reads_per_unit: ``{workers reading a unit: units}`` over the units in use.
        sources: one row per source when sources are mixed (empty for one source).
    """

    summary: dict[str, Any]
    samples: list[list[int]]
    units: list[list[int]]
    peak_bytes: list[list[int]]
    padded: list[list[int]]
    reads_per_unit: dict[int, int]
    sources: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["reads_per_unit"] = {str(k): v for k, v in self.reads_per_unit.items()}
        return out


def _worker_numbers(
    plan: Plan, unit_bytes: np.ndarray, prefetch_windows: int
) -> tuple[np.ndarray, ...]:
    t = plan.topology
    shape = (t.world_size, t.num_workers)
    samples, units, peak = (
        np.zeros(shape, np.int64),
        np.zeros(shape, np.int64),
        np.zeros(shape, np.int64),
    )
    readers = np.zeros(len(unit_bytes), np.int64)
    for rank in range(t.world_size):
        for w in range(t.num_workers):
            wp = plan.worker(rank, w)
            used = wp.units()
            samples[rank, w], units[rank, w] = wp.num_samples, len(used)
            readers[used] += 1
            sizes = [int(unit_bytes[wu].sum()) for wu, _, _ in wp.iter_windows()]
            peak[rank, w] = max(
                (sum(sizes[i : i + prefetch_windows]) for i in range(len(sizes))), default=0
            )
    return samples, units, peak, readers


def _padded(plan: Plan) -> list[list[int]]:
    """Repeated samples per worker: the stream's last ``num_padded`` positions."""
    if not isinstance(plan, EpochPlan):
        return []
    t = plan.topology
    per = plan.samples_per_worker
    real = t.slots * per - plan.num_padded
    starts = np.arange(t.slots) * per
    pad = np.clip(starts + per, real, None) - np.clip(starts, real, None)
    out: list[list[int]] = pad.reshape(t.world_size, t.num_workers).tolist()
    return out


def plan_view(
    plan: Plan,
    unit_bytes: Sequence[int] | np.ndarray,
    *,
    samples_total: int,
    sources: Sequence[Mapping[str, Any]] = (),
    prefetch_windows: int = 2,
    replication: int = 1,
) -> PlanView:
    """The view of ``plan`` given each unit's size in bytes and the dataset's samples;
    ``sources`` are rows (name, units, samples, quota...) of a mixed dataset, none for a
    single source; ``replication`` training ranks per rank of the plan (model-parallel
    groups), to label ranks by group."""
    unit_bytes = np.asarray(unit_bytes, dtype=np.int64)
    summary = plan_report(plan, unit_bytes, prefetch_windows)
    summary.update(
        {
            "interleave": plan.topology.interleave,
            "drop_last": plan.topology.drop_last,
            "samples_total": int(samples_total),
            "replication": int(replication),
        }
    )
    samples, units, peak, readers = _worker_numbers(plan, unit_bytes, prefetch_windows)
    counts = np.bincount(readers[readers > 0])
    return PlanView(
        summary,
        samples.tolist(),
        units.tolist(),
        peak.tolist(),
        _padded(plan),
        {int(k): int(v) for k, v in enumerate(counts) if v},
        [dict(s) for s in sources],
    )


def source_rows(
    mixing: Mixing,
    counts: Sequence[int] | np.ndarray,
    topology: Topology,
    *,
    names: Sequence[str] = (),
    canonical_workers: int | None = None,
    plan: Plan | None = None,
) -> list[dict[str, Any]]:
    """The per-source rows of a mixed plan: units, samples stored, the rule, and the
    samples the epoch takes from each (its exact quota); with a stratified ``plan``, the
    samples it realises and how far its batches are from each source's share (worst and
    mean ``|count - share|``, per global batch and per rank's batch)."""
    sizes = mixing.sizes(np.asarray(counts, dtype=np.int64)).tolist()
    epoch = source_counts(mixing, counts, topology, canonical_workers)
    total = max(sum(epoch), 1)
    shares = batch_shares(plan) if plan is not None else None
    rows = []
    for s, rule in enumerate(mixing.rules):
        given = {k: v for k, v in vars(rule).items() if v is not None}
        rows.append(
            {
                "source": names[s] if s < len(names) else f"source {s}",
                "units": mixing.bounds[s + 1] - mixing.bounds[s],
                "samples stored": sizes[s],
                "rule": ", ".join(f"{k}={v}" for k, v in given.items()) or "repeat=1",
                "samples this epoch": epoch[s],
                "share": f"{100 * epoch[s] / total:.2f}%",
                **_batch_columns(shares, s),
            }
        )
    return rows


def _batch_columns(shares: dict[str, list[float]] | None, s: int) -> dict[str, Any]:
    if shares is None:
        return {}
    return {
        "realised": shares["realised"][s],
        "global batch off share (worst / mean)": (
            f"{shares['global_worst'][s]:.2f} / {shares['global_mean'][s]:.2f}"
        ),
        "rank batch off share (worst / mean)": (
            f"{shares['rank_worst'][s]:.2f} / {shares['rank_mean'][s]:.2f}"
        ),
    }


def share_note(row: Mapping[str, Any]) -> str:
    """A stratified epoch's distance of batches from a source's share, for a line of text
    (empty for a row of another plan)."""
    if "realised" not in row:
        return ""
    return (
        f"; per batch off its share by {row['global batch off share (worst / mean)']} "
        f"(worst / mean; a rank's batch: {row['rank batch off share (worst / mean)']})"
    )
