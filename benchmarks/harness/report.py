"""Reporting: numbers, markdown tables, target checks, JSON results, earlier runs.

Ratios are only ever taken between rows measured in the same invocation; results kept
from an earlier run are printed apart, with their date, and never enter a ratio.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Checks",
    "earlier_results",
    "fmt",
    "get",
    "git_info",
    "machine",
    "markdown",
    "ratio",
    "write_json",
]


def fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or ``-`` for None."""
    return "-" if value is None else format(value, spec)


def get(row: dict[str, Any] | None, key: str) -> Any:
    """``row[key]``, or None when there is no row."""
    return None if row is None else row.get(key)


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing or ``b`` is 0."""
    return None if a is None or not b else a / b


def markdown(
    header: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()
) -> str:
    """A markdown table; columns whose index is in ``right`` are right-aligned."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|",
    ]
    for row in rows:
        cells = [str(c).replace("|", "/") for c in row] + [""] * (len(header) - len(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


class Checks:
    """Target lines: ``label: value (target >= t) [vs] MET|NOT MET``, kept for the JSON."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.lines: list[str] = []

    def add(
        self,
        label: str,
        value: float | None,
        target: float | None,
        *,
        vs: str | None = None,
        spec: str = ".2f",
        unit: str = "x",
        at_most: bool = False,
    ) -> bool | None:
        """Record one check; ``at_most`` for targets that are upper bounds."""
        met = (
            None
            if target is None or value is None
            else (value <= target if at_most else value >= target)
        )
        self.data[label] = {"value": value, "target": target, "met": met, "vs": vs}
        goal = "" if target is None else f" (target {'<=' if at_most else '>='} {target:g}{unit})"
        verdict = (
            "" if target is None else (" n/a" if met is None else " MET" if met else " NOT MET")
        )
        peer = f" [{vs}]" if vs else ""
        self.lines.append(
            f"{label}: {fmt(value, spec)}{unit if value is not None else ''}{goal}{peer}{verdict}"
        )
        return met

    def note(self, line: str) -> None:
        """A line printed with the checks that is not a target."""
        self.lines.append(line)

    def print(self) -> None:
        """Print every line."""
        for line in self.lines:
            print(line)


def machine() -> dict[str, Any]:
    """The machine the numbers come from."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg": os.getloadavg(),
    }


def git_info(root: Path) -> dict[str, Any]:
    """The commit measured, and whether shardwise's sources differ from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "src"], cwd=root, capture_output=True, text=True
        ).stdout.splitlines()
    except OSError:
        return {"commit": None, "src_changes": []}
    return {"commit": head or None, "src_changes": [ln.strip() for ln in dirty if ln.strip()]}


def write_json(path: Path, payload: dict[str, Any], root: Path) -> None:
    """Write ``payload`` (with ``created`` added when missing) and say where."""
    payload.setdefault("created", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"\nwrote {os.path.relpath(path, root)}")


def earlier_results(
    path: Path,
    measured: Iterable[str],
    names: Iterable[str],
    columns: dict[str, str],
    section: str | None = None,
) -> dict[str, Any]:
    """Print the rows of an earlier results file that were not measured now, apart.

    Args:
        path: the results JSON of an earlier run of the same benchmark and size.
        measured: the names measured in this invocation (their old rows are not shown).
        names: every name the benchmark knows (others in the file are ignored).
        columns: result key -> column title, for the printed table.
        section: for a file of several sections (``{"shapes": {section: {"results": ...}}}``),
            the one to read; its rows are printed under its name.

    Returns:
        ``{"created": date, "results": {name: row}}`` of what was printed (empty if none).
        When the file's own run has no such rows, the earlier results it kept (with their
        own date) are carried on, so repeated runs of a few rows do not lose the others.
    """
    if not path.exists():
        return {}
    try:
        old = json.loads(path.read_text())
    except ValueError:
        return {}
    part = old if section is None else old.get("shapes", {}).get(section, {})
    skip, known = set(measured), set(names)
    kept, created = _rows(part.get("results", {}), skip, known), old.get("created", "?")
    if not kept and part.get("earlier_results"):
        kept, created = (
            _rows(part["earlier_results"].get("results", {}), skip, known),
            part["earlier_results"].get("created", "?"),
        )
    if not kept:
        return {}
    where = f" [{section}]" if section else ""
    print(f"\nearlier results{where} (run of {created}; not measured now, so not in any ratio):\n")
    print(
        markdown(
            ["system", *columns.values()],
            ([k, *(_cell(v.get(c)) for c in columns)] for k, v in kept.items()),
            right=range(1, len(columns) + 1),
        )
    )
    return {"created": created, "results": kept}


def _rows(rows: Any, skip: set[str], known: set[str]) -> dict[str, Any]:
    if isinstance(rows, list):
        rows = {r.get("name") or r.get("backend"): r for r in rows}
    return {k: v for k, v in rows.items() if k in known and k not in skip and not v.get("error")}


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
    return "-" if v is None else str(v)
