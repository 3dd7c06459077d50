"""The plan view drawn as a self-contained HTML page: steps per rank and worker, padding
or dropping, read amplification, the sources' shares and the bytes a worker holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import shardwise.report.charts as charts
from shardwise.report.html import Section, key_values, page, table
from shardwise.report.plan_view import PlanView

__all__ = ["render_plan"]


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
    return (
        f"{s['world_size']} groups of {r} ranks ({s['world_size'] * r} ranks; a group's ranks "
        "read the same batches)"
    )


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
            f"<p>drop_last=False: <b>{s['samples_padded']:,}</b> samples are repeated from the "
            "start of the epoch's order to fill the last batches.</p>"
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
        f"<p><b>{v.summary['read_amplification']:.3f}x</b>: bytes read by all workers over the "
        "bytes "
        "of the units in use (1.000x: every unit read once; a unit cut between two workers, or "
        "padding, is read twice)"
        + (
            f"; per group: each of a group's {v.summary['replication']} ranks reads the same units"
            if v.summary.get("replication", 1) > 1
            else ""
        )
        + ".</p>"
    )
    _reads_per_unit(sec, v, missing)
    return _units_per_worker(sec, v, missing)


def _reads_per_unit(sec: Section, v: PlanView, missing: str | None) -> None:
    """How many units each number of workers reads: a chart (with plotting) and a table."""
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


def _units_per_worker(sec: Section, v: PlanView, missing: str | None) -> Section:
    """The units each (rank, worker) reads: a heat map (with plotting) and the extremes."""
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
        f"mixed and the one read ahead): <b>{_mib(max(flat, default=0))}</b>. Decoded Arrow data "
        "is usually larger.</p>"
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
