"""Once streaming made jemalloc Arrow's allocator, the threads started after it (the
loader's readers) reuse the memory they free instead of having the kernel map it again,
and it still goes back to the system after Arrow's own decay time."""

from __future__ import annotations

from _pyscript import run_script

# on a thread started after the switch, as the loader's are: the page faults of writing
# 48 MB of Arrow memory, four times, each buffer freed 50 ms before the next; then, 3 s
# later, how much less memory the process holds than with the buffer (MB)
ROUNDS = """
import resource, threading, time
import numpy as np
import pyarrow as pa
from shardwise.loader.batches.memory import prefer_jemalloc

prefer_jemalloc()

def touch():
    buf = pa.allocate_buffer(48 << 20)
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    np.frombuffer(buf, dtype=np.uint8)[::4096] = 1
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before

def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024

def rounds(out):
    for _ in range(4):
        out.append(touch())
        held = rss()
        time.sleep(0.05)
    time.sleep(3)
    out.append(held - rss())

out = []
t = threading.Thread(target=rounds, args=(out,))
t.start()
t.join()
print(pa.default_memory_pool().backend_name, *out)
"""


def _rounds(env_pool: str | None) -> tuple[str, list[int], int]:
    out = run_script(ROUNDS, name="ARROW_DEFAULT_MEMORY_POOL", value=env_pool)
    backend, *figures = out.split()
    *faults, given_back = (int(f) for f in figures)
    return backend, faults, given_back


def test_the_loaders_threads_reuse_what_they_free_and_give_it_back_later() -> None:
    backend, (first, *later), given_back = _rounds(None)
    assert backend == "jemalloc"
    assert first > 8000  # 48 MB of new memory: 12,288 pages
    assert sum(later) < first // 10  # the freed buffer served the next ones
    assert given_back > 24  # unused for longer than Arrow's decay time: back to the system


def test_an_allocator_the_environment_chose_is_left_as_it_is() -> None:
    """jemalloc chosen with ``ARROW_DEFAULT_MEMORY_POOL``: nothing is changed, and a thread
    that is the first to allocate gets the arena jemalloc made at start-up, which gave each
    freed buffer back at once, so every round maps its memory again (what the loader's
    threads did before)."""
    backend, (first, *later), _ = _rounds("jemalloc")
    assert backend == "jemalloc"
    assert first > 8000
    assert min(later) > first // 2
