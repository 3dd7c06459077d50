"""The framework tests' launcher: a run whose DataLoader worker hangs inside ``os.fork``
(CPython 3.11.7's gh-112275) is run again; any other hang or error fails the test; every
process a run started is gone after it."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from _fwcheck import launch, run, running

# the child of the first run waits inside the fork (an at-fork hook, as the HEAD lock does)
FORK_HANG = """
import multiprocessing as mp, os, sys, time
if not os.path.exists(sys.argv[1]):
    open(sys.argv[1], "w").close()
    os.register_at_fork(after_in_child=lambda: time.sleep(600))
if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=print, args=("child ran",))
    p.start()
    p.join()
    print("parent done", os.getpid(), flush=True)
"""


def test_a_run_hung_in_fork_runs_again(tmp_path: Path) -> None:
    script = tmp_path / "forks.py"
    script.write_text(textwrap.dedent(FORK_HANG))
    marker = tmp_path / "first-run"
    out = run([str(script), str(marker)], timeout=20)
    assert marker.exists() and out.splitlines()[0] == "child ran", out
    assert not running(int(out.split()[-1]))


def test_any_other_hang_or_error_fails_and_leaves_no_process(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    spawner = (
        "import subprocess, sys, time; "
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(600)"
    )
    with pytest.raises(AssertionError, match="timed out after 15 s"):
        run(["-c", spawner], timeout=15)
    assert not running(int(pidfile.read_text()))  # the grandchild killed
    env = dict(os.environ)
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        launch([[sys.executable, "-c", "print('ok')"], [sys.executable, "-c", "1/0"]], [env] * 2)
