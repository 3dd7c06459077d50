"""Checks shared by the framework tests: what each rank trained on, step by step.

A run's record is, per rank, a list of ``[epoch, ids]`` (one entry per training step)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

Record = list[list[Any]]  # per step: [epoch, [ids]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: int = 400, cwd: Path | None = None
) -> str:
    """Run a script with the venv's Python; its output, failing the test on an error."""
    base = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    return launch([[sys.executable, *args]], [base | (env or {})], timeout, cwd)[0]


def launch(
    commands: list[list[str]],
    envs: list[dict[str, str]],
    timeout: int = 400,
    cwd: Path | None = None,
) -> list[str]:
    """Run ``commands`` side by side (each with its ``envs``); their stdout, failing the
    test unless every one exits 0 within ``timeout`` seconds.

    A run that hangs because a DataLoader worker never left ``os.fork()`` is run once more:
    that is CPython 3.11.7's gh-112275 (a child forked while a thread of the parent, here
    one of torch's gloo threads, held the runtime's HEAD lock waits for it forever; fixed
    in later releases), named in ``docs/frameworks/pytorch.md``. Any other hang fails, and
    every process the run started is killed either way (no port stays taken)."""
    for attempt in (1, 2):
        with contextlib.ExitStack() as files:
            logs = [(_temp(files), _temp(files)) for _ in commands]
            procs = [
                subprocess.Popen(c, env=e, cwd=cwd, stdout=o, stderr=r, text=True)
                for c, e, (o, r) in zip(commands, envs, logs)
            ]
            hung = _wait(procs, timeout)
            outs = [(o.seek(0), o.read(), r.seek(0), r.read()) for o, r in logs]
        if hung is not None and hung and attempt == 1:
            print(f"pids {hung} hung in os.fork (CPython gh-112275): run again", file=sys.stderr)
            continue
        tails = "\n".join(out[-4000:] + err[-6000:] for _, out, _, err in outs)
        assert hung is None, f"timed out after {timeout} s:\n{tails}"
        assert all(p.returncode == 0 for p in procs), tails
        return [out for _, out, _, _ in outs]
    raise AssertionError("unreachable")


def _temp(files: contextlib.ExitStack) -> IO[str]:
    return files.enter_context(tempfile.TemporaryFile("w+"))


def _wait(procs: list[subprocess.Popen[str]], timeout: float) -> list[int] | None:
    """Wait for ``procs``: None when all ended in time; else kill them and every process
    under them, and return those that were stuck in ``os.fork``."""
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(max(0.0, deadline - time.monotonic()))
        return None
    except subprocess.TimeoutExpired:
        tree = _descendants([p.pid for p in procs])
        hung = _stuck_in_fork(tree)
        for pid in tree:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for p in procs:
            p.wait()
        _until_gone(tree)
        return hung


def _until_gone(pids: list[int], seconds: float = 30.0) -> None:
    """Wait until none of ``pids`` runs any more (a kill takes effect when the process
    is next scheduled; one whose parent died stays a zombie until it is reaped)."""
    deadline = time.monotonic() + seconds
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _descendants(roots: list[int]) -> list[int]:
    """``roots`` and every process under them (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(roots)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def _stuck_in_fork(pids: list[int]) -> list[int]:
    """The processes among ``pids`` whose thread is still inside ``os.fork`` as
    multiprocessing's ``Popen`` calls it (their Python stacks, by py-spy)."""
    spy = Path(sys.executable).with_name("py-spy")
    if not spy.exists():
        return []
    stuck = []
    for pid in pids:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            dump = subprocess.run(
                [str(spy), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
            ).stdout
            if re.search(r"^\s+(Popen\.)?_launch \(.*popen_fork\.py", dump, re.M):
                stuck.append(pid)
    return stuck


def torchrun(script: str, args: list[str], nproc: int = 2, timeout: int = 400) -> str:
    """Run ``script`` on ``nproc`` local ranks with torchrun (gloo on 127.0.0.1)."""
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return run(
        ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *rdzv, script, *args],
        timeout=timeout,
    )


def load(out: Path, tag: str, ranks: int = 2) -> list[Record]:
    return [json.loads((out / f"{tag}-{r}.json").read_text()) for r in range(ranks)]


def epochs_of(records: list[Record]) -> dict[int, list[list[int]]]:
    """Per epoch, per rank: the ids trained on in order."""
    out: dict[int, list[list[int]]] = {}
    for r, rec in enumerate(records):
        for epoch, ids in rec:
            out.setdefault(int(epoch), [[] for _ in records])[r].extend(int(i) for i in ids)
    return out


@contextlib.contextmanager
def _named(what: object) -> Iterator[None]:
    """A failed check's message starts with ``what`` (the run it checks), where given."""
    try:
        yield
    except AssertionError as e:
        if what is None:
            raise
        raise AssertionError(f"{what}: {e}") from e


def check_exact(
    records: list[Record], rows: int, epochs: int, slack: int, what: object = None
) -> list[list[int]]:
    """Every epoch: equal steps on every rank, no sample twice, at most ``slack`` left out
    (the documented remainder); epochs in different orders. Returns each epoch's ids."""
    with _named(what):
        return _check_exact(records, rows, epochs, slack)


def _check_exact(records: list[Record], rows: int, epochs: int, slack: int) -> list[list[int]]:
    by_epoch = epochs_of(records)
    assert sorted(by_epoch) == list(range(epochs)), sorted(by_epoch)
    steps = [[sum(1 for e, _ in rec if e == epoch) for rec in records] for epoch in by_epoch]
    assert all(len(set(s)) == 1 for s in steps), f"unequal steps per rank: {steps}"
    flat = []
    for epoch in range(epochs):
        ids = [i for rank in by_epoch[epoch] for i in rank]
        assert len(ids) == len(set(ids)), f"epoch {epoch}: {len(ids) - len(set(ids))} repeats"
        assert set(ids) <= set(range(rows)) and rows - len(ids) <= slack, (epoch, len(ids))
        flat.append(ids)
    assert all(a != b for a, b in zip(flat, flat[1:])), "an epoch repeated the last one's order"
    return flat


def check_resume(
    full: list[Record], resumed: list[Record], at_step: int, what: object = None
) -> None:
    """The resumed run trains on exactly what the full run trained on after ``at_step``."""
    with _named(what):
        for f, r in zip(full, resumed):
            assert [[e, list(i)] for e, i in f[at_step:]] == [[e, list(i)] for e, i in r]


def check_modes(
    launch: Callable[[list[str]], object],
    data: str,
    out: Path,
    modes: list[str],
    formats: list[str],
    rows: int,
) -> None:
    """A script that trains every mode and format in turn in one pair of processes, launched
    as ``launch([DATA, OUT, MODES, FORMATS, EPOCHS])`` and then with ``resume``: each mode and
    format gives exact epochs, and its resume from 7 steps into epoch 1 continues exactly."""
    args = [data, str(out), ",".join(modes), ",".join(formats), "2"]
    launch(args)
    full = {(m, f): load(out / m / f, m) for m in modes for f in formats}
    for what, seen in full.items():
        check_exact(seen, rows, epochs=2, slack=3, what=what)
    launch([*args, "resume"])
    for (m, f), seen in full.items():
        check_resume(seen, load(out / m / f, "resumed"), 27, what=(m, f))
