#!/usr/bin/env python
"""Where the first epoch of a fresh process goes: wall, user and system CPU seconds and
minor page faults of each phase (torch's import, shardwise's, the dataset's construction,
the first batch, the rest of the epoch, the second epoch), or of the one-thread raw scan.

Run from the repository root, one fresh process per call::

    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py loader DIR [COLUMN ...]
    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py scan DIR [COLUMN ...]
    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py detail DIR [COLUMN ...]
    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py trace DIR [COLUMN ...]

Add ``--heads`` (anywhere) for ``first_window="heads"``, ``--whole`` for ``first_window=None``.

``DIR`` holds Parquet files; the CPU seconds are the whole process's (every thread).
``detail`` runs the loader's first epoch with its steps timed by the CPU time (and minor
page faults) of the thread that runs them (``time.thread_time``, ``RUSAGE_THREAD``):
reading and decoding units, writing them into the window, making pieces, cutting batches
on the training thread. ``trace`` prints the first batch's timeline: when each step up to
it started and ended (ms from the dataset's construction), on which thread, and that
thread's CPU time, minor page faults and voluntary context switches (the times it
blocked: on the GIL, a lock, I/O) during the step.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

_last: list[Any] = []
_options: dict[str, Any] = {}  # extra StreamingDataset arguments (--heads)


def mark(name: str) -> None:
    """Print the phase that ended now."""
    now = [time.perf_counter(), os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt]
    if _last:
        t, c, f = _last
        print(
            f"{name:34s} wall {now[0] - t:6.3f} s  user {now[1].user - c.user:6.3f} s  "
            f"sys {now[1].system - c.system:6.3f} s  minflt {now[2] - f:8d}",
            flush=True,
        )
    _last[:] = now


def scan(path: str, cols: list[str] | None) -> None:
    """``ParquetFile.iter_batches(65,536)`` on one thread, every column to numpy."""
    import glob

    import pyarrow.parquet as pq

    mark("import pyarrow.parquet")
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        for rb in pq.ParquetFile(f).iter_batches(65536, columns=cols, use_threads=False):
            for col in rb.columns:
                col.to_numpy(zero_copy_only=False)
    mark("raw scan epoch")


def loader(path: str, cols: list[str] | None) -> None:
    """The in-process numpy path, default settings, two epochs."""
    from shardwise.loader import StreamingDataset

    mark("import shardwise.loader")
    ds = StreamingDataset(
        path, batch_size=256, shuffle=True, seed=0, drop_last=True, batch_format="numpy",
        num_workers=None, progress=False, columns=cols, **_options,
    )  # fmt: skip
    mark(f"construct ({ds.index.num_units} units, interleave {ds.interleave})")
    it = iter(ds)
    rows = len(next(it)["id"])
    mark("first batch")
    rows += sum(len(b["id"]) for b in it)
    mark(f"rest of epoch 1 ({rows:,} rows)")
    ds.set_epoch(1)
    rows = sum(len(b["id"]) for b in ds)
    mark(f"epoch 2 ({rows:,} rows)")


_cpu: dict[str, float] = {}


_faults: dict[str, int] = {}


def _thread_faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _timed(name: str, fn: Any) -> Any:
    """``fn`` with the CPU time and minor page faults of the calling thread added to
    ``_cpu[name]`` and ``_faults[name]``."""

    def run(*args: Any, **kwargs: Any) -> Any:
        t, f = time.thread_time(), _thread_faults()
        try:
            return fn(*args, **kwargs)
        finally:
            _cpu[name] = _cpu.get(name, 0.0) + time.thread_time() - t
            _faults[name] = _faults.get(name, 0) + _thread_faults() - f

    return run


def detail(path: str, cols: list[str] | None) -> None:
    """The loader's first epoch, CPU s by step (the thread that ran it)."""
    from shardwise.loader import StreamingDataset
    from shardwise.loader.batches import arrival, piece_maker, reading

    read_units = reading.Reading.loader
    reading.Reading.loader = lambda self: _timed("read + decode units", read_units(self))  # type: ignore[method-assign]
    arrival.ArrivalWindow.add = _timed("write units into the window", arrival.ArrivalWindow.add)  # type: ignore[method-assign]
    maker = piece_maker.PieceMaker
    maker.made = _timed("make pieces (take, convert)", maker.made)  # type: ignore[method-assign]
    maker._objects = _timed("batch strings -> objects", maker._objects)  # type: ignore[method-assign]
    mark("import shardwise.loader")
    t0, f0 = time.thread_time(), _thread_faults()
    ds = StreamingDataset(
        path, batch_size=256, shuffle=True, seed=0, drop_last=True, batch_format="numpy",
        num_workers=None, progress=False, columns=cols, **_options,
    )  # fmt: skip
    rows = sum(len(b["id"]) for b in ds)
    _cpu["training thread (all of it)"] = time.thread_time() - t0
    _faults["training thread (all of it)"] = _thread_faults() - f0
    mark(f"epoch 1 ({rows:,} rows)")
    for name, cpu in _cpu.items():
        print(f"  {name:36s} {cpu:6.3f} CPU s  minflt {_faults[name]:8d}", flush=True)


_events: list[tuple[str, str, float, float, int]] = []
_t0: list[float] = [0.0]


def _process_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _waits() -> int:
    """The calling thread's voluntary context switches (it blocked: on a lock, the GIL,
    I/O)."""
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw


def _span(name: str, fn: Any) -> Any:
    """``fn`` with each call's start and end recorded in ``_events``."""
    import threading

    def run(*args: Any, **kwargs: Any) -> Any:
        t, f, cpu, w = time.perf_counter(), _thread_faults(), time.thread_time(), _waits()
        try:
            return fn(*args, **kwargs)
        finally:
            who = threading.current_thread().name.replace("shardwise-loader_", "pool")
            end, used = time.perf_counter() - _t0[0], time.thread_time() - cpu
            f, w = _thread_faults() - f, _waits() - w
            _events.append((name, who, t - _t0[0], end, f, used, w))

    return run


def _wrap_loader(cls: Any, name: str) -> None:
    """Record each call of the function ``cls.loader()`` returns."""
    made = cls.loader
    cls.loader = lambda self: _span(name, made(self))


def trace(path: str, cols: list[str] | None) -> None:
    """The first batch's timeline (see the module docstring)."""
    import shardwise.loader.batches.heads as heads
    import shardwise.loader.inprocess.threaded as threaded
    from shardwise.loader import StreamingDataset
    from shardwise.loader.batches import arrival, piece_maker, pieces, reading, windows
    from shardwise.loader.read import unit_heads

    mark("import shardwise.loader")
    _wrap_loader(reading.Reading, "read unit")
    _wrap_loader(heads.PartReading, "read part")
    if hasattr(unit_heads, "_read_head"):
        unit_heads._read_head = _span("  head decode", unit_heads._read_head)
    arrival.ArrivalWindow.add = _span("  window add", arrival.ArrivalWindow.add)  # type: ignore[method-assign]
    arrival.Filling.wait = _span("wait for window", arrival.Filling.wait)  # type: ignore[method-assign]
    piece_maker.PieceMaker.made = _span("make piece", piece_maker.PieceMaker.made)  # type: ignore[method-assign]
    threaded.plan_windows = _span("plan windows", threaded.plan_windows)
    if hasattr(pieces, "PlanWindows"):  # each window's order, worked out when first needed
        pieces.PlanWindows._order = _span("window order", pieces.PlanWindows._order)  # type: ignore[method-assign]
    threaded.WindowBuilder = _span("builder (pool start)", windows.WindowBuilder)
    _t0[0] = time.perf_counter()
    f0 = _process_faults()
    ds = _span("construct", StreamingDataset)(
        path, batch_size=256, shuffle=True, seed=0, drop_last=True, batch_format="numpy",
        num_workers=None, progress=False, columns=cols, **_options,
    )  # fmt: skip
    it = _span("iter()", iter)(ds)
    _span("next() -> first batch", next)(it)
    first = time.perf_counter() - _t0[0]
    faults = _process_faults() - f0
    for _ in it:
        pass
    mark(f"epoch 1 (blocks {getattr(ds, 'blocks', 1)}, {ds.index.num_units} units)")
    print(f"first batch at {first * 1e3:.1f} ms, {faults} minor faults")
    for name, who, t, end, f, cpu, w in sorted(_events, key=lambda e: e[2]):
        if t <= first:
            span = f"{t * 1e3:7.1f} -> {end * 1e3:7.1f} ms"
            print(f"  {span}  {name:26s} {who:12s} {cpu * 1e3:6.1f} ms CPU {f:7d} flt {w:4d} waits")


def main(argv: list[str]) -> int:
    if "--heads" in argv:
        argv = [a for a in argv if a != "--heads"]
        _options["first_window"] = "heads"
    if "--whole" in argv:
        argv = [a for a in argv if a != "--whole"]
        _options["first_window"] = None
    mark("start")
    import torch  # noqa: F401  (a training process has it)

    mark("import torch")
    print(f"load 1m {os.getloadavg()[0]:.2f}", flush=True)
    run = {"scan": scan, "loader": loader, "detail": detail, "trace": trace}[argv[0]]
    run(argv[1], argv[2:] or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
