"""Functions defined in ``__main__`` run on every backend, however Python was started:
a script with or without an ``if __name__ == "__main__":`` guard, ``python -c``, stdin,
and a Jupyter kernel. Each case is a real subprocess (or kernel)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

# uses a lambda, a function and a class defined in __main__, and a closure over a local,
# also as the items mapped
BODY = textwrap.dedent("""
    import shardwise
    from shardwise import parallel_map, parallel_backend

    def longish(x):
        return len(str(x)) * x

    class Box:
        def __init__(self, v):
            self.v = v

    def check(backend, **options):
        offset = 7
        with parallel_backend(backend, n_jobs=2, **options):
            a = sum(parallel_map(lambda x: x * x, range(300), progress=False))
            b = sum(parallel_map(longish, range(300), progress=False))
            boxes = parallel_map(lambda x: Box(x + offset), range(50), progress=False)
            c = sum(box.v for box in boxes)
            # items naming __main__ (as a pipeline's tasks carry its functions): by value
            d = sum(parallel_map(lambda box: box.v, [Box(i) for i in range(50)], progress=False))
            e = sum(parallel_map(lambda f: f(3), [longish] * 20, progress=False))
        assert (a, b, c, d, e) == (8955050, 129555, 1575, 1225, 60), (backend, a, b, c, d, e)
        print("ok", backend, flush=True)
""")


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH", "")) if p)
    # Ray's socket paths must stay short: its temp dir goes directly under /tmp
    ray_tmp = Path("/tmp") / f"rt{abs(hash(str(tmp_path))) % 10**8}"
    env.update({"RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": str(ray_tmp), "PYTHONUNBUFFERED": "1"})
    return env


def _calls(backends: list[str]) -> str:
    return "\n".join(f"check({b!r})" for b in backends) + "\n"


def _run(
    cmd: list[str], tmp_path: Path, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd,
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return proc


LIGHT = ["local", "thread", "sequential", "joblib"]


@pytest.mark.parametrize("mode", ["unguarded", "guarded", "-c", "stdin"])
def test_main_functions_on_in_machine_backends(mode: str, tmp_path: Path) -> None:
    code = BODY + _calls(LIGHT)
    if mode == "guarded":
        code = BODY + 'if __name__ == "__main__":\n' + textwrap.indent(_calls(LIGHT), "    ")
    if mode in ("unguarded", "guarded"):
        (tmp_path / "job.py").write_text(code)
        proc = _run([sys.executable, "job.py"], tmp_path)
    elif mode == "-c":
        proc = _run([sys.executable, "-c", code], tmp_path)
    else:
        proc = _run([sys.executable, "-"], tmp_path, stdin=code)
    assert proc.stdout.split("\n").count("ok local") == 1  # the script did not run again in workers
    assert [line for line in proc.stdout.splitlines() if line.startswith("ok")] == [
        f"ok {b}" for b in LIGHT
    ]


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["dask", "spark", "ray"])
def test_main_functions_on_engines_from_an_unguarded_script(backend: str, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(BODY + _calls([backend]))
    proc = _run([sys.executable, "job.py"], tmp_path)
    assert f"ok {backend}" in proc.stdout


@pytest.mark.engine
def test_main_functions_in_a_jupyter_kernel(tmp_path: Path) -> None:
    from jupyter_client.manager import start_new_kernel

    os.environ.setdefault("JUPYTER_PLATFORM_DIRS", "1")
    km, kc = start_new_kernel(kernel_name="python3", env=_env(tmp_path), cwd=str(tmp_path))
    try:
        out: list[str] = []

        def keep(msg: dict[str, object]) -> None:
            content = msg.get("content", {})
            if isinstance(content, dict):
                if msg.get("msg_type") == "stream" and content.get("name") == "stdout":
                    out.append(str(content.get("text", "")))
                if msg.get("msg_type") == "error":
                    out.append("ERROR " + str(content.get("evalue")))

        for cell in (BODY, _calls(["local", "dask"])):
            reply = kc.execute_interactive(cell, timeout=240, output_hook=keep)
            assert reply["content"]["status"] == "ok", "".join(out)
        assert "ok local" in "".join(out) and "ok dask" in "".join(out)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _failing_map(
    backend: str, n: int, env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    """A parallel_map in a fresh interpreter that is expected to fail with exit code 1."""
    code = (
        f"from shardwise import parallel_map\nparallel_map(abs, range({n}), progress=False, "
        f"backend={backend!r})\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    return proc


def test_a_worker_that_cannot_start_fails_once_with_its_stderr(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import os, sys\nif os.environ.get('SHARDWISE_LOCAL_WORKER'):\n"
        "    sys.stderr.write('cannot start: no GPU driver here\\n')\n"
        "    sys.stderr.flush()\n    os._exit(3)\n"
    )
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = _failing_map("local", 1000, env, tmp_path)
    assert "WorkerStartError" in proc.stderr and "exit code 3" in proc.stderr
    assert "no GPU driver here" in proc.stderr
    raised = [
        line
        for line in proc.stderr.splitlines()
        if line.endswith(
            "WorkerStartError: a local worker "
            "process could not start (exit code 3); "
            "its last stderr lines:"
        )
    ]
    assert len(raised) == 1 and "worker lost" not in proc.stderr


@pytest.mark.engine
@pytest.mark.parametrize("java_home", [None, "/nonexistent/jdk"])
def test_spark_without_java_says_what_to_install(java_home: str | None, tmp_path: Path) -> None:
    env = _env(tmp_path)
    env["PATH"] = str(tmp_path)  # no java anywhere
    env.pop("JAVA_HOME", None)
    if java_home:
        env["JAVA_HOME"] = java_home
    proc = _failing_map("spark", 10, env, tmp_path)
    assert "MissingJavaError" in proc.stderr and "needs a Java runtime (JDK 17)" in proc.stderr
    assert "JAVA_HOME" in proc.stderr
