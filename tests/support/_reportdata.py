"""A small text corpus for the report tests: duplicates, near-duplicates, short rows and
malformed JSON lines."""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = [
    "river",
    "stone",
    "market",
    "winter",
    "engine",
    "garden",
    "letter",
    "silver",
    "window",
    "harbor",
    "planet",
    "candle",
    "orchard",
    "ladder",
    "meadow",
    "pillow",
    "thunder",
    "violin",
    "basket",
    "copper",
]


def _documents(rng: random.Random, n: int) -> list[str]:
    base = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))) for _ in range(n)]
    docs = []
    for i, text in enumerate(base):
        docs.append(text)
        if i % 7 == 0:  # exact copies (case and spaces differ)
            docs.append("  " + text.upper())
        if i % 11 == 0:  # near copies: one word changed at the end
            docs.append(text.rsplit(" ", 1)[0] + " zebra")
        if i % 13 == 0:
            docs.append("too short")
    return docs


def write_corpus(raw: Path, seed: int = 0) -> int:
    """Three JSONL files with duplicates, short rows and 4 malformed lines; returns lines."""
    rng = random.Random(seed)
    lines = [json.dumps({"id": i, "text": t}) for i, t in enumerate(_documents(rng, 600))]
    for pos, bad in ((10, "{not json"), (300, '{"id": 1, "text": '), (500, "]"), (700, "{{")):
        lines.insert(pos, bad)
    raw.mkdir(parents=True)
    for k in range(3):
        (raw / f"part-{k}.jsonl").write_text("\n".join(lines[k::3]) + "\n")
    return len(lines)
