"""The reference shingling of the dedup benchmark (stdlib only: runs in every venv).

NFKC, lower case, every run of non-letter/non-digit characters to one space, split on
whitespace, sets of word n-grams (a document of fewer than n words is one shingle).
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

__all__ = ["read_docs", "shingles", "words"]

_NONWORD = re.compile(r"[\W_]+")


def words(text: str) -> list[str]:
    """The reference words of ``text``."""
    return _NONWORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).split()


def shingles(text: str, n: int) -> set[str]:
    """The set of word ``n``-grams of ``text``."""
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def read_docs(data: Path) -> tuple[list[int], list[str]]:
    """Ids and texts of every document under ``data/docs/*.jsonl``, in file order."""
    ids, texts = [], []
    for f in sorted((data / "docs").glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                ids.append(r["id"])
                texts.append(r["text"])
    return ids, texts
