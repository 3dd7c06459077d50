"""Reports a person looks at: ``_report.html`` of a processing run, and the plan view.

- :func:`load_run` reads a published run's manifests into a :class:`RunReport`
  (``to_json()`` holds the same numbers as the manifests);
- :func:`write_run_report` writes ``_report.html`` next to the run's manifest (named with
  a leading ``_`` so that pyarrow, pandas and Spark, reading the output directory as a
  dataset, skip it as they skip the manifests); the package
  root registers it with :mod:`shardwise.pipeline.hooks`, so every ``Pipeline.run`` does
  this once the output is published);
- :func:`plan_view` and :func:`render_plan` draw a loader plan (steps per rank and
  worker, padding or dropping, read amplification, sources, memory per worker).

Pages are self-contained (inline style, charts as SVG ``data:`` images, nothing
fetched). Charts need matplotlib (``pip install "shardwise[report]"``); without it the
pages hold the same numbers as tables and say which extra adds the charts.

May import: ``shardwise.errors``, ``shardwise._optional``, ``shardwise.storage``,
``shardwise.formats``, ``shardwise.index``, ``shardwise.plan``, ``shardwise.pipeline``
and ``shardwise.loader`` (see ``docs/layers.toml``).
"""

from __future__ import annotations

from typing import Any

from shardwise.report.model import DedupStage, RunReport, TaskTime, load_run
from shardwise.report.plan_page import render_plan
from shardwise.report.plan_view import PlanView, plan_view, source_rows
from shardwise.report.run_page import render_run
from shardwise.storage import atomic_write, join

__all__ = [
    "REPORT_NAME",
    "DedupStage",
    "PlanView",
    "RunReport",
    "TaskTime",
    "load_run",
    "plan_view",
    "render_plan",
    "render_run",
    "source_rows",
    "write_run_report",
]

REPORT_NAME = "_report.html"


def write_run_report(run_dir: str, storage_options: dict[str, Any] | None = None) -> str:
    """Write ``_report.html`` into ``run_dir`` from its manifests; return its path."""
    opts = dict(storage_options or {})
    html = render_run(load_run(run_dir, opts))
    path = join(run_dir.rstrip("/") or "/", REPORT_NAME)
    with atomic_write(path, "w", **opts) as f:
        f.write(html)
    return path
