"""Make the site's pictures in ``docs/assets/`` from shardwise's own report layer.

    python tools/docsite/figures.py [OUT]   (needs the report extra: matplotlib; OUT
                                             defaults to docs/assets)

- ``run-*.svg``: charts of the ``_report.html`` of a small pipeline run (where the rows
  went, the tasks on a timeline, the dedup's cluster sizes);
- ``plan-*.svg``: charts of ``shardwise plan ... --html`` for 8 ranks x 2 workers;
- ``mixing.svg``: the report layer's bar chart of the first batches' sources, random
  against stratified batching (three sources, weights 0.5/0.3/0.2).

The files are committed; rerun this after a change to the report's look.
``tests/e2e/test_docs_figures.py`` runs it into a scratch directory: it must make every
picture the pages show, and the pages must show every picture it makes.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "docs" / "assets"
# the report's chart id -> the file in docs/assets/
REPORT_CHARTS = {
    "ledger": "run-ledger.svg",
    "tasks": "run-tasks.svg",
    "clusters-minhash_dedup": "run-clusters.svg",
}
PLAN_CHARTS = {"samples": "plan-samples.svg", "reads": "plan-reads.svg"}


def _raw(root: Path) -> None:
    raw = root / "raw"
    raw.mkdir()
    words = ["data", "model", "train", "shard", "rank", "worker", "batch", "epoch", "token", "text"]
    rng = np.random.default_rng(0)
    for part in range(4):
        with open(raw / f"part-{part}.jsonl", "w") as f:
            for i in range(4000):
                n = int(rng.integers(2, 40))
                text = " ".join(rng.choice(words, n)) if i % 9 else "copy of a common line of text"
                f.write(json.dumps({"id": part * 10_000 + i, "text": text}) + "\n")


def _pipeline(root: Path) -> Path:
    import shardwise

    out = root / "clean"
    (
        shardwise.read_jsonl(str(root / "raw"), task_bytes=2**18)
        .apply("normalize_text", column="text", lowercase=True)
        .apply("word_count_filter", column="text", min=5)
        .dedup(method="minhash", column="text", threshold=0.8)
        .write_parquet(str(out), target_shard_bytes=2**18)
        .run()
    )
    return out


def _svg(img: str) -> str:
    """The SVG document inside one of the report's ``<img src="data:image/svg+xml;...">``."""
    data = re.search(r'base64,([A-Za-z0-9+/=]+)"', img)
    if data is None:
        raise SystemExit("the report drew no inline SVG: install the report extra")
    return base64.b64decode(data.group(1)).decode()


def _save_charts(html: Path, charts: dict[str, str], out: Path) -> None:
    page = html.read_text()
    for chart, name in charts.items():
        img = re.search(rf'<img class="chart" id="chart-{re.escape(chart)}"[^>]*>', page)
        if img is None:
            raise SystemExit(f"{html.name} has no chart {chart!r}")
        (out / name).write_text(_svg(img.group(0)))


def _sources(root: Path) -> list[str]:
    paths = []
    for name, rows in (("web", 6000), ("code", 3600), ("books", 2400)):
        path = root / name
        path.mkdir()
        table = pa.table({"id": np.arange(rows), "source": [name] * rows})
        pq.write_table(table, path / "part-0.parquet", row_group_size=300)
        paths.append(str(path))
    return paths


def _first_batches(paths: list[str], batching: str) -> list[dict[str, int]]:
    import shardwise
    from shardwise import Source

    ds = shardwise.StreamingDataset(
        [Source(p, weight=w, name=Path(p).name) for p, w in zip(paths, (0.5, 0.3, 0.2))],
        batching=batching,
        batch_size=20,
        seed=0,
        columns=["source"],
        batch_format="numpy",
        interleave=2,  # a small window: what batching does shows at once
    )
    it = ds.iter_shard(0, 4, 0, 2)  # rank 0 of 4, worker 0 of 2
    batches = [next(it)["source"] for _ in range(6)]
    return [
        {n: int(sum(1 for s in b if s == n)) for n in ("web", "code", "books")} for b in batches
    ]


def mixing_svg(root: Path) -> str:
    from shardwise.report import charts

    paths = _sources(root)
    labels, rows = [], []
    for batching in ("random", "stratified"):
        for i, counts in enumerate(_first_batches(paths, batching)):
            labels.append(f"{batching} batch {i}")
            rows.append(counts)
    img = charts.bars(
        "mixing",
        labels,
        [r["web"] for r in rows],
        xlabel="web",
        stacked=[(n, [r[n] for r in rows]) for n in ("code", "books")],
        title="Samples per source in each batch of 20 (weights 0.5 / 0.3 / 0.2)",
    )
    return _svg(img)


def names() -> list[str]:
    """The files :func:`make` writes."""
    return [*REPORT_CHARTS.values(), *PLAN_CHARTS.values(), "mixing.svg"]


def make(out: Path = ASSETS) -> None:
    """Draw every picture into ``out`` from a real run, its plan view and a real stream."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _raw(root)
        clean = _pipeline(root)
        _save_charts(clean / "_report.html", REPORT_CHARTS, out)
        plan = root / "plan.html"
        cli = Path(sys.executable).with_name("shardwise")
        subprocess.run(
            [str(cli), "plan", str(clean), "-w", "8", "-k", "2", "-b", "32", "--html", str(plan)],
            check=True,
            capture_output=True,
        )
        _save_charts(plan, PLAN_CHARTS, out)
        (out / "mixing.svg").write_text(mixing_svg(root))


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ASSETS
    make(out)
    for name in names():
        print(out / name, (out / name).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
