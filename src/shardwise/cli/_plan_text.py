"""``shardwise plan``'s terminal summary: the plan report as aligned (label, text) lines."""

from __future__ import annotations

from typing import Any

import click

from shardwise.cli._app import human_bytes

__all__ = ["echo_summary", "summary_lines"]


def echo_summary(lines: list[tuple[str, str]]) -> None:
    """Print (label, text) lines with the labels in one column."""
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key:<{width}}  {value}")


def summary_lines(
    report: dict[str, Any], index: Any, workers: int, batch_size: int, canonical_workers: int | None
) -> list[tuple[str, str]]:
    """The plan report as (label, text) lines for the terminal."""
    replication, groups = report["replication"], report["groups"]
    ranks, interleave = _ranks_text(report), report["interleave"]
    lines = [
        ("samples", f"{index.num_samples:,} in {index.num_units:,} units"),
        ("topology", f"{ranks} x {workers} workers, batch {batch_size}, interleave {interleave}"),
        ("steps per rank", f"{report['steps_per_rank']:,} (equal on every rank)"),
        (
            "samples per rank",
            f"{report['samples_per_rank']:,}"
            + (f" (per group: {groups} groups share the epoch)" if replication > 1 else ""),
        ),
        ("left out", f"{report['samples_left_out']:,}"),
        ("padded", f"{report['samples_padded']:,}"),
        ("first window", _first_window_text(report)),
        ("read amplification", _amplification_text(report)),
        (
            "peak buffered",
            human_bytes(report["peak_buffered_bytes"]) + " per worker (on-storage size)",
        ),
    ]
    return lines + _source_lines(report["sources"], canonical_workers)


def _first_window_text(report: dict[str, Any]) -> str:
    k, given = report.get("blocks", 1), report.get("first_window", "none")
    if k > 1:
        return f"heads: every unit's first 1/{k} of rows first (first_window={given})"
    return f"whole units (first_window={given})"


def _ranks_text(report: dict[str, Any]) -> str:
    world_size, replication, groups = report["world_size"], report["replication"], report["groups"]
    if replication == 1:
        return f"{world_size} ranks"
    return (
        f"{world_size} ranks in {groups} groups of {replication} (data-parallel ranks; "
        "a group's ranks read the same batches)"
    )


def _amplification_text(report: dict[str, Any]) -> str:
    replication = report["replication"]
    return (
        f"{report['read_amplification']:.3f}x (bytes read by all workers / "
        "bytes of the units used; 1.000x = each unit read once)"
        + (
            f", per group: each of a group's {replication} ranks reads the same units"
            if replication > 1
            else ""
        )
    )


def _source_lines(
    rows: list[dict[str, Any]], canonical_workers: int | None
) -> list[tuple[str, str]]:
    """One line per mixed source, and the canonical workers when given."""
    from shardwise.report.plan_view import share_note

    lines = [
        (
            f"source {r['source']}",
            f"{r['samples this epoch']:,} samples this epoch ({r['share']}; "
            f"{r['rule']}; {r['samples stored']:,} stored)" + share_note(r),
        )
        for r in rows
    ]
    if canonical_workers:
        lines.append(
            (
                "canonical workers",
                f"{canonical_workers} (the same global batches on every topology "
                "whose ranks x workers divide it)",
            )
        )
    return lines
