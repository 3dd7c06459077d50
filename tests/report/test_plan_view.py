"""The plan view's numbers: the plan's own, per rank and worker, and per source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.cli import main
from shardwise.plan import EpochPlan, Mixing, Rule, Topology, make_plan, source_counts
from shardwise.plan.report import plan_report
from shardwise.report import plan_view, render_plan, source_rows


def _counts(n: int = 1_500, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(200, 2_000, size=n)


def test_64_ranks_by_8_workers_equal_the_plan() -> None:
    counts = _counts()
    plan = EpochPlan(counts, Topology(64, 8, 32, drop_last=False, interleave=8), seed=3)
    view = plan_view(plan, counts * 300, samples_total=int(counts.sum()))
    assert {k: view.summary[k] for k in plan_report(plan, counts * 300)} == plan_report(
        plan, counts * 300
    )
    assert np.array(view.samples).shape == (64, 8)
    assert {n for row in view.samples for n in row} == {plan.samples_per_rank // 8}
    assert sum(map(sum, view.padded)) == plan.num_padded > 0
    assert max(max(row) for row in view.peak_bytes) == view.summary["peak_buffered_bytes"]
    used = sum(view.reads_per_unit.values())
    reads = sum(k * n for k, n in view.reads_per_unit.items())
    assert reads == sum(map(sum, view.units)) and used <= len(counts)
    assert (
        min(view.reads_per_unit) == 1 and max(view.reads_per_unit) >= 2
    )  # some units cut between workers
    assert view.sources == []
    html = render_plan(view)
    assert "one source: nothing is mixed" in html and len(html) < 2 * 2**20
    assert json.loads(json.dumps(view.to_json()))["summary"] == view.summary


def test_dropping_leaves_out_the_tail_and_pads_nothing() -> None:
    counts = _counts(300, seed=1)
    plan = EpochPlan(counts, Topology(8, 4, 16, drop_last=True, interleave=4))
    view = plan_view(plan, counts * 100, samples_total=int(counts.sum()))
    assert sum(map(sum, view.padded)) == 0 and view.summary["samples_left_out"] == plan.num_left_out
    assert sum(map(sum, view.samples)) + plan.num_left_out == counts.sum()
    assert "drop_last=True" in render_plan(view)


def test_mixed_sources_get_a_row_each_with_the_plan_quotas() -> None:
    counts = _counts(400, seed=2)
    mixing = Mixing((0, 100, 400), (Rule(weight=0.3), Rule(weight=0.7)), batching="stratified")
    topo = Topology(64, 8, 10, drop_last=True, interleave=4)
    plan = make_plan(counts, topo, mixing=mixing)
    rows = source_rows(mixing, counts, topo, names=["books", "web"])
    assert [r["source"] for r in rows] == ["books", "web"]
    assert [r["samples this epoch"] for r in rows] == source_counts(mixing, counts, topo)
    assert sum(r["samples this epoch"] for r in rows) == plan.samples_per_rank * 64
    assert [r["samples stored"] for r in rows] == [int(counts[:100].sum()), int(counts[100:].sum())]
    view = plan_view(plan, counts * 100, samples_total=int(counts.sum()), sources=rows)
    html = render_plan(view)
    table = re.search(r'<table id="sources-table">.*?</table>', html, re.S)
    assert table and "books" in table.group(0) and "weight=0.3" in table.group(0)
    assert view.padded == []  # placed by source, not by stream position: not drawn per worker
    # with the plan: what it realises (the quotas) and how far its batches are from the shares
    rows = source_rows(mixing, counts, topo, names=["books", "web"], plan=plan)
    assert [r["realised"] for r in rows] == [r["samples this epoch"] for r in rows]
    for r in rows:
        worst, mean = map(float, r["global batch off share (worst / mean)"].split(" / "))
        assert 0 <= mean <= worst < 1
        worst, mean = map(float, r["rank batch off share (worst / mean)"].split(" / "))
        assert 0 <= mean <= worst < 1
    html = render_plan(plan_view(plan, counts * 100, samples_total=int(counts.sum()), sources=rows))
    assert "rank batch off share (worst / mean)" in html


def test_cli_plan_draws_the_view(tmp_path: Path, capsys) -> None:
    for i in range(3):
        pq.write_table(
            pa.table({"id": list(range(400 + 50 * i))}),
            tmp_path / f"p{i}.parquet",
            row_group_size=37,
        )
    out = tmp_path / "plan.html"
    assert main(["plan", str(tmp_path), "-w", "4", "-k", "2", "-b", "8", "--html", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"plan view: {out}" in printed
    html = out.read_text()
    steps = re.search(r"<th>steps per rank</th><td class=\"num\">([\d,]+)</td>", html)
    assert steps and f"{int(steps.group(1).replace(',', '')):,}" in printed
