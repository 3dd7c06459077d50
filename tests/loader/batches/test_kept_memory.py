"""Once streaming made jemalloc Arrow's allocator, the threads started after it (the
loader's readers) reuse the memory they free instead of having the kernel map it again,
and it goes back to the system once unused for ``KEEP_FREED_MS``."""

from __future__ import annotations

import os
import subprocess
import sys

# on a thread started after the switch, as the loader's are: the page faults of writing
# 48 MB of Arrow memory; of writing as much again once the first is freed and 1.5 s (longer
# than Arrow's own 1 s) have passed; and, after the time the loader asks for has passed too,
# the process's resident memory against what it held with the buffer (MB)
ROUNDS = """
import resource, sys, threading, time
import numpy as np
import pyarrow as pa
from shardwise.loader.batches import memory

memory.KEEP_FREED_MS = 3000
memory.prefer_jemalloc()

def touch():
    buf = pa.allocate_buffer(48 << 20)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    np.frombuffer(buf, dtype=np.uint8)[::4096] = 1
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024

def rounds(out):
    out.append(touch())
    held = rss()
    time.sleep(1.5)
    out.append(touch())
    time.sleep(8)
    out.append(held - rss())

out = []
t = threading.Thread(target=rounds, args=(out,))
t.start()
t.join()
print(pa.default_memory_pool().backend_name, *out)
"""


def _rounds(env_pool: str | None) -> tuple[str, list[int]]:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run(
        [sys.executable, "-c", ROUNDS], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    backend, *figures = out.stdout.split()
    return backend, [int(f) for f in figures]


def test_the_loaders_threads_reuse_what_they_free_then_give_it_back() -> None:
    backend, (first, again, given_back) = _rounds(None)
    assert backend == "jemalloc"
    assert first > 8000  # 48 MB of new memory: 12,288 pages
    assert again < first // 10  # the freed memory, kept past Arrow's own time, served it
    assert given_back > 24  # unused for longer than the loader's time: back to the system


def test_an_allocator_the_environment_chose_keeps_its_own_settings() -> None:
    """jemalloc chosen with ``ARROW_DEFAULT_MEMORY_POOL``: Arrow's own decay time applies,
    so the freed memory has gone back to the system and is mapped again."""
    backend, (first, again, _) = _rounds("jemalloc")
    assert backend == "jemalloc"
    assert first > 8000
    assert again > first // 2
