"""A pipeline from and to S3 (SeaweedFS) under the commit protocol: temporary keys, copy,
manifest last; the driver SIGKILLed mid-run, then a rerun skips the committed tasks and
writes the bytes a local run writes. Endpoint and credentials come from the AWS variables."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _pipeline_common import build, make_input
from _s3server import aws_env, upload
from _s3server import published_parts as parts

import shardwise
from shardwise import StorageError

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SCRIPT = Path(__file__).parent.parent / "support" / "_s3_pipeline_run.py"


def _task_manifests(fs: Any, manifests: str) -> list[str]:
    """The tasks' committed manifests (``task-NNNNN.json``), not a manifest still being
    written under its temporary name, which a listing may show for a moment."""
    if not fs.exists(manifests):
        return []
    return [p for p in fs.ls(manifests) if re.fullmatch(r"task-\d+\.json", p.rsplit("/", 1)[-1])]


def test_killed_s3_run_then_rerun_is_identical_to_a_local_run(
    tmp_path: Path, s3_server: dict[str, Any], bucket: tuple[str, Any]
) -> None:
    name, fs = bucket
    src = make_input(tmp_path / "in")
    upload(fs, src, f"{name}/in")
    ref = tmp_path / "ref"
    build(str(src), str(ref), slow=True).run(backend="sequential", progress=False)
    expected = {p.name: p.read_bytes() for p in sorted(ref.glob("part-*.parquet"))}
    out = f"s3://{name}/out"
    env = aws_env(s3_server)
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), f"s3://{name}/in/", out, "sequential", "slow"], env=env
    )
    deadline = time.monotonic() + 180
    manifests = f"{name}/out/_work/out/_manifests"
    while time.monotonic() < deadline and proc.poll() is None:
        fs.invalidate_cache()
        if len(_task_manifests(fs, manifests)) >= 3:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    fs.invalidate_cache()
    committed = len(_task_manifests(fs, manifests))
    # cut short: nothing is where readers look, and shardwise refuses the unfinished output
    assert parts(fs, f"{name}/out") == {} and not fs.exists(f"{name}/out/_manifest.json")
    with pytest.raises(StorageError, match=f"{out} is the output of an unfinished shardwise run"):
        shardwise.index_dataset(out, storage_options=s3_server["storage_options"], progress=False)
    rerun = subprocess.run(
        [sys.executable, str(SCRIPT), f"s3://{name}/in/", out, "local", "slow"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    skipped = int(rerun.stdout.split("skipped=")[1].split()[0])
    assert skipped >= committed >= 3
    fs.invalidate_cache()
    assert parts(fs, f"{name}/out") == expected
    assert fs.exists(f"{name}/out/_manifest.json")
    assert not [p for p in fs.find(f"{name}/out") if "/_work/" in p or "/_tmp." in p]
    index = shardwise.index_dataset(
        out, storage_options=s3_server["storage_options"], progress=False
    )
    assert index.num_samples == shardwise.index_dataset(str(ref), progress=False).num_samples
