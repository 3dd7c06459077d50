"""The parallel steps of one MinHash decision (see :mod:`shardwise.dedup.minhash`): the
*buckets* step stores each task's band records by hash partition, the *edges* step links
the documents of each bucket (verified, if asked), and the components of the stored edges
are found in memory or distributed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.dedup.candidates import ROW_BITS
from shardwise.dedup.components import components_distributed, components_in_memory, unique_pairs
from shardwise.dedup.lsh import bucket_order, maybe_shared, partition_records
from shardwise.dedup.verify import verified_stars
from shardwise.ops.dedup import DedupContext, Scratch, TaskKeys

__all__ = ["Stage", "buckets", "components", "edges", "partitions"]

RECORDS_PER_PARTITION = 2_000_000  # (band, hash, doc) records per edges task, at most ~48 MB
DIRECT_RECORDS = 1 << 17  # records up to which each edges task makes its own (no buckets step)
RECORD_BYTES = 96  # per (band, hash, doc) record while a partition is sorted (copies, order)
EDGE_BYTES = 128  # per edge while components are found in memory
BUDGET_SHARE = 4  # a partition's records, and the verification cache, each get 1/4 of the budget


@dataclass(frozen=True)
class Stage:
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
    memory_budget: int  # bytes a step may hold


def bucket_name(task: int, part: int) -> str:
    return f"buckets/t{task:05d}-p{part:05d}.npy"


def edges_name(part: int) -> str:
    return f"edges/p{part:05d}.npy"


def task_records(st: Stage, task: int) -> tuple[np.ndarray, np.ndarray]:
    """The band records of one task's documents by hash partition, and the partitions'
    bounds (:func:`~shardwise.dedup.lsh.partition_records`)."""
    keys = st.keys.load(task, ["bands", "lengths"])
    bands = keys.get("bands", np.zeros((0, st.bands), np.uint64))
    live = np.flatnonzero(
        keys.get("lengths", np.zeros(0, np.int64)) > 0
    )  # documents without shingles never match
    ids = (np.uint64(task) << np.uint64(ROW_BITS)) | live.astype(np.uint64)
    return partition_records(bands[live], ids, st.parts)


def buckets(args: tuple[Stage, int]) -> None:
    """The band records of one task's documents, stored by hash partition."""
    st, task = args
    rec, bounds = task_records(st, task)
    for p in range(st.parts):  # one pass over the records, not one per partition
        st.scratch.save(bucket_name(task, p), rec[bounds[p] : bounds[p + 1]])


def edges(args: tuple[Stage, int]) -> tuple[int, int, int]:
    """Star edges of the buckets of one hash partition (verified, if asked). Its records
    come from the buckets step's files, or, with few records (``st.direct``), straight
    from the tasks' band hashes (every edges task reads them all: cheaper than a step)."""
    st, p = args
    if st.direct:
        parts = [
            rec[bounds[p] : bounds[p + 1]]
            for rec, bounds in (task_records(st, t) for t in range(st.num_tasks))
        ]
    else:
        parts = [st.scratch.load(bucket_name(t, p)) for t in range(st.num_tasks)]
    rec = np.concatenate(parts) if parts else np.zeros((0, 3), np.uint64)
    records = len(rec)
    u, v, rejected = _star_edges(st, rec[maybe_shared(rec[:, 1])])  # the rest: buckets of one
    pairs = unique_pairs(u, v)[0]
    st.scratch.save(edges_name(p), pairs)
    return len(pairs), rejected, records


def _star_edges(st: Stage, rec: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(u, v, rejected)``: each document of a bucket linked to the bucket's first one
    (verified, if asked), from the records of buckets that may hold several documents."""
    u_out: list[np.ndarray] = []
    v_out: list[np.ndarray] = []
    rejected = 0
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
    return u, v, rejected


def components(
    st: Stage, ctx: DedupContext, n_edges: int, mode: str, max_memory_edges: int
) -> tuple[np.ndarray, np.ndarray, str]:
    """``(removed docs, their kept doc, mode)`` from the stored edges."""
    parts = st.parts
    if mode == "auto":
        fits = n_edges <= max_memory_edges and n_edges * EDGE_BYTES <= st.memory_budget
        mode = "memory" if fits else "distributed"
    names = [edges_name(p) for p in range(parts)]
    if mode == "memory":
        e = [ctx.scratch.load(n) for n in names]
        pairs = np.concatenate(e) if e else np.zeros((0, 2), np.uint64)
        nodes, roots = components_in_memory(pairs[:, 0], pairs[:, 1])
        removed = nodes != roots
        return nodes[removed], roots[removed], mode
    # partitions of the star rounds: each holds both directions of its share of the edges
    cc_parts = min(parts, max(2, -(-n_edges * EDGE_BYTES // st.memory_budget)))
    docs, kept = components_distributed(names, cc_parts, ctx.map, ctx.scratch)
    return docs, kept, mode


def partitions(ceiling: int, memory_budget: int, records: int) -> int:
    """Edges tasks: ``ceiling`` (the op's ``partitions``) is a ceiling (each edges task
    loads the signatures, and verifying the shingles, of the candidates it meets, so small
    inputs use fewer, fuller ones) unless one partition's records would not fit in a
    quarter of the memory budget (the rest: the verification cache, the candidates'
    shingles, the interpreter)."""
    by_records = min(ceiling, max(2, -(-records // RECORDS_PER_PARTITION)))
    return max(by_records, -(-records * RECORD_BYTES // max(1, memory_budget // BUDGET_SHARE)))
