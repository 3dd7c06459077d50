"""The getting-started code in a real Jupyter kernel, cell by cell, as a notebook user
pastes it: ``__main__`` is the kernel's, the kernel has its own threads and output
streams, and DataLoader workers start by fork, spawn or forkserver from it.

The cells are the block of docs/getting-started/local.md cut where a user would cut it
(data, pipeline, streaming loop), then the loop cell run again, a filter function defined
in the notebook run on the default local process pool, and the same epoch through
DataLoader workers started by spawn and by forkserver."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")
PAGE = ROOT / "docs" / "getting-started" / "local.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

NOTEBOOK_FILTER = textwrap.dedent("""
    import pyarrow.compute as pc

    def first_two_feeds(batch):  # defined in the notebook, run by the pool's workers
        return pc.less(batch.column("id"), 20_000)

    kept = (shardwise.read_jsonl("local-start/raw/")
            .filter(first_two_feeds, reason="third feed")
            .write_parquet("local-start/two-feeds/")
            .run())
    print("kept", kept.rows_out)
""")

START_METHODS = textwrap.dedent("""
    import numpy as np

    def epoch_ids(context):
        d = shardwise.StreamingDataset("local-start/clean/", batch_size=128, seed=0,
                                       columns=["id"], batch_format="numpy")
        d.set_epoch(1)
        loader = DataLoader(d, batch_size=None, num_workers=2, multiprocessing_context=context)
        return np.concatenate([batch["id"] for batch in loader])

    forked = epoch_ids(None)
    print("same epoch on spawn, forkserver:",
          [bool((epoch_ids(c) == forked).all()) for c in ("spawn", "forkserver")])
""")


def _cells() -> list[str]:
    """The page's block cut into data, pipeline and streaming cells, then ours."""
    (block,) = BLOCK.findall(PAGE.read_text())
    data, rest = block.split("\nresult = (", 1)
    pipeline, loop = ("result = (" + rest).split("\nds = shardwise.StreamingDataset(", 1)
    loop = "ds = shardwise.StreamingDataset(" + loop
    return [data, pipeline, loop, loop, NOTEBOOK_FILTER, START_METHODS]


class _Outputs:
    """What the kernel sent for one cell: stdout, stderr (with displayed text), errors."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.errors: list[str] = []

    def __call__(self, msg: dict[str, Any]) -> None:
        kind, content = msg.get("msg_type"), msg.get("content", {})
        if kind == "stream":
            (self.stdout if content.get("name") == "stdout" else self.stderr).append(
                str(content.get("text", ""))
            )
        elif kind in ("display_data", "update_display_data"):  # a widget bar, if any
            self.stderr.append(str(content.get("data", {}).get("text/plain", "")))
        elif kind == "error":
            self.errors.append(f"{content.get('ename')}: {content.get('evalue')}")


def _run_cells(cells: list[str], cwd: Path) -> list[_Outputs]:
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH", "")) if p)
    km, kc = start_new_kernel(kernel_name="python3", env=env, cwd=str(cwd))
    outs = []
    try:
        for cell in cells:
            out = _Outputs()
            reply = kc.execute_interactive(cell, timeout=120, output_hook=out)
            outs.append(out)
            assert reply["content"]["status"] == "ok", (cell, out.errors, "".join(out.stderr))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return outs


@pytest.mark.engine
def test_getting_started_in_a_jupyter_kernel(tmp_path: Path) -> None:
    data, pipeline, loop, again, notebook_filter, start_methods = _run_cells(_cells(), tmp_path)
    assert "rows out" in "".join(pipeline.stdout)
    bars = "".join(pipeline.stderr)
    assert "stage 1/2" in bars and "stage 2/2" in bars, bars
    for cell in (loop, again):  # the loop cell, and the same cell run once more
        assert "".join(cell.stdout).splitlines() == [
            "epoch 0: 6912 samples in batches of 128",
            "epoch 1: 6912 samples in batches of 128",
        ]
    assert "kept 6000" in "".join(notebook_filter.stdout)
    assert "same epoch on spawn, forkserver: [True, True]" in "".join(start_methods.stdout)
    for cell in (data, pipeline, loop, again, notebook_filter, start_methods):
        err = "".join(cell.stderr)
        assert "Warning" not in err and "Traceback" not in err, err
    assert (tmp_path / "local-start" / "loader_state.pt").exists()
