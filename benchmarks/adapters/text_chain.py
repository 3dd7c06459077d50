"""The pipeline benchmark's operator chain for the peers, mirroring shardwise's ops with
``pyarrow.compute`` (shardwise's regexes, RE2 syntax), and the measured run around it."""

from __future__ import annotations

import importlib
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

__all__ = [
    "CORES",
    "MIN_WORDS",
    "clean_and_hash",
    "clean_text",
    "dedup_hashes",
    "first_of_each",
    "input_files",
    "keep_words",
    "measured",
    "word_counts",
]

CORES = 2
MIN_WORDS = 50
WS_RE = r"[\s\p{Z}]+"
WORD_RE = r"[^\s\p{Z}]+"
URL_RE = r"(?i)\b(?:https?://|www\.)[^\s<>\"']+"


def input_files(data: Path) -> list[str]:
    """The input Parquet files."""
    return sorted(str(p) for p in (data / "input").glob("*.parquet"))


def clean_text(text: Any) -> Any:
    """normalize_text (NFKC, whitespace) then strip_urls."""
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(pc.utf8_normalize(text, "NFKC"), WS_RE, " ")
    )
    return pc.replace_substring_regex(text, URL_RE, "")


def word_counts(text: Any) -> Any:
    """Matches of ``WORD_RE`` per row."""
    import pyarrow.compute as pc

    return pc.count_substring_regex(pc.fill_null(text, ""), WORD_RE)


def keep_words(n: Any) -> Any:
    """The word-count filter's mask."""
    import pyarrow.compute as pc

    return pc.greater_equal(n, MIN_WORDS)


def dedup_hashes(text: Any) -> Any:
    """(n, 2) uint64 xxh3-128 of the exact_dedup key (NFKC, lower, whitespace), as shardwise."""
    import numpy as np
    import pyarrow.compute as pc
    import xxhash

    t = pc.fill_null(text, "")
    t = pc.utf8_trim_whitespace(
        pc.replace_substring_regex(pc.utf8_lower(pc.utf8_normalize(t, "NFKC")), WS_RE, " ")
    )
    raw = b"".join(xxhash.xxh3_128_digest(s.encode("utf-8")) for s in t.to_pylist())
    out = np.empty((len(t), 2), dtype=np.uint64)
    if len(t):
        out[:] = np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2)
    return out


def clean_and_hash(table: Any) -> Any:
    """A batch -> cleaned text, word count ``n_words`` and hash columns ``h1``/``h2``."""
    import pyarrow as pa

    text = clean_text(table.column("text"))
    h = dedup_hashes(text)
    table = table.set_column(
        table.schema.get_field_index("text"), pa.field("text", text.type), text
    )
    return (
        table.append_column("n_words", word_counts(text))
        .append_column("h1", pa.array(h[:, 0]))
        .append_column("h2", pa.array(h[:, 1]))
    )


def first_of_each(h1: Any, h2: Any) -> Any:
    """Sorted positions of the first occurrence of each (h1, h2) pair."""
    import numpy as np

    keys = np.ascontiguousarray(
        np.stack([np.asarray(h1, np.uint64), np.asarray(h2, np.uint64)], axis=1)
    )
    _, first = np.unique(keys.view(np.dtype((np.void, 16))).ravel(), return_index=True)
    first.sort()
    return first


def count_output(out: Path) -> dict[str, Any]:
    """Rows, sum of ids and characters of text of every Parquet file under ``out``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = id_sum = chars = 0
    files = [
        p
        for p in out.rglob("*.parquet")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(out).parts)
    ]
    for p in files:
        t = pq.read_table(p, columns=["id", "text"])
        rows += t.num_rows
        id_sum += int(pc.sum(t.column("id")).as_py() or 0)
        chars += int(pc.sum(pc.utf8_length(t.column("text"))).as_py() or 0)
    return {"output_rows": rows, "id_sum": id_sum, "text_chars": chars, "output_files": len(files)}


def measured(data: str, tmp: str, run: str, **kwargs: Any) -> dict[str, Any]:
    """Worker side: ``run`` (``"module:function"``, called with ``data, out``) measured,
    then its output counted (untimed)."""
    module, _, func = run.partition(":")
    fn = getattr(importlib.import_module(module), func)
    out = Path(tmp) / "out"
    monitor = TreeMonitor(interval=0.2).start()
    t0 = time.perf_counter()
    info = fn(Path(data), out, **kwargs)
    monitor.stop()  # CPU of the tree over start-up, set-up and the timed run (not the check)
    info.update(cpu_s=monitor.cpu_seconds, cpu_window_s=time.perf_counter() - t0)
    info.update(count_output(out))
    versions = info.setdefault("versions", {})
    versions.update(
        {
            m: getattr(sys.modules[m], "__version__", None)
            for m in ("pyarrow", "numpy", "pandas")
            if m in sys.modules
        }
    )
    shutil.rmtree(out, ignore_errors=True)
    return info
