"""datatrove's ``DocumentTokenizer`` (its nanotron token files) over the same JSONL and
tokenizer, ``procs`` tasks on a ``LocalPipelineExecutor``. Runs in its own venv."""

from __future__ import annotations

import glob
import os
import time
from typing import Any

from harness.monitor import TreeMonitor

__all__ = ["tokenize"]


def tokenize(data: str, tokenizer: str, procs: int, tmp: str, **_: Any) -> dict[str, Any]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    pipeline = [
        JsonlReader(data, glob_pattern="text-*.jsonl"),
        DocumentTokenizer(
            output_folder=f"{tmp}/out",
            tokenizer_name_or_path=tokenizer,
            eos_token="<|endoftext|>",
            shuffle_documents=False,
        ),
    ]
    ex = LocalPipelineExecutor(pipeline, tasks=procs, workers=procs, logging_dir=f"{tmp}/logs")
    mon = TreeMonitor().start()
    t0 = time.perf_counter()
    ex.run()
    seconds = time.perf_counter() - t0
    mon.stop()
    size = sum(os.path.getsize(p) for p in glob.glob(f"{tmp}/out/**/*.ds", recursive=True))
    return {"seconds": seconds, "tokens": size // 2, "peak_rss_mb": mon.peak_rss_mb}
