"""The pool's processes keep freed memory between tasks (glibc), not fault it in again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import shardwise
from shardwise.parallel._malloc import keep_freed_memory

GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None

# page faults of five rounds of a few arrays of 6 MB made and freed, after a warm-up round
_FAULTS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from shardwise.parallel._malloc import keep_freed_memory
    assert keep_freed_memory()
np._core.multiarray._set_madvise_hugepage(False)  # count 4 KiB pages, as on a kernel without THP
def round_():
    a = np.ones(750_000, np.uint64); b = a + 1; c = b * a; del a, b, c
round_()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _faults(mode: str) -> int:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(shardwise.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"):
        env.pop(name, None)
    out = subprocess.run(
        [sys.executable, "-c", _FAULTS, mode], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(
    not GLIBC, reason="the thresholds are glibc's; elsewhere keep_freed_memory does nothing"
)
def test_freed_arrays_are_reused_without_page_faults() -> None:
    # three 6 MB arrays per round: ~4,400 pages faulted in every round by default
    # (glibc trims them off the heap), a handful once freed memory is kept
    default, kept = _faults("default"), _faults("keep")
    assert default > 5 * 3 * 1000
    assert kept < 500


def test_keep_freed_memory_is_once_per_process_and_says_whether_it_applied() -> None:
    first = keep_freed_memory()
    assert first is GLIBC
    assert keep_freed_memory() is first


# page faults of 200 values of 100 KB made as Python bytes (a batch of images), after the
# heap was warmed for them or not
_WARM = """
import resource, sys
from shardwise.parallel._malloc import keep_freed_memory, warm_heap
assert keep_freed_memory()
if sys.argv[1] == "warm":
    thread = warm_heap(24 << 20)
    assert thread is not None
    thread.join()
    assert warm_heap(16 << 20) is None  # warmed for as much already
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
values = [b"\\1" * 100_000 for _ in range(200)]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(not GLIBC, reason="warm_heap needs glibc's thresholds (keep_freed_memory)")
def test_a_warmed_heap_takes_a_batch_of_wide_values_without_page_faults() -> None:
    def faults(mode: str) -> int:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(Path(shardwise.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
            ),
        }
        out = subprocess.run(
            [sys.executable, "-c", _WARM, mode], env=env, capture_output=True, text=True, check=True
        )
        return int(out.stdout)

    cold, warm = faults("cold"), faults("warm")
    assert cold > 4000  # 200 x 25 pages, each faulted in as it is written
    assert warm < 300
