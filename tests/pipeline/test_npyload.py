"""The pipeline parses ``.npy`` headers one thread at a time: numpy parses them with
``ast.literal_eval``, and CPython 3.11's AST conversion fails now and then when two threads
convert at once (``SystemError: AST constructor recursion depth mismatch``, seen in a dedup
run on the thread backend). Overlapping parses are made certain here by a parse that
lingers; the run must never have two at once, and must give the local backend's rows."""

from __future__ import annotations

import ast
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from shardwise.pipeline import read_jsonl


class _Overlaps:
    """``ast.literal_eval`` that lingers and counts how many threads are inside at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inside = self.most = self.calls = 0
        self.lock = threading.Lock()
        original = ast.literal_eval

        def lingering(node_or_string: Any) -> Any:
            with self.lock:
                self.inside += 1
                self.calls += 1
                self.most = max(self.most, self.inside)
            try:
                time.sleep(0.005)
                return original(node_or_string)
            finally:
                with self.lock:
                    self.inside -= 1

        monkeypatch.setattr(ast, "literal_eval", lingering)


def _corpus(root: Path) -> Path:
    root.mkdir()
    words = [f"w{i}" for i in range(400)]
    for part in range(4):
        with open(root / f"p{part}.jsonl", "w") as f:
            for j in range(150):
                k = part * 150 + j
                text = " ".join(words[(k * 7 + i) % 400] for i in range(60))
                if k % 10 == 0:  # a near copy of the document before it
                    text = " ".join(words[((k - 1) * 7 + i) % 400] for i in range(58))
                f.write(json.dumps({"id": k, "text": text}) + "\n")
    return root


def _kept(src: Path, out: Path, backend: str) -> list[int]:
    (
        read_jsonl(str(src), task_bytes=20_000)
        .dedup("minhash", column="text")
        .write_parquet(str(out))
        .run(backend=backend, progress=False)
    )
    return sorted(pq.read_table(out, columns=["id"]).column("id").to_pylist())


def test_thread_backend_parses_npy_headers_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _corpus(tmp_path / "in")
    local = _kept(src, tmp_path / "local", "local")
    overlaps = _Overlaps(monkeypatch)
    threaded = _kept(src, tmp_path / "threads", "thread")
    assert overlaps.calls > 4  # the run read many tasks' .npy files on its threads
    assert overlaps.most == 1
    assert threaded == local and len(local) < 600  # the near copies went
