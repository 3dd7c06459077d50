"""datatrove: its four MinHash stages, each a ``LocalPipelineExecutor``, JSONL in and out.

End to end like every row of the dedup benchmark: the timer covers all four stages, so
reading the JSONL input (its ``JsonlReader``, in the signature stage and again in the
filter stage, as its MinHash example does) and writing the kept documents (its
``JsonlWriter``, uncompressed JSONL: its own plain output) are timed; so is its exclusion
writer's JSONL of the removed documents, which the scoring reads (their ids and cluster
ids). Reading its output back for scoring is not timed.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

from adapters.versions import dist_version

__all__ = ["dedup"]


def _tokenizer() -> Any:
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SpaceTokenizer(WordTokenizer):
        """Whitespace words: the reference shingling (datatrove's default is NLTK's)."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]

    return SpaceTokenizer()


def _stages(data: Path, w: Path, cfg: dict[str, Any]) -> list[tuple[str, Any]]:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.text import TextNormConfig

    mc = MinhashConfig(
        n_grams=cfg["ngram"],
        num_buckets=cfg["bands"],
        hashes_per_bucket=cfg["rows"],
        norm_config=TextNormConfig(norm_numbers=False),
    )
    n_files = len(list((data / "docs").glob("*.jsonl")))
    common = {"workers": cfg["workers"], "start_method": "fork"}

    def reader() -> Any:
        return JsonlReader(
            str(data / "docs"), glob_pattern="*.jsonl", compression=None, doc_progress=False
        )

    def ex(pipeline: list[Any], tasks: int, log: str) -> Any:
        return LocalPipelineExecutor(
            pipeline=pipeline, tasks=tasks, logging_dir=str(w / "logs" / log), **common
        )

    removed_writer = JsonlWriter(
        str(w / "removed"), compression=None, output_filename="${rank}.jsonl"
    )
    return [
        (
            "signatures",
            ex(
                [
                    reader(),
                    MinhashDedupSignature(
                        output_folder=str(w / "sigs"), config=mc, language=_tokenizer()
                    ),
                ],
                n_files,
                "s1",
            ),
        ),
        (
            "buckets",
            ex(
                [
                    MinhashDedupBuckets(
                        input_folder=str(w / "sigs"), output_folder=str(w / "buckets"), config=mc
                    )
                ],
                mc.num_buckets,
                "s2",
            ),
        ),
        (
            "cluster",
            ex(
                [
                    MinhashDedupCluster(
                        input_folder=str(w / "buckets"),
                        output_folder=str(w / "remove"),
                        config=mc,
                        save_cluster_id=True,
                    )
                ],
                1,
                "s3",
            ),
        ),
        (
            "filter",
            ex(
                [
                    reader(),
                    MinhashDedupFilter(
                        input_folder=str(w / "remove"),
                        load_cluster_ids=True,
                        exclusion_writer=removed_writer,
                    ),
                    JsonlWriter(str(w / "out"), compression=None, output_filename="${rank}.jsonl"),
                ],
                n_files,
                "s4",
            ),
        ),
    ]


def _load(d: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for f in sorted(d.glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            rows.extend(json.loads(line) for line in fh)
    return rows


def _id(row: dict[str, Any]) -> int:
    """A written document's id: datatrove's writer leaves out falsy fields, so id 0 has none."""
    return int(row.get("id", 0))


def _pairs(kept_rows: list[dict[str, Any]], removed_rows: list[dict[str, Any]]) -> list[list[int]]:
    """(removed, kept) pairs from the cluster ids datatrove saves in the metadata."""
    root_of: dict[int, int] = {}
    for r in kept_rows:
        c = r.get("metadata", {}).get("minhash_cluster_id", -1)
        if c != -1:
            root_of[c] = _id(r)
    out = []
    for r in removed_rows:
        c = r.get("metadata", {}).get("minhash_cluster_id", -1)
        if c in root_of:
            out.append([_id(r), root_of[c]])
    return out


def dedup(data: str, tmp: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """Signatures and filter: one task per JSONL file; buckets: one per band; cluster: one."""
    w = Path(tmp) / "dt"
    stages = _stages(Path(data), w, cfg)
    phases = []
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    for name, ex in stages:
        t1 = time.perf_counter()
        ex.run()
        phases.append((name, time.perf_counter() - t1))
    seconds = time.perf_counter() - t0
    monitor.stop()
    removed_rows, kept_rows = _load(w / "removed"), _load(w / "out")
    if not removed_rows and not kept_rows:
        raise RuntimeError("datatrove wrote no documents")
    return {
        "seconds": seconds,
        "sig_seconds": phases[0][1],
        "sig_procs": cfg["workers"],
        "removed": sorted(_id(r) for r in removed_rows),
        "pairs": _pairs(kept_rows, removed_rows),
        "peak_rss_mb": monitor.peak_rss_mb,
        "max_procs": monitor.max_procs,
        "cpu_s": monitor.cpu_seconds,
        "phases": phases,
        "summary": {"kept": len(kept_rows)},
        "versions": {"datatrove": dist_version("datatrove"), "numpy": dist_version("numpy")},
    }
