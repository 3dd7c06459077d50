"""Progress bars in a Jupyter kernel: tqdm's notebook bar where ipywidgets is installed,
else the text bar, silently (``tqdm.auto`` alone warns "IProgress not found. Please update
jupyter and ipywidgets" on a run's first bar). Each case is a fresh interpreter, as tqdm
chooses its bar once, at import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

# what tqdm looks at to tell a Jupyter kernel, without starting one; ipywidgets missing
KERNEL = textwrap.dedent("""
    import sys, types
    import IPython  # noqa: F401
    sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
    sys.modules["ipywidgets"] = None  # not installed
""")


def _stderr(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=SRC, TQDM_MININTERVAL="0")
    env.pop("SHARDWISE_PROGRESS", None)
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_a_kernel_without_ipywidgets_gets_text_bars_and_no_warning() -> None:
    err = _stderr(
        KERNEL
        + "from shardwise import parallel_map\n"
        + "parallel_map(abs, range(7), backend='sequential', desc='squares')\n"
    )
    assert "squares: 100%" in err and "7/7" in err
    assert "IProgress" not in err and "Warning" not in err, err


def test_the_index_bar_in_such_a_kernel(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i in range(3):
        pq.write_table(pa.table({"id": [i]}), tmp_path / f"part-{i}.parquet")
    err = _stderr(
        KERNEL + f"import shardwise\nshardwise.index_dataset({str(tmp_path)!r}, progress=True)\n"
    )
    assert "index files: 100%" in err and "3/3" in err
    assert "IProgress" not in err and "Warning" not in err, err
