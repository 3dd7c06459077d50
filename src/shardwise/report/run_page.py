"""The run report page: where the rows went, where the time went, the output shards,
the duplicates removed and the records quarantined."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime

import shardwise.report.charts as charts
from shardwise.report.html import Section, key_values, number, page, table
from shardwise.report.model import DedupStage, RunReport

__all__ = ["render_run"]

MAX_TABLE_ROWS = 200


def render_run(report: RunReport) -> str:
    """The report of ``report`` as a self-contained HTML page."""
    missing = charts.plotting()
    sections = [
        _summary(report, missing),
        _ledger(report, missing),
        _time(report, missing),
        _shards(report, missing),
        _dedup(report, missing),
        _quarantine(report),
    ]
    when = (
        datetime.fromtimestamp(report.started, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if report.started
        else "?"
    )
    return page("shardwise run report", f"{report.output} · started {when}", sections)


def _summary(r: RunReport, missing: str | None) -> Section:
    s = Section("Summary", "summary")
    if missing:
        s.add(f'<p class="bad" id="no-charts">Charts are not drawn: {missing}. Tables follow.</p>')
    rate = r.rows_in / r.seconds if r.seconds else 0.0
    unaccounted = r.rows_in - r.rows_out - r.dropped_total - r.quarantined
    return s.add(
        key_values(
            [
                ("rows in", r.rows_in),
                ("rows out", r.rows_out),
                ("rows dropped", r.dropped_total),
                ("rows quarantined", r.quarantined),
                ("unaccounted (must be 0)", unaccounted),
                ("output files", len(r.files)),
                ("output bytes", sum(int(f["bytes"]) for f in r.files)),
                ("tasks", len(r.tasks)),
                ("stages", len(r.stages) or 1),
                ("wall seconds", r.seconds),
                ("rows in per second", f"{number(rate)} rows/s"),
            ],
            table_id="summary-table",
        )
    )


def _ledger(r: RunReport, missing: str | None) -> Section:
    s = Section("Where the rows went", "ledger")
    rows: list[tuple[str, int]] = [("rows out", r.rows_out)]
    rows += [
        (f"{op}: {reason}", n) for op, reasons in r.dropped.items() for reason, n in reasons.items()
    ]
    rows.append(("quarantined (bad records)", r.quarantined))
    if not missing:
        s.add(
            charts.bars(
                "ledger",
                [k for k, _ in rows],
                [v for _, v in rows],
                title="rows per outcome",
                xlabel="rows",
            )
        )
    share = [(k, v, f"{100 * v / r.rows_in:.2f}%" if r.rows_in else "-") for k, v in rows]
    return s.add(
        table(["outcome (operator: reason)", "rows", "of rows in"], share, table_id="ledger-table")
    )


def _time(r: RunReport, missing: str | None) -> Section:
    s = Section("Where the time went", "time")
    _stage_times(s, r, missing)
    t0 = min((t.started for t in r.tasks), default=0.0)
    _task_charts(s, r, missing, t0)
    _task_table(s, r, t0)
    return s


def _stage_times(s: Section, r: RunReport, missing: str | None) -> None:
    """Wall time per stage (and its dedup decision): a chart (with plotting) and a table."""
    labels = [
        f"stage {st['stage'] + 1}: " + (", ".join(st.get("operators", [])) or "write")
        for st in r.stages
    ]
    if not missing and r.stages:
        s.add(
            charts.bars(
                "stages",
                labels,
                [float(st["seconds"]) for st in r.stages],
                title="wall time per stage",
                xlabel="tasks (s)",
                stacked=[
                    (
                        "dedup decision (s)",
                        [float(st.get("decide_seconds", 0.0)) for st in r.stages],
                    )
                ],
            )
        )
    if r.stages:
        s.add(
            table(
                ["stage", "tasks, wall s", "dedup decision, s"],
                [
                    (lab, float(st["seconds"]), float(st.get("decide_seconds", 0.0)))
                    for lab, st in zip(labels, r.stages)
                ],
                table_id="stage-table",
            )
        )


def _task_charts(s: Section, r: RunReport, missing: str | None, t0: float) -> None:
    """Tasks over time and the rows read over time (with plotting)."""
    if not missing and r.tasks:
        segments = [
            [(st["started"] - t0, st["seconds"], int(st["stage"])) for st in t.stages]
            for t in r.tasks
        ]
        s.add(
            charts.timeline(
                "tasks",
                segments,
                title="tasks over time (one row per task)",
                legend=[f"stage {i + 1}" for i in range(max(len(r.stages), 1))],
            )
        )
        points = r.throughput()
        s.add(
            charts.line(
                "throughput",
                [p[0] for p in points],
                [p[1] for p in points],
                title="input rows read over time (a task's rows count when its first stage ends)",
                xlabel="seconds since the first task started",
                ylabel="rows",
            )
        )


def _task_table(s: Section, r: RunReport, t0: float) -> None:
    """Each task's start, stage times and rows (the first ``MAX_TABLE_ROWS``)."""
    rows = [
        (
            t.task,
            round(t.started - t0, 3),
            *[round(st["seconds"], 3) for st in t.stages],
            t.rows_in,
            t.rows_out,
        )
        for t in r.tasks[:MAX_TABLE_ROWS]
    ]
    stage_cols = [
        f"stage {i + 1} s" for i in range(max((len(t.stages) for t in r.tasks), default=0))
    ]
    s.add(
        table(["task", "start s", *stage_cols, "rows in", "rows out"], rows, table_id="task-table")
    )
    if len(r.tasks) > MAX_TABLE_ROWS:
        s.note(f"first {MAX_TABLE_ROWS} of {len(r.tasks):,} tasks")


def _shards(r: RunReport, missing: str | None) -> Section:
    s = Section("Output shards", "shards")
    sizes = [int(f["bytes"]) for f in r.files]
    if not sizes:
        return s.note("the run wrote no files")
    if not missing:
        s.add(
            charts.histogram(
                "shards", [b / 2**20 for b in sizes], title="output shard sizes", xlabel="MiB"
            )
        )
    rows = [int(f["rows"]) for f in r.files]
    s.add(
        key_values(
            [
                ("files", len(sizes)),
                ("smallest, bytes", min(sizes)),
                ("median, bytes", int(statistics.median(sizes))),
                ("largest, bytes", max(sizes)),
                ("fewest rows", min(rows)),
                ("most rows", max(rows)),
            ],
            table_id="shard-summary",
        )
    )
    s.add(
        table(
            ["file", "rows", "bytes"],
            [(f["path"], int(f["rows"]), int(f["bytes"])) for f in r.files[:MAX_TABLE_ROWS]],
            table_id="shard-table",
        )
    )
    return s


def _dedup(r: RunReport, missing: str | None) -> Section:
    s = Section("Duplicates", "dedup")
    if not r.dedup:
        return s.note("the pipeline has no dedup stage")
    for d in r.dedup:
        _dedup_stage(s, d, missing)
    return s


def _dedup_stage(s: Section, d: DedupStage, missing: str | None) -> None:
    s.add(f"<h3>{d.name}</h3>")
    numbers = [
        (k, v) for k, v in d.summary.items() if isinstance(v, int | float | str) and k != "audit"
    ]
    s.add(key_values(numbers, table_id=f"dedup-{d.name}"))
    if d.cluster_sizes:
        sizes = sorted(d.cluster_sizes)
        if not missing:
            s.add(
                charts.bars(
                    f"clusters-{d.name}",
                    [f"{k} rows" for k in sizes],
                    [d.cluster_sizes[k] for k in sizes],
                    title="duplicate clusters by size (kept row included)",
                    xlabel="clusters",
                )
            )
        s.add(
            table(
                ["cluster size", "clusters"],
                [(k, d.cluster_sizes[k]) for k in sizes],
                table_id=f"clusters-{d.name}",
            )
        )
    if d.examples:
        rows = [
            (e["cluster_size"], e["kept"]["text"], "\n---\n".join(x["text"] for x in e["removed"]))
            for e in d.examples
        ]
        s.add("<p>The largest clusters: the row kept and rows removed as its duplicates.</p>")
        s.add(
            table(
                ["cluster size", "kept", "removed"],
                rows,
                table_id=f"examples-{d.name}",
                sample=(1, 2),
            )
        )


def _quarantine(r: RunReport) -> Section:
    s = Section("Quarantined records", "quarantine")
    if not r.quarantined:
        return s.note("no record was quarantined")
    s.add(
        f'<p>{r.quarantined:,} bad records were skipped (on_error="skip"); '
        f"the first {len(r.quarantine_examples)} with their file and place:</p>"
    )
    return s.add(
        table(
            ["file", "place", "reason"],
            [list(e) + [""] * (3 - len(e)) for e in r.quarantine_examples],
            table_id="quarantine-table",
        )
    )
