"""A Python script run in a fresh interpreter (``python -c``), with one environment variable
set to a value or left out; what it prints is returned, and a failure shows its stderr."""

from __future__ import annotations

import os
import subprocess
import sys


def run_script(script: str, *args: str, name: str, value: str | None = None) -> str:
    """The output of ``script`` run with ``args``, and ``name`` set to ``value`` in its
    environment (None: not set, even where this process has it)."""
    env = {k: v for k, v in os.environ.items() if k != name}
    if value is not None:
        env[name] = value
    out = subprocess.run(
        [sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
