"""A two-node Ray cluster on this machine (``ray start --head`` plus a second ``ray start
--address=...``, each with its own temp dir) runs a pipeline from and to S3 (SeaweedFS)
from a driver that connects with ``ray.init(address=...)``; its tasks land on both nodes,
and SIGKILL of the second node's raylet in the middle of the run is survived with the bytes
of a local run. Only the processes this test started are stopped."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from _pipeline_common import build, make_input
from _s3server import aws_env, upload
from _s3server import published_parts as parts

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SUPPORT = Path(__file__).parents[2] / "support"
RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str], temp_dir: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``ray start ... --block`` in a session of its own: it owns the node's processes."""
    log = open(os.path.join(temp_dir, "start.log"), "ab")  # noqa: SIM115 - lives as long as the node
    return subprocess.Popen(
        [
            RAY,
            "start",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={temp_dir}",
            "--num-cpus=1",
            "--object-store-memory=100000000",
            "--disable-usage-stats",
            *args,
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a node this test started: its ``ray start`` process and everything under it."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for p in [proc, *children]:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=30)


def _raylet(proc: subprocess.Popen[bytes]) -> int:
    return next(
        c.pid for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "raylet"
    )


def _nodes(notes: Path) -> set[str]:
    return {p.name.split(".")[0] for p in notes.iterdir()}


@pytest.fixture
def two_nodes(s3_server: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes hold the AWS variables, as a cluster's machines do: its workers read and
    write the bucket with the credentials of their node."""
    temp = [tempfile.mkdtemp(prefix="swrc", dir="/tmp") for _ in range(2)]
    env = {**aws_env(s3_server), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    port = _free_port()
    address = f"127.0.0.1:{port}"
    procs = [
        _start(
            ["--head", f"--port={port}", "--include-dashboard=false", '--resources={"head": 1}'],
            temp[0],
            env,
        )
    ]
    try:
        _wait_for_nodes(address, 1, env)
        procs.append(_start([f"--address={address}", '--resources={"second": 1}'], temp[1], env))
        _wait_for_nodes(address, 2, env)
        yield {"address": address, "head": procs[0], "second": procs[1], "env": env}
    finally:
        for proc in reversed(procs):
            _stop(proc)
        for t in temp:
            shutil.rmtree(t, ignore_errors=True)


def _wait_for_nodes(address: str, n: int, env: dict[str, str]) -> None:
    code = (
        "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
        "print(sum(1 for x in ray.nodes() if x['Alive']))"
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        out = subprocess.run(
            [sys.executable, "-c", code, address],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(n)]:
            return
        time.sleep(1)
    raise RuntimeError(f"the Ray cluster at {address} did not reach {n} nodes")


def test_two_node_ray_cluster_runs_an_s3_pipeline_and_survives_losing_a_node(
    two_nodes: dict[str, Any], tmp_path: Path, s3_server: dict[str, Any], bucket: tuple[str, Any]
) -> None:
    name, fs = bucket
    src = make_input(tmp_path / "in", files=6, rows=1000)
    upload(fs, src, f"{name}/in")
    ref = tmp_path / "ref"
    build(str(src), str(ref)).run(backend="sequential", progress=False)
    expected = {p.name: p.read_bytes() for p in sorted(ref.glob("part-*.parquet"))}
    notes = tmp_path / "notes"
    notes.mkdir()
    env = {**two_nodes["env"], "SHARDWISE_TEST_NOTES_DIR": str(notes)}
    out = f"s3://{name}/out"
    driver = subprocess.Popen(
        [
            sys.executable,
            str(SUPPORT / "_s3_pipeline_run.py"),
            f"s3://{name}/in/",
            out,
            f"ray://{two_nodes['address']}",
            "slow",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(_nodes(notes)) < 2 and time.monotonic() < deadline and driver.poll() is None:
            time.sleep(0.2)
        if driver.poll() is not None:
            pytest.fail(
                f"the driver exited with {driver.returncode}: {driver.stderr.read()[-4000:]}"
            )  # type: ignore[union-attr]
        assert len(_nodes(notes)) == 2, "tasks did not run on both nodes"
        assert driver.poll() is None, "the run ended before the node could be lost"
        os.kill(_raylet(two_nodes["second"]), signal.SIGKILL)  # the second node is gone mid-run
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    assert driver.returncode == 0, stderr[-4000:]
    assert "rows_out=" in stdout
    fs.invalidate_cache()
    assert parts(fs, f"{name}/out") == expected
    assert not [p for p in fs.find(f"{name}/out") if "/_work/" in p or "/_tmp." in p]
