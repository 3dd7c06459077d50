#!/usr/bin/env python
"""Where one ``concat`` epoch of ``TokenStream`` goes, phase by phase, against the memmap
loops of ``bench_tokens.py``: CPU seconds (the process's) and minor page faults of
opening (from the index's token layout when it has one), reading the documents' lengths
(which only fields other than ``input_ids`` need), reading every unit (a view of its
mapped file), laying units out as rows, building the batches (``input_ids`` alone in file
order and shuffled, then every field, shuffled), and of the two memmap loops (file order;
shuffled sequences). Each phase runs on the calling thread, one after the other, so the
figures add up; the stream itself reads units ahead on threads (and makes every-field
batches on a loader thread).

Run from the repository root after ``bench_tokens.py`` made its data::

    PYTHONPATH=src .venv/bin/python benchmarks/token_stream_phases.py [DATA]

``DATA`` defaults to ``benchmarks/.data/tokens-stream-f`` (10^8 tokens).
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEQ_LEN, BATCH = 2048, 8


def phase(name: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` and print its thread CPU seconds and minor page faults."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.process_time()
    out = fn()
    cpu = time.process_time() - t0
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(f"{name:44s} cpu {cpu:6.3f} s  minflt {faults:8d}", flush=True)
    return out


def main(data: Path) -> None:
    sys.path.insert(0, str(HERE))
    from adapters.tokens_systems import memmap_loop

    from shardwise.loader.tokens import TokenStream
    from shardwise.loader.tokens.mapped import OpenFiles
    from shardwise.plan import Topology
    from shardwise.plan.buffers import Buffers
    from shardwise.plan.concat_ids import ids_batches
    from shardwise.plan.concat_rows import take_window, unit_rows, window_batches

    shards = str(data / "shards")
    phase("open (index, token layout, plan counts)", lambda: TokenStream(shards, seq_len=SEQ_LEN))
    ds = phase("open again (warm)", lambda: TokenStream(shards, seq_len=SEQ_LEN))
    n = len(ds.docs)
    phase("document lengths (num_tokens, for fields)", lambda: ds.lengths)
    files, known = OpenFiles(), ds.plan()  # as a pass reads them: files kept open, lengths
    units = phase(
        "read every unit (map the token column)",
        lambda: [ds.units.read(u, known.unit_lengths(u), files) for u in range(n)],
    )
    laid = phase(
        "lay units out as rows (views, tails)",
        lambda: {u: unit_rows(t, o, SEQ_LEN, ds.pad_id) for u, (t, o) in enumerate(units)},
    )
    topology = Topology(1, 1, BATCH, True)
    pairs = ds.plan(topology).worker(0, 0).pairs()
    ordered = TokenStream(shards, seq_len=SEQ_LEN, shuffle=False).plan(topology)
    in_order = ordered.worker(0, 0).pairs()

    def ids(pairs: Any) -> int:  # the stream's input_ids-only batches, windows of 2^20 tokens
        size = 2**20 // SEQ_LEN
        return sum(
            b.size
            for lo in range(0, len(pairs), size)
            for b in ids_batches(pairs[lo : lo + size, 0], pairs[lo : lo + size, 1], laid, BATCH)
        )

    def build() -> int:  # every field, windows of 2^16 tokens
        tokens, buffers, size = 0, Buffers(), 2**16 // SEQ_LEN  # arrays reused, as the stream
        for lo in range(0, len(pairs), size):
            at = slice(lo, lo + size)
            u, k = pairs[at, 0], pairs[at, 1]
            window, starts = take_window(u, k, laid, SEQ_LEN, False, buffers)
            tokens += sum(b["input_ids"].size for b in window_batches(window, starts, BATCH))
        return tokens

    phase("build batches, input_ids only, file order", lambda: ids(in_order))
    phase("build batches, input_ids only, shuffled", lambda: ids(pairs))
    phase("build batches, every field, shuffled", build)
    kw = {"data": str(data), "seq_len": SEQ_LEN, "batch_size": BATCH}
    phase("memmap loop, file order", lambda: memmap_loop(**kw))
    phase("memmap loop, shuffled sequences", lambda: memmap_loop(**kw, shuffle=True))
    print(f"{int(ds.lengths.sum()):,} tokens in {n} units")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / ".data" / "tokens-stream-f")
