"""The ``minhash_dedup`` operator: near-duplicate removal with MinHash-LSH.

Per task (inside the pipeline's task): shingles and signatures of every row
(:mod:`shardwise.dedup.shingles`). Then, in :func:`_decide`, on the pipeline's backend
through files under the pipeline's work directory:

1. *buckets*: one task per input task hashes each band of each signature and writes the
   ``(band, hash, doc)`` records into ``partitions`` files by hash;
2. *edges*: one task per partition sorts its records; every bucket of ``k`` documents
   yields ``k - 1`` edges to its smallest document (a star, never all pairs), optionally
   verified by exact Jaccard of the shingle sets;
3. *components*: in memory with SciPy when the edges fit (``max_memory_edges``), else
   distributed star contraction (:mod:`shardwise.dedup.components`); ``components=`` forces;
4. *filter*: each component keeps its first document in input order (task, row).

Doc ids are ``task << 32 | row``, so the smallest id is the first in input order on
every backend and worker count. An audit table maps each removed document to the kept
one (``_dedup_<name>.parquet`` in the output directory).
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.dedup.components import _load, _save, components_distributed, components_in_memory
from shardwise.dedup.lsh import band_hashes, optimal_bands, recall_bands
from shardwise.dedup.shingles import doc_shingles, jaccard
from shardwise.dedup.signatures import EMPTY, signatures
from shardwise.errors import ConfigError
from shardwise.ops.base import register_op
from shardwise.ops.text import _text
from shardwise.storage import atomic_write, join

__all__ = ["minhash_dedup"]

ROW_BITS = 32
RECORDS_PER_PARTITION = 2_000_000  # (band, hash, doc) records per edges task, at most ~48 MB


@register_op("minhash_dedup", "dedup")
def minhash_dedup(
    batch: pa.RecordBatch,
    *,
    column: str = "text",
    tokenization: str = "word",
    ngram: int = 5,
    num_perm: int = 128,
    threshold: float = 0.8,
    bands: int | None = None,
    rows: int | None = None,
    verify: bool = False,
    seed: int = 0,
    scheme: str = "oph",
    components: str = "auto",
    partitions: int = 16,
    max_memory_edges: int = 20_000_000,
) -> dict[str, np.ndarray]:
    """Remove near-duplicates of ``column`` (Jaccard of shingles >= ``threshold``), keeping
    the first document of each cluster in input order (see the module docstring).

    Without ``bands``/``rows``, banding minimises the equally weighted areas of false
    positives and false negatives; with ``verify=True`` false positives are checked away
    (they cost only time), so banding then weighs false negatives first: the fewest
    candidates that still make a pair at ``threshold`` a candidate 98% of the time."""
    _check(tokenization, ngram, num_perm, threshold, bands, rows, scheme, components)
    # repeats do not change a minimum, and verification takes unique sets itself
    sh, off = doc_shingles(_text(batch, column), tokenization=tokenization, ngram=ngram, seed=seed, unique=False)
    out = {"sig": signatures(sh, off, num_perm=num_perm, seed=seed, scheme=scheme)}
    if verify:
        out["shingles"], out["lengths"] = sh, np.diff(off)
    return out


def _check(tokenization: str, ngram: int, num_perm: int, threshold: float, bands: int | None,
           rows: int | None, scheme: str, components: str) -> None:
    if tokenization not in ("word", "char"):
        raise ConfigError(f"tokenization must be 'word' or 'char', got {tokenization!r}")
    if ngram < 1 or num_perm < 2:
        raise ConfigError("ngram must be >= 1 and num_perm >= 2")
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    if (bands is None) != (rows is None):
        raise ConfigError("give both bands and rows, or neither")
    if bands is not None and rows is not None and bands * rows > num_perm:
        raise ConfigError(f"bands * rows = {bands * rows} exceeds num_perm = {num_perm}")
    if scheme not in ("oph", "perm"):
        raise ConfigError(f"scheme must be 'oph' or 'perm', got {scheme!r}")
    if components not in ("auto", "memory", "distributed"):
        raise ConfigError(f"components must be 'auto', 'memory' or 'distributed', got {components!r}")


def _buckets(args: tuple[Any, int, int, int, int]) -> int:
    ctx, task, b, r, parts = args
    sig = ctx.load(task, ["sig"]).get("sig")
    if sig is None or len(sig) == 0:
        sig = np.zeros((0, b * r), np.uint64)
    live = np.nonzero(sig[:, 0] != EMPTY)[0]  # documents without shingles never match
    h = band_hashes(sig[live], b, r)
    ids = (np.uint64(task) << np.uint64(ROW_BITS)) | live.astype(np.uint64)
    band = np.broadcast_to(np.arange(b, dtype=np.uint64), h.shape).ravel()
    hh = h.ravel()
    doc = np.repeat(ids, b)
    part = hh % np.uint64(parts)
    for p in range(parts):
        m = part == np.uint64(p)
        _save(join(ctx.work_dir, "buckets", f"t{task:05d}-p{p:05d}.npy"), np.stack([band[m], hh[m], doc[m]], axis=1),
              ctx.storage_options)
    return len(live)


class _Shingles:
    """Random access to the shingle sets of documents, loading each task's arrays once."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.sets: dict[int, np.ndarray] = {}  # a candidate is met once per band it shares
        self.sigs: dict[int, np.ndarray] = {}

    def sig_rows(self, docs: np.ndarray) -> np.ndarray:
        """The signatures of ``docs`` (one row each)."""
        task = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
        row = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
        out: np.ndarray | None = None
        for t in np.unique(task):
            if t not in self.sigs:
                self.sigs[int(t)] = self.ctx.load(int(t), ["sig"])["sig"]
            sig = self.sigs[int(t)]
            if out is None:
                out = np.empty((len(docs), sig.shape[1]), dtype=sig.dtype)
            m = task == t
            out[m] = sig[row[m]]
        return out if out is not None else np.zeros((0, 0), np.uint64)

    def get(self, doc: int) -> np.ndarray:
        found = self.sets.get(doc)
        if found is None:
            found = self.sets[doc] = self._unique(doc)
        return found

    def _unique(self, doc: int) -> np.ndarray:
        task, row = doc >> ROW_BITS, doc & ((1 << ROW_BITS) - 1)
        if task not in self.cache:
            d = self.ctx.load(task, ["shingles", "lengths"])
            self.cache[task] = (d["shingles"], np.concatenate([[0], np.cumsum(d["lengths"])]))
        sh, off = self.cache[task]
        return np.unique(sh[off[row] : off[row + 1]])  # stored per document unsorted, with repeats


def _edges(args: tuple[Any, int, int, bool, float]) -> tuple[int, int, int]:
    ctx, p, n_tasks, verify, threshold = args
    parts = [_load(join(ctx.work_dir, "buckets", f"t{t:05d}-p{p:05d}.npy"), ctx.storage_options) for t in range(n_tasks)]
    rec = np.concatenate(parts) if parts else np.zeros((0, 3), np.uint64)
    u_out: list[np.ndarray] = []
    v_out: list[np.ndarray] = []
    rejected = 0
    if len(rec):
        order = np.lexsort((rec[:, 2], rec[:, 1], rec[:, 0]))
        rec = rec[order]
        key_change = (rec[1:, 0] != rec[:-1, 0]) | (rec[1:, 1] != rec[:-1, 1])
        starts = np.concatenate([[0], np.nonzero(key_change)[0] + 1])
        sizes = np.diff(np.concatenate([starts, [len(rec)]]))
        multi = sizes > 1
        if not verify:
            group_min = np.repeat(rec[starts, 2], sizes)
            is_member = np.repeat(multi, sizes) & (rec[:, 2] != group_min)
            u_out.append(rec[is_member, 2])
            v_out.append(group_min[is_member])
        else:
            rejected = _verified_stars(ctx, rec[:, 2], np.repeat(np.arange(len(sizes)), sizes),
                                       np.repeat(multi, sizes), threshold, u_out, v_out)
    u = np.concatenate(u_out) if u_out else np.zeros(0, np.uint64)
    v = np.concatenate(v_out) if v_out else np.zeros(0, np.uint64)
    pairs = np.unique(np.stack([u, v], axis=1), axis=0) if len(u) else np.zeros((0, 2), np.uint64)
    _save(join(ctx.work_dir, "edges", f"p{p:05d}.npy"), pairs, ctx.storage_options)
    return len(pairs), rejected, len(rec)


def _verified_stars(ctx: Any, doc: np.ndarray, group: np.ndarray, active: np.ndarray, threshold: float,
                    u_out: list[np.ndarray], v_out: list[np.ndarray]) -> int:
    """Star edges of each bucket to its smallest document, kept only when the pair really
    is similar; members rejected by their root form the next star of the bucket, and so
    on. ``doc`` is sorted within each ``group`` (bucket). Vectorised by rounds; returns the
    number of rejected pairs.

    A pair estimated (from the signatures) more than 4.5 standard deviations below the
    threshold is rejected, and one estimated as far above it accepted, without the exact
    Jaccard check that decides the rest; every distinct pair is checked once.
    """
    shingles = _Shingles(ctx)
    sigma = float(np.sqrt(threshold * (1 - threshold) / ctx.params.get("num_perm", 128)))
    floor, ceiling = threshold - 4.5 * sigma, threshold + 4.5 * sigma
    checked: dict[tuple[int, int], bool] = {}
    rejected = 0
    active = active.copy()
    while True:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        g = group[idx]
        first = np.ones(len(idx), dtype=bool)
        first[1:] = g[1:] != g[:-1]
        counts = np.bincount(np.cumsum(first) - 1)
        alone = np.repeat(counts == 1, counts)  # a bucket with one member left is done
        root_pos = np.repeat(idx[first], counts)
        member = ~first & ~alone
        u, v = doc[idx[member]], doc[root_pos[member]]
        active[idx[first | alone]] = False
        if len(u) == 0:
            break
        pairs, inverse = np.unique(np.stack([u, v], axis=1), axis=0, return_inverse=True)
        est = (shingles.sig_rows(pairs[:, 0]) == shingles.sig_rows(pairs[:, 1])).mean(axis=1)
        ok = est >= ceiling
        for i in np.flatnonzero((est >= floor) & ~ok):
            key = (int(pairs[i, 0]), int(pairs[i, 1]))
            if key not in checked:
                checked[key] = jaccard(shingles.get(key[1]), shingles.get(key[0])) >= threshold
            ok[i] = checked[key]
        ok_member = ok[inverse.ravel()]
        rejected += int((~ok_member).sum())
        u_out.append(u[ok_member])
        v_out.append(v[ok_member])
        active[idx[member][ok_member]] = False  # joined its root; the rejected stay for the next star
    return rejected


def _decide(ctx: Any) -> tuple[list[np.ndarray], dict[str, Any]]:
    from shardwise.parallel import parallel_map

    prm = ctx.params
    num_perm = prm.get("num_perm", 128)
    threshold = prm.get("threshold", 0.8)
    if prm.get("bands"):
        b, r = prm["bands"], prm["rows"]
    elif prm.get("verify"):  # false positives are checked away: favour recall
        b, r = recall_bands(threshold, num_perm)
    else:
        b, r = optimal_bands(threshold, num_perm)
    parts = int(prm.get("partitions", 16))
    n_tasks = len(ctx.key_files)
    run = {"backend": ctx.backend, "num_proc": ctx.num_proc, "progress": ctx.progress, "chunksize": 1}
    ctx = dataclasses.replace(ctx, backend=None)  # tasks must not carry the engine's handle
    rows_per_task = [len(ctx.load(t, ["sig"]).get("sig", ())) for t in range(n_tasks)]
    # ``partitions`` is a ceiling: each edges task loads the signatures (and, verifying,
    # the shingles) of the candidates it meets, so small inputs use fewer, fuller ones
    parts = min(parts, max(2, -(-sum(rows_per_task) * b // RECORDS_PER_PARTITION)))
    live = parallel_map(_buckets, [(ctx, t, b, r, parts) for t in range(n_tasks)], desc="minhash buckets", **run)
    stats = parallel_map(_edges, [(ctx, p, n_tasks, bool(prm.get("verify")), threshold) for p in range(parts)],
                         desc="minhash edges", **run)
    n_edges = sum(s[0] for s in stats)
    mode = prm.get("components", "auto")
    if mode == "auto":
        mode = "memory" if n_edges <= int(prm.get("max_memory_edges", 20_000_000)) else "distributed"
    edge_files = [join(ctx.work_dir, "edges", f"p{p:05d}.npy") for p in range(parts)]
    if mode == "memory":
        e = [_load(f, ctx.storage_options) for f in edge_files]
        pairs = np.concatenate(e) if e else np.zeros((0, 2), np.uint64)
        nodes, roots = components_in_memory(pairs[:, 0], pairs[:, 1])
        removed = nodes != roots
        docs, kept = nodes[removed], roots[removed]
    else:
        docs, kept = components_distributed(edge_files, join(ctx.work_dir, "cc"), parts, backend=run["backend"],
                                            num_proc=ctx.num_proc, progress=ctx.progress,
                                            storage_options=ctx.storage_options)
    masks = [np.ones(n, dtype=bool) for n in rows_per_task]
    task_of = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
    row_of = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
    for t in np.unique(task_of):
        masks[t][row_of[task_of == t]] = False
    cluster_sizes = np.unique(kept, return_counts=True)[1] + 1 if len(kept) else np.zeros(0, np.int64)
    audit = pa.table({
        "removed_task": pa.array(task_of), "removed_row": pa.array(row_of),
        "kept_task": pa.array((kept >> np.uint64(ROW_BITS)).astype(np.int64)),
        "kept_row": pa.array((kept & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)),
    })
    audit_path = join(ctx.out, f"_dedup_{prm.get('_name', 'minhash')}.parquet")
    buf = io.BytesIO()
    pq.write_table(audit, buf)
    with atomic_write(audit_path, **ctx.storage_options) as f:
        f.write(buf.getvalue())
    summary = {
        "method": "minhash", "bands": b, "rows": r, "num_perm": num_perm, "threshold": threshold,
        "partitions": parts,
        "documents": int(sum(rows_per_task)), "documents_with_shingles": int(sum(live)),
        "candidate_edges": int(n_edges), "rejected_by_verification": int(sum(s[1] for s in stats)),
        "components_mode": mode, "clusters": int(len(cluster_sizes)),
        "largest_cluster": int(cluster_sizes.max()) if len(cluster_sizes) else 0,
        "removed": int(len(docs)), "audit": audit_path,
    }
    return masks, summary


def _validate(**kw: Any) -> None:
    _check(kw["tokenization"], kw["ngram"], kw["num_perm"], kw["threshold"], kw["bands"], kw["rows"],
           kw["scheme"], kw["components"])


minhash_dedup.decide = _decide  # type: ignore[attr-defined]
minhash_dedup.validate = _validate  # type: ignore[attr-defined]
