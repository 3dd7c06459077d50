"""Bounded memory: a 1 GB JSONL file is indexed and fully read under 300 MB peak RSS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_one_gigabyte_jsonl_indexed_and_read_in_bounded_memory(tmp_path: Path) -> None:
    script = os.path.join(os.path.dirname(__file__), "..", "support", "_memcheck.py")
    env = dict(os.environ, SHARDWISE_CACHE_DIR=str(tmp_path / "cache"))
    # Linux keeps ru_maxrss across fork+exec, so a child forked straight from this (large)
    # pytest process would report pytest's size; a shell in between gives a fresh count.
    cmd = f'"{sys.executable}" "{script}" "{tmp_path / "big.jsonl"}" 1000000000; exit $?'
    out = subprocess.run(
        ["/bin/sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=900, check=True
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    print(result)
    assert result["bytes"] >= 1_000_000_000
    assert result["indexed"] == result["rows"] == result["read"]
    assert result["ids_ok"]
    assert result["units"] >= 25  # cut into byte ranges, not read whole
    assert result["rss_before_index_mib"] < 100, result  # the count is this process's own
    assert result["peak_rss_mib"] < 300, result
