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

from shardwise.dedup.components import components_distributed, components_in_memory, unique_pairs
from shardwise.dedup.lsh import (
    band_hashes,
    bucket_order,
    maybe_shared,
    optimal_bands,
    partition_records,
    recall_bands,
)
from shardwise.dedup.sets import distinct, shingle_sets
from shardwise.dedup.shingles import doc_shingles
from shardwise.dedup.signatures import MAX_PERM, signatures
from shardwise.dedup.verify import ROW_BITS, split_ids, verified_stars
from shardwise.errors import ConfigError
from shardwise.ops._compute import int64_array, text_column
from shardwise.ops.dedup import DedupContext, DedupDecision, DedupOp, Scratch, TaskKeys

__all__ = ["MinHashDedup"]

RECORDS_PER_PARTITION = 2_000_000  # (band, hash, doc) records per edges task, at most ~48 MB
DIRECT_RECORDS = 1 << 17  # records up to which each edges task makes its own (no buckets step)
RECORD_BYTES = 96  # per (band, hash, doc) record while a partition is sorted (copies, order)
EDGE_BYTES = 128  # per edge while components are found in memory
BUDGET_SHARE = 4  # a partition's records, and the verification cache, each get 1/4 of the budget


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


@dataclass(frozen=True)
class _Stage:
    """What the parallel steps of one decision need (picklable: no engine handles)."""

    keys: TaskKeys
    scratch: Scratch
    num_tasks: int
    bands: int
    rows: int
    parts: int
    verify: bool
    threshold: float
    cache_bytes: int
    direct: bool  # the edges tasks take their records from the tasks' keys (no buckets step)


def _bucket_name(task: int, part: int) -> str:
    return f"buckets/t{task:05d}-p{part:05d}.npy"


def _edges_name(part: int) -> str:
    return f"edges/p{part:05d}.npy"


def _task_records(st: _Stage, task: int) -> tuple[np.ndarray, np.ndarray]:
    """The band records of one task's documents by hash partition, and the partitions'
    bounds (:func:`~shardwise.dedup.lsh.partition_records`)."""
    keys = st.keys.load(task, ["bands", "lengths"])
    bands = keys.get("bands", np.zeros((0, st.bands), np.uint64))
    live = np.flatnonzero(
        keys.get("lengths", np.zeros(0, np.int64)) > 0
    )  # documents without shingles never match
    ids = (np.uint64(task) << np.uint64(ROW_BITS)) | live.astype(np.uint64)
    return partition_records(bands[live], ids, st.parts)


def _buckets(args: tuple[_Stage, int]) -> None:
    """The band records of one task's documents, stored by hash partition."""
    st, task = args
    rec, bounds = _task_records(st, task)
    for p in range(st.parts):  # one pass over the records, not one per partition
        st.scratch.save(_bucket_name(task, p), rec[bounds[p] : bounds[p + 1]])


def _edges(args: tuple[_Stage, int]) -> tuple[int, int, int]:
    """Star edges of the buckets of one hash partition (verified, if asked). Its records
    come from the buckets step's files, or, with few records (``st.direct``), straight
    from the tasks' band hashes (every edges task reads them all: cheaper than a step)."""
    st, p = args
    if st.direct:
        parts = [
            rec[bounds[p] : bounds[p + 1]]
            for rec, bounds in (_task_records(st, t) for t in range(st.num_tasks))
        ]
    else:
        parts = [st.scratch.load(_bucket_name(t, p)) for t in range(st.num_tasks)]
    rec = np.concatenate(parts) if parts else np.zeros((0, 3), np.uint64)
    u_out: list[np.ndarray] = []
    v_out: list[np.ndarray] = []
    rejected = 0
    records = len(rec)
    rec = rec[maybe_shared(rec[:, 1])]  # the rest are buckets of one document
    if len(rec):
        rec = rec[bucket_order(rec)]
        key_change = (rec[1:, 0] != rec[:-1, 0]) | (rec[1:, 1] != rec[:-1, 1])
        starts = np.concatenate([[0], np.nonzero(key_change)[0] + 1])
        sizes = np.diff(np.concatenate([starts, [len(rec)]]))
        multi = sizes > 1
        if not st.verify:
            group_min = np.repeat(rec[starts, 2], sizes)
            is_member = np.repeat(multi, sizes) & (rec[:, 2] != group_min)
            u_out.append(rec[is_member, 2])
            v_out.append(group_min[is_member])
        else:
            rejected = verified_stars(
                st.keys,
                st.threshold,
                rec[:, 2],
                np.repeat(np.arange(len(sizes)), sizes),
                np.repeat(multi, sizes),
                u_out,
                v_out,
                max_bytes=st.cache_bytes,
            )
    u = np.concatenate(u_out) if u_out else np.zeros(0, np.uint64)
    v = np.concatenate(v_out) if v_out else np.zeros(0, np.uint64)
    pairs = unique_pairs(u, v)[0]
    st.scratch.save(_edges_name(p), pairs)
    return len(pairs), rejected, records


def _components(
    op: MinHashDedup, ctx: DedupContext, parts: int, n_edges: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """``(removed docs, their kept doc, mode)`` from the stored edges."""
    mode = op.components
    if mode == "auto":
        fits = n_edges <= op.max_memory_edges and n_edges * EDGE_BYTES <= op.memory_budget
        mode = "memory" if fits else "distributed"
    names = [_edges_name(p) for p in range(parts)]
    if mode == "memory":
        e = [ctx.scratch.load(n) for n in names]
        pairs = np.concatenate(e) if e else np.zeros((0, 2), np.uint64)
        nodes, roots = components_in_memory(pairs[:, 0], pairs[:, 1])
        removed = nodes != roots
        return nodes[removed], roots[removed], mode
    # partitions of the star rounds: each holds both directions of its share of the edges
    cc_parts = min(parts, max(2, -(-n_edges * EDGE_BYTES // op.memory_budget)))
    docs, kept = components_distributed(names, cc_parts, ctx.map, ctx.scratch)
    return docs, kept, mode


def _partitions(op: MinHashDedup, records: int) -> int:
    """Edges tasks: ``partitions`` is a ceiling (each edges task loads the signatures, and
    verifying the shingles, of the candidates it meets, so small inputs use fewer, fuller
    ones) unless one partition's records would not fit in a quarter of the memory budget
    (the rest: the verification cache, the candidates' shingles, the interpreter)."""
    by_records = min(op.partitions, max(2, -(-records // RECORDS_PER_PARTITION)))
    return max(by_records, -(-records * RECORD_BYTES // max(1, op.memory_budget // BUDGET_SHARE)))


def _decide(op: MinHashDedup, ctx: DedupContext) -> DedupDecision:
    b, r = op.banding()
    lengths = [
        ctx.keys.load(t, ["lengths"]).get("lengths", np.zeros(0, np.int64))
        for t in range(ctx.num_tasks)
    ]
    rows_per_task, records = [len(n) for n in lengths], sum(len(n) for n in lengths) * b
    parts = _partitions(op, records)
    direct = (
        records <= DIRECT_RECORDS and records * RECORD_BYTES <= op.memory_budget // BUDGET_SHARE
    )
    st = _Stage(
        ctx.keys,
        ctx.scratch,
        ctx.num_tasks,
        b,
        r,
        parts,
        op.verify,
        op.threshold,
        max(1, op.memory_budget // BUDGET_SHARE),
        direct,
    )
    if not direct:  # else the edges tasks read the band hashes themselves
        ctx.map(_buckets, [(st, t) for t in range(ctx.num_tasks)], "minhash buckets")
    stats = ctx.map(_edges, [(st, p) for p in range(parts)], "minhash edges")
    n_edges = sum(s[0] for s in stats)
    docs, kept, mode = _components(op, ctx, parts, n_edges)
    masks = [np.ones(n, dtype=bool) for n in rows_per_task]
    task_of, row_of = split_ids(docs)
    for t in distinct(task_of):
        masks[t][row_of[task_of == t]] = False
    cluster_sizes = (
        np.unique(kept, return_counts=True)[1] + 1 if len(kept) else np.zeros(0, np.int64)
    )
    kept_task, kept_row = split_ids(kept)
    audit = pa.table(
        {
            "removed_task": int64_array(task_of),
            "removed_row": int64_array(row_of),
            "kept_task": int64_array(kept_task),
            "kept_row": int64_array(kept_row),
        }
    )
    summary = {
        "method": "minhash",
        "bands": b,
        "rows": r,
        "num_perm": op.num_perm,
        "threshold": op.threshold,
        "partitions": parts,
        "buckets_step": not direct,
        "documents": int(sum(rows_per_task)),
        "documents_with_shingles": sum(int((n > 0).sum()) for n in lengths),
        "candidate_edges": int(n_edges),
        "rejected_by_verification": int(sum(s[1] for s in stats)),
        "components_mode": mode,
        "clusters": len(cluster_sizes),
        "largest_cluster": int(cluster_sizes.max()) if len(cluster_sizes) else 0,
        "removed": len(docs),
        "audit": ctx.write_audit(audit),
    }
    return DedupDecision(masks, summary)
