"""Random batching of mixed sources (pure numpy): every worker's piece of the epoch holds
each source in its share.

A DataLoader batch comes from one worker, and a worker's batches are stratified samples
of its windows (:func:`~shardwise.plan.order.stratified_order`), so the make-up of a
worker's piece, and of each of its windows, is the make-up of its batches. Dealing whole
units to workers (as an unmixed epoch does) leaves a worker with more of one source and
less of another, by as much as a unit of each; here every source is dealt to every
worker in proportion, exactly up to one sample:

1. Each source's samples for the epoch (its quota, :func:`source_arrays`) are put in a
   seeded random order of segments (per epoch; ``shuffle=False``: the source's own order).
2. Source ``s`` gives slot ``i`` (``rank * num_workers + worker``) ``n[s, i]`` samples,
   ``quota // slots`` or one more (:func:`slot_shares`): the remainders ``quota % slots``
   of all sources, laid end to end from a seeded offset, are dealt to the slots in turn,
   so every slot gets the same number of extras (the quotas add up to whole global
   batches) and no slot more than one of a source.
3. The source's ordered segments are cut into ``slots`` consecutive pieces of those
   sizes (a unit is split only where a piece ends), and each slot's pieces of all
   sources are merged by their position inside the slot's share of each source. So any
   run of consecutive segments of a slot, and so every window, holds each source in
   proportion, give or take one segment.

The slot pieces come one after the other in the stream, each of the same whole number of
batches, so the plan's cut gives every slot exactly its piece.
"""

from __future__ import annotations

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.order import UNITS, rng_for
from shardwise.plan.segments import Stream, range_segments

__all__ = ["DEAL_VERSION", "dealt_stream", "slot_shares", "source_arrays"]

# the layout of random mixed plans: saved states record it, and a state of another layout
# cannot resume (1: whole units dealt by size, before this module; 2: dealt in proportion)
DEAL_VERSION = 2
CYCLE, MIX, DEAL = 0x4379, 0x4D78, 0x446C  # seed stream names
MAX_SEGMENTS = 2**28  # pieces of one source in one epoch: more could not be planned in memory
Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]  # unit, lo, hi of each segment


def source_arrays(
    counts: np.ndarray,
    lo: int,
    hi: int,
    quota: int,
    *,
    seed: int,
    epoch: int,
    source: int,
    shuffle: bool,
) -> Arrays:
    """The segments of units ``lo:hi`` (one source) that fill ``quota`` samples this epoch,
    as arrays: every sample ``quota // size`` times, then the next ``quota % size`` of the
    source's fixed cyclic order of units, from where the previous epoch stopped."""
    own = np.asarray(counts[lo:hi], dtype=np.int64)
    size = int(own.sum())
    empty = np.empty(0, dtype=np.int64)
    if quota <= 0 or size == 0:
        return empty, empty, empty
    passes, rest = divmod(int(quota), size)
    if passes * len(own) > MAX_SEGMENTS:
        raise PlanError(
            f"the source of units {lo}:{hi} ({size} samples) would be read {passes} times per "
            f"epoch for its quota of {quota} samples, too many to plan; give it a smaller "
            "weight, repeat or choose, or a larger share of the data"
        )
    order = rng_for(seed, source, CYCLE).permutation(len(own)) if shuffle else np.arange(len(own))
    sizes = own[order]
    keep = sizes > 0
    unit, sizes = lo + order[keep], sizes[keep]
    ends = np.cumsum(sizes)
    units, los, his = (
        [np.tile(unit, passes)],
        [np.zeros(len(unit) * passes, dtype=np.int64)],
        [np.tile(sizes, passes)],
    )
    start = (epoch * rest) % size
    for a, b in ((start, min(start + rest, size)), (0, max(0, start + rest - size))):
        if b <= a:
            continue
        idx = np.arange(
            np.searchsorted(ends, a, side="right"), np.searchsorted(ends, b, side="left") + 1
        )
        begin = ends[idx] - sizes[idx]
        plo, phi = np.maximum(a, begin) - begin, np.minimum(b, ends[idx]) - begin
        part = phi > plo
        units.append(unit[idx[part]])
        los.append(plo[part])
        his.append(phi[part])
    return np.concatenate(units), np.concatenate(los), np.concatenate(his)


def slot_shares(quotas: np.ndarray, slots: int, offset: int = 0) -> np.ndarray:
    """``n[s, i]``: samples of source ``s`` in slot ``i``; rows sum to ``quotas``, columns
    are equal, and each entry is ``quota // slots`` or one more."""
    quotas = np.asarray(quotas, dtype=np.int64)
    if int(quotas.sum()) % slots:
        raise PlanError(
            f"the quotas ({int(quotas.sum())} samples) do not split into {slots} equal pieces"
        )
    shares = np.repeat((quotas // slots)[:, None], slots, axis=1)
    rest = quotas % slots
    first = offset + np.concatenate([[0], np.cumsum(rest)[:-1]])
    for s, (f, r) in enumerate(zip(first.tolist(), rest.tolist())):
        shares[s, (f + np.arange(r)) % slots] += 1
    return shares


def _split(segs: Arrays, share: np.ndarray) -> tuple[np.ndarray, ...]:
    """``segs`` cut into consecutive pieces of ``share[i]`` samples for slot ``i``: each
    cut segment's unit, lo, hi, slot and midpoint as a fraction of the slot's share."""
    unit, lo, hi = segs
    ends = np.cumsum(hi - lo)
    bounds = np.concatenate([[0], np.cumsum(share)])
    points = np.sort(np.concatenate([ends, bounds]))
    points = points[np.concatenate([[True], points[1:] != points[:-1]])]  # from 0 (bounds[0])
    a, b = points[:-1], points[1:]
    seg = np.searchsorted(ends, a, side="right")
    slot = np.searchsorted(bounds, a, side="right") - 1
    plo = lo[seg] + a - (ends[seg] - (hi[seg] - lo[seg]))
    key = ((a + b) / 2 - bounds[slot]) / share[slot]
    return unit[seg], plo, plo + (b - a), slot, key


def dealt_stream(
    counts: np.ndarray,
    bounds: tuple[int, ...],
    quotas: np.ndarray,
    slots: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
) -> Stream:
    """The epoch's stream of mixed sources (units ``bounds[s]:bounds[s + 1]`` of source
    ``s``, ``quotas[s]`` samples of it), slot after slot, each holding every source in
    proportion (see the module docstring)."""
    counts = np.asarray(counts, dtype=np.int64)
    offset = int(rng_for(seed, epoch, UNITS, MIX, DEAL).integers(slots)) if shuffle else 0
    shares = slot_shares(quotas, slots, offset)
    cols: list[tuple[np.ndarray, ...]] = []
    for s, quota in enumerate(np.asarray(quotas).tolist()):
        segs = source_arrays(
            counts,
            bounds[s],
            bounds[s + 1],
            int(quota),
            seed=seed,
            epoch=epoch,
            source=s,
            shuffle=shuffle,
        )
        if not len(segs[0]):
            continue
        if shuffle:
            perm = rng_for(seed, epoch, UNITS, MIX, DEAL, s).permutation(len(segs[0]))
            segs = (segs[0][perm], segs[1][perm], segs[2][perm])
        pieces = _split(segs, shares[s])
        cols.append((*pieces, np.full(len(pieces[0]), s)))
    if not cols:
        return Stream([])
    unit, lo, hi, slot, key, source = (np.concatenate([c[k] for c in cols]) for k in range(6))
    order = np.lexsort((source, key, slot))
    unit, lo, hi = unit[order], lo[order], hi[order]
    return Stream(range_segments(unit, lo, hi), hi - lo)
