"""The plan view: what a loader plan gives each rank and worker, drawn before training.

Steps and samples per rank and worker, the samples padded or left out, how often each
unit is read (read amplification), the sources' shares when sources are mixed, and the
bytes a worker holds at once. Computed from the plan alone: no data is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

import shardwise.report.charts as charts
from shardwise.plan import EpochPlan, Mixing, Plan, Topology, batch_shares, source_counts
from shardwise.plan.report import plan_report
from shardwise.report.html import Section, key_values, page, table

__all__ = ["PlanView", "plan_view", "render_plan", "source_rows"]


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


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def render_plan(view: PlanView, title: str = "shardwise plan view") -> str:
    """The plan view as a self-contained HTML page."""
    missing = charts.plotting()
    s = view.summary
    subtitle = (
        f"{_ranks(s)} x {s['workers_per_rank']} workers, batch {s['batch_size']}, "
        f"interleave {s['interleave']}, drop_last={s['drop_last']}"
    )
    return page(
        title,
        subtitle,
        [
            _steps(view, missing),
            _edges(view),
            _reads(view, missing),
            _sources(view),
            _memory(view, missing),
        ],
    )


def _ranks(s: Mapping[str, Any]) -> str:
    r = s.get("replication", 1)
    if r == 1:
        return f"{s['world_size']} ranks"
    return f"{s['world_size']} groups of {r} ranks ({s['world_size'] * r} ranks; a group's ranks read the same batches)"


def _who(s: Mapping[str, Any]) -> str:
    return "group" if s.get("replication", 1) > 1 else "rank"


def _steps(v: PlanView, missing: str | None) -> Section:
    s = v.summary
    sec = Section("Steps per rank and worker", "steps")
    if missing:
        sec.add(
            f'<p class="bad" id="no-charts">Charts are not drawn: {missing}. Tables follow.</p>'
        )
    sec.add(
        key_values(
            [
                ("samples in the dataset", s["samples_total"]),
                ("steps per rank", s["steps_per_rank"]),
                ("samples per rank", s["samples_per_rank"]),
                ("samples per worker", s["samples_per_rank"] // max(s["workers_per_rank"], 1)),
            ],
            table_id="steps-summary",
        )
    )
    if not missing:
        sec.add(
            charts.heatmap(
                "samples",
                v.samples,
                title=f"samples per ({_who(s)}, worker): equal everywhere",
                xlabel=_who(s),
                ylabel="worker",
                unit="samples",
            )
        )
    first = "ranks" if s.get("replication", 1) == 1 else "groups (their ranks)"
    return sec.add(
        table(
            [first, "steps", "samples", "fewest per worker", "most per worker"],
            _rank_ranges(
                [(s["steps_per_rank"], sum(w), min(w), max(w)) for w in v.samples],
                s.get("replication", 1),
            ),
            table_id="rank-table",
        )
    )


def _span(a: int, b: int) -> str:
    return str(a) if a == b else f"{a}-{b}"


def _rank_ranges(rows: list[tuple[int, ...]], replication: int = 1) -> list[tuple[object, ...]]:
    """Consecutive ranks with the same numbers in one row (``0-63``); groups of
    ``replication`` ranks are labelled with their training ranks (``0-1 (ranks 0-3)``)."""
    out: list[tuple[object, ...]] = []
    start = 0
    for r in range(1, len(rows) + 1):
        if r == len(rows) or rows[r] != rows[start]:
            label = _span(start, r - 1)
            if replication > 1:
                label += f" (ranks {_span(start * replication, r * replication - 1)})"
            out.append((label, *rows[start]))
            start = r
    return out


def _edges(v: PlanView) -> Section:
    s = v.summary
    sec = Section("Padding or dropping", "edges")
    if s["drop_last"]:
        sec.add(
            f"<p>drop_last=True: <b>{s['samples_left_out']:,}</b> samples are left out this epoch "
            f"(always fewer than {_who(s)}s x workers x batch = "
            f"{s['world_size'] * s['workers_per_rank'] * s['batch_size']:,}).</p>"
        )
    else:
        sec.add(
            f"<p>drop_last=False: <b>{s['samples_padded']:,}</b> samples are repeated from the start "
            "of the epoch's order to fill the last batches.</p>"
        )
    padded = [(r, w, n) for r, row in enumerate(v.padded) for w, n in enumerate(row) if n]
    if padded:
        sec.add(table([_who(s), "worker", "padded samples"], padded, table_id="padded-table"))
    return sec.add(
        key_values(
            [("left out", s["samples_left_out"]), ("padded", s["samples_padded"])],
            table_id="edges-table",
        )
    )


def _reads(v: PlanView, missing: str | None) -> Section:
    sec = Section("Read amplification", "reads")
    sec.add(
        f"<p><b>{v.summary['read_amplification']:.3f}x</b>: bytes read by all workers over the bytes "
        "of the units in use (1.000x: every unit read once; a unit cut between two workers, or "
        "padding, is read twice)"
        + (
            f"; per group: each of a group's {v.summary['replication']} ranks reads the same units"
            if v.summary.get("replication", 1) > 1
            else ""
        )
        + ".</p>"
    )
    keys = sorted(v.reads_per_unit)
    if not missing and keys:
        sec.add(
            charts.bars(
                "reads",
                [f"read by {k} worker(s)" for k in keys],
                [v.reads_per_unit[k] for k in keys],
                title="units by number of workers reading them",
                xlabel="units",
            )
        )
    sec.add(
        table(
            ["workers reading the unit", "units"],
            [(k, v.reads_per_unit[k]) for k in keys],
            table_id="reads-table",
        )
    )
    if not missing:
        sec.add(
            charts.heatmap(
                "units",
                v.units,
                title=f"units read per ({_who(v.summary)}, worker)",
                xlabel=_who(v.summary),
                ylabel="worker",
                unit="units",
            )
        )
    flat = [n for row in v.units for n in row]
    return sec.add(
        key_values(
            [
                ("fewest units per worker", min(flat, default=0)),
                ("most units per worker", max(flat, default=0)),
            ],
            table_id="units-table",
        )
    )


def _sources(v: PlanView) -> Section:
    sec = Section("Sources", "sources")
    if not v.sources:
        sec.note("one source: nothing is mixed")
        return sec.add(table(["source", "samples"], [], table_id="sources-table"))
    headers = list(dict.fromkeys(k for row in v.sources for k in row))
    return sec.add(
        table(
            headers,
            [[row.get(h, "") for h in headers] for row in v.sources],
            table_id="sources-table",
        )
    )


def _memory(v: PlanView, missing: str | None) -> Section:
    sec = Section("Memory a worker holds", "memory")
    flat = [b for row in v.peak_bytes for b in row]
    sec.add(
        f"<p>Largest on-storage bytes of two consecutive windows of one worker (the window being "
        f"mixed and the one read ahead): <b>{_mib(max(flat, default=0))}</b>. Decoded Arrow data is "
        "usually larger.</p>"
    )
    if not missing and flat:
        sec.add(
            charts.heatmap(
                "memory",
                [[b / 2**20 for b in row] for row in v.peak_bytes],
                title=f"peak buffered bytes per ({_who(v.summary)}, worker)",
                xlabel=_who(v.summary),
                ylabel="worker",
                unit="MiB",
            )
        )
    return sec.add(
        key_values(
            [
                ("smallest peak, bytes", min(flat, default=0)),
                ("median peak, bytes", int(np.median(flat)) if flat else 0),
                ("largest peak, bytes", max(flat, default=0)),
            ],
            table_id="memory-table",
        )
    )
