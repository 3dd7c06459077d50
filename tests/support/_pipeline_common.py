"""The pipeline and input shared by the pipeline tests."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from shardwise.pipeline import Pipeline, read_jsonl


def make_input(root: Path, files: int = 4, rows: int = 1500, bad_lines: bool = False) -> Path:
    rng = random.Random(0)
    words = [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "zeta",
        "eta",
        "theta",
        "iota",
        "kappa",
        "lambda",
        "mu",
    ]
    root.mkdir(parents=True, exist_ok=True)
    n = 0
    for f in range(files):
        with open(root / f"in-{f}.jsonl", "wb") as out:
            for i in range(rows):
                text = " ".join(rng.choices(words, k=rng.randint(8, 40)))
                if i % 13 == 0:
                    text = "tiny text"
                if i % 97 == 0:
                    text += " see https://example.org/page"
                if i % 50 == 0:
                    text = "duplicate document number seven with SAME   content"
                out.write(json.dumps({"id": n, "text": text}).encode() + b"\n")
                if bad_lines and i in (10, 700):
                    out.write(b'{"id": oops}\n' if i == 10 else b'{"id": 1, "text": "\xff\xfe"}\n')
                n += 1
    return root


def _slow(batch: Any) -> Any:
    time.sleep(0.4)
    return batch


def note_node(batch: Any, notes_dir: str) -> Any:
    """Leave a file naming the Ray node this batch ran on (the batch is unchanged)."""
    import os
    import uuid

    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else "driver"
    with open(os.path.join(notes_dir, f"{node}.{uuid.uuid4().hex}"), "w"):
        pass
    return batch


def build(
    src: str, out: str, slow: bool = False, on_error: str = "raise", notes_dir: str | None = None
) -> Pipeline:
    p = read_jsonl(src, task_bytes=40_000, on_error=on_error)
    if slow:
        p = p.map(_slow)
    if notes_dir:
        p = p.map(note_node, notes_dir=notes_dir)
    return (
        p.apply("normalize_text", column="text", lowercase=True)
        .apply("strip_urls", column="text")
        .apply("word_count_filter", column="text", min=3)
        .dedup(method="exact", column="text")
        .apply("length_filter", column="text", max=200)
        .write_parquet(out, target_shard_bytes=20_000, row_group_rows=500)
    )
