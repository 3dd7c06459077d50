"""The ``minhash_dedup`` operator: near-duplicate removal with MinHash-LSH.

Per task (inside the pipeline's task): shingles and signatures of every row
(:mod:`shardwise.dedup.shingles`, :mod:`shardwise.dedup.signatures`), of which only the
hash of each band is kept (and, verifying, each row's shingle set). Then, in
:meth:`MinHashDedup.decide`, on the pipeline's backend (``ctx.map``) through arrays in the
stage's scratch space (``ctx.scratch``):

1. *buckets*: one task per input task writes the ``(band, hash, doc)`` records of its
   rows into ``partitions`` files by hash (up to ``DIRECT_RECORDS`` records in all, no
   such step: each edges task makes its records from every task's band hashes);
2. *edges*: one task per partition sorts its records; every bucket of ``k`` documents
   yields ``k - 1`` edges to its smallest document (a star, never all pairs), optionally
   verified by exact Jaccard of the shingle sets;
3. *components*: in memory when the edges fit (``max_memory_edges`` and the memory
   budget), else distributed star contraction over the partitioned edge files
   (:mod:`shardwise.dedup.components`); ``components=`` forces;
4. *filter*: each component keeps its first document in input order (task, row).

Memory: every intermediate (bucket records, edges) lives in the stage's scratch space,
partitioned so that one partition's records fit in a quarter of ``memory_budget`` (bytes
per process); verification keeps at most another quarter of the tasks' keys in memory (least
recently used out). A corpus larger than the budget takes more partitions and the
distributed components; the output does not change.

Doc ids are ``task << 32 | row``, so the smallest id is the first in input order on
every backend and worker count. An audit table maps each removed document to the kept
one (``ctx.write_audit``: ``_dedup_<stage name>.parquet`` beside the output).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyarrow as pa

from shardwise.dedup.candidates import split_ids
from shardwise.dedup.lsh import band_hashes, optimal_bands, recall_bands
from shardwise.dedup.minhash_steps import (
    BUDGET_SHARE,
    DIRECT_RECORDS,
    RECORD_BYTES,
    Stage,
    buckets,
    components,
    edges,
    partitions,
)
from shardwise.dedup.sets import distinct, shingle_sets
from shardwise.dedup.shingles import doc_shingles
from shardwise.dedup.signatures import MAX_PERM, signatures
from shardwise.errors import ConfigError
from shardwise.ops._compute import int64_array, text_column
from shardwise.ops.dedup import DedupContext, DedupDecision, DedupOp

__all__ = ["MinHashDedup"]


@dataclass(frozen=True)
class MinHashDedup(DedupOp):
    """Remove near-duplicates of ``column`` (Jaccard of shingles >= ``threshold``), keeping
    the first document of each cluster in input order (see the module docstring).

    Without ``bands``/``rows``, banding minimises the equally weighted areas of false
    positives and false negatives; with ``verify=True`` false positives are checked away
    (they cost a check), so banding then weighs false negatives first: the fewest
    false candidates among the bandings whose expected recall over similarities from
    ``threshold`` to 1 is at least 99% (:func:`~shardwise.dedup.lsh.recall_bands`).
    ``partitions`` caps the edges tasks unless the ``memory_budget`` (bytes per process
    for the decision's steps) needs more; ``components`` picks the connected-components
    method (``auto``: in memory up to ``max_memory_edges`` edges and the budget, else
    distributed).
    """

    #: shingling and signatures cost several times the reading of the rows
    work_per_byte: ClassVar[float] = 4.0

    column: str = "text"
    tokenization: str = "word"
    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    bands: int | None = None
    rows: int | None = None
    verify: bool = False
    seed: int = 0
    scheme: str = "oph"
    components: str = "auto"
    partitions: int = 16
    max_memory_edges: int = 20_000_000
    memory_budget: int = 2**30

    def __post_init__(self) -> None:
        _check(
            self.tokenization,
            self.ngram,
            self.num_perm,
            self.threshold,
            self.bands,
            self.rows,
            self.scheme,
            self.components,
        )
        if self.partitions < 1 or self.max_memory_edges < 0 or self.memory_budget < 1:
            raise ConfigError(
                "partitions and memory_budget must be >= 1 and max_memory_edges >= 0, got "
                f"{self.partitions}, {self.memory_budget} and {self.max_memory_edges}"
            )

    def banding(self) -> tuple[int, int]:
        """``(bands, rows)``: given, or chosen for the threshold."""
        if self.bands is not None and self.rows is not None:
            return self.bands, self.rows
        return _chosen_banding(self.threshold, self.num_perm, self.verify)

    def keys(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        """The band hashes of every row's signature (what the buckets need: 8 bytes per
        band, not 8 per signature value), each row's number of shingles, and, verifying,
        each row's shingle set."""
        # repeats do not change a minimum; verification stores each document's set
        sh, off = doc_shingles(
            text_column(batch, self.column),
            tokenization=self.tokenization,
            ngram=self.ngram,
            seed=self.seed,
            unique=False,
        )
        sig = signatures(sh, off, num_perm=self.num_perm, seed=self.seed, scheme=self.scheme)
        out = {"bands": band_hashes(sig, *self.banding())}
        if self.verify:  # each document's set, sorted once here, so that the pair check only merges
            out["shingles"], out["lengths"] = shingle_sets(sh, off)
        else:
            out["lengths"] = np.diff(off)
        return out

    def decide(self, ctx: DedupContext) -> DedupDecision:
        """Buckets, edges, components and the first document of each cluster kept."""
        return _decide(self, ctx)


@functools.lru_cache(maxsize=64)
def _chosen_banding(threshold: float, num_perm: int, verify: bool) -> tuple[int, int]:
    """The banding for ``threshold`` (for recall when verifying: false positives are then
    checked away, they cost a check); computed once per process, not once per batch."""
    return recall_bands(threshold, num_perm) if verify else optimal_bands(threshold, num_perm)


def _check(
    tokenization: str,
    ngram: int,
    num_perm: int,
    threshold: float,
    bands: int | None,
    rows: int | None,
    scheme: str,
    components: str,
) -> None:
    if tokenization not in ("word", "char"):
        raise ConfigError(f"tokenization must be 'word' or 'char', got {tokenization!r}")
    if ngram < 1 or not 2 <= num_perm <= MAX_PERM:
        raise ConfigError(
            f"ngram must be >= 1 and num_perm in [2, {MAX_PERM}], got ngram={ngram}, "
            f"num_perm={num_perm}"
        )
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    if (bands is None) != (rows is None):
        raise ConfigError("give both bands and rows, or neither")
    if bands is not None and rows is not None and bands * rows > num_perm:
        raise ConfigError(f"bands * rows = {bands * rows} exceeds num_perm = {num_perm}")
    if scheme not in ("oph", "perm"):
        raise ConfigError(f"scheme must be 'oph' or 'perm', got {scheme!r}")
    if components not in ("auto", "memory", "distributed"):
        raise ConfigError(
            f"components must be 'auto', 'memory' or 'distributed', got {components!r}"
        )


def _stage(op: MinHashDedup, ctx: DedupContext, records: int) -> Stage:
    """What the parallel steps of this decision need."""
    b, r = op.banding()
    budget = op.memory_budget // BUDGET_SHARE
    return Stage(
        ctx.keys,
        ctx.scratch,
        ctx.num_tasks,
        b,
        r,
        partitions(op.partitions, op.memory_budget, records),
        op.verify,
        op.threshold,
        max(1, budget),
        records <= DIRECT_RECORDS and records * RECORD_BYTES <= budget,
        op.memory_budget,
    )


def _decide(op: MinHashDedup, ctx: DedupContext) -> DedupDecision:
    lengths = [
        ctx.keys.load(t, ["lengths"]).get("lengths", np.zeros(0, np.int64))
        for t in range(ctx.num_tasks)
    ]
    st = _stage(op, ctx, sum(len(n) for n in lengths) * op.banding()[0])
    if not st.direct:  # else the edges tasks read the band hashes themselves
        ctx.map(buckets, [(st, t) for t in range(ctx.num_tasks)], "minhash buckets")
    stats = ctx.map(edges, [(st, p) for p in range(st.parts)], "minhash edges")
    n_edges = sum(s[0] for s in stats)
    docs, kept, mode = components(st, ctx, n_edges, op.components, op.max_memory_edges)
    masks = [np.ones(len(n), dtype=bool) for n in lengths]
    task_of, row_of = split_ids(docs)
    for t in distinct(task_of):
        masks[t][row_of[task_of == t]] = False
    summary = {
        "method": "minhash",
        "bands": st.bands,
        "rows": st.rows,
        "num_perm": op.num_perm,
        "threshold": op.threshold,
        "partitions": st.parts,
        "buckets_step": not st.direct,
        "documents": int(sum(len(n) for n in lengths)),
        "documents_with_shingles": sum(int((n > 0).sum()) for n in lengths),
        "candidate_edges": int(n_edges),
        "rejected_by_verification": int(sum(s[1] for s in stats)),
        "components_mode": mode,
        **_clusters(kept),
        "removed": len(docs),
        "audit": ctx.write_audit(_audit(task_of, row_of, kept)),
    }
    return DedupDecision(masks, summary)


def _clusters(kept: np.ndarray) -> dict[str, int]:
    """How many clusters lost a document, and the largest one's size."""
    sizes = np.unique(kept, return_counts=True)[1] + 1 if len(kept) else np.zeros(0, np.int64)
    return {"clusters": len(sizes), "largest_cluster": int(sizes.max()) if len(sizes) else 0}


def _audit(task_of: np.ndarray, row_of: np.ndarray, kept: np.ndarray) -> pa.Table:
    """Each removed row beside the row kept for it."""
    kept_task, kept_row = split_ids(kept)
    return pa.table(
        {
            "removed_task": int64_array(task_of),
            "removed_row": int64_array(row_of),
            "kept_task": int64_array(kept_task),
            "kept_row": int64_array(kept_row),
        }
    )
