"""The run report's "Duplicates" section: what each dedup stage removed, its duplicate
clusters by size and examples of the largest (part of :mod:`shardwise.report.run_page`)."""

from __future__ import annotations

import shardwise.report.charts as charts
from shardwise.report.html import Section, key_values, table
from shardwise.report.model import DedupStage, RunReport

__all__ = ["dedup_section"]


def dedup_section(r: RunReport, missing: str | None) -> Section:
    """The "Duplicates" section: per dedup stage its figures, its clusters by size and
    the largest clusters' rows (charts left out when ``missing`` says why)."""
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
        _cluster_sizes(s, d, missing)
    if d.examples:
        _cluster_examples(s, d)


def _cluster_sizes(s: Section, d: DedupStage, missing: str | None) -> None:
    """A dedup stage's duplicate clusters by size: a chart (unless charts are missing)
    and a table."""
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


def _cluster_examples(s: Section, d: DedupStage) -> None:
    """A dedup stage's largest clusters: the row kept and the rows removed."""
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
