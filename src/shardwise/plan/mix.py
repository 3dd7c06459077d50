"""Mixing sources (pure numpy): exact integer quotas per epoch and which samples fill them.

Every source owns a range of the dataset's units. Per epoch each source contributes an
exact integer quota of samples:

* ``weight``: quotas split ``epoch_size`` (default: all samples of all sources) by the
  largest-remainder rule (:func:`largest_remainder`): shares rounded down, the leftover
  samples to the largest fractional parts (float64), ties to the earlier source.
* ``repeat`` / ``choose``: ``floor(size * repeat)`` or ``choose`` samples; with an
  ``epoch_size`` these become the weights instead.

The quotas are then scaled (largest remainder again) to a whole number of global batches,
down with ``drop_last`` and up without it, so a fresh epoch neither drops nor pads.

A quota of ``m * size + r`` (``r < size``) takes every sample of the source ``m`` times
and ``r`` more: the next ``r`` of the source's fixed cyclic order of units, starting
where the previous epoch's stopped. So upsampling shows every sample once before any
twice, downsampling takes a different subset each epoch (every unit before any again),
and a source smaller than its quota wraps around.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from shardwise.errors import ConfigError, PlanError
from shardwise.plan.deal import MIX, source_arrays
from shardwise.plan.order import UNITS, rng_for, spread_order
from shardwise.plan.segments import Segment, Stream, range_segments
from shardwise.plan.topology import Topology

__all__ = [
    "Mixing",
    "Rule",
    "counts_key",
    "kept_stream",
    "largest_remainder",
    "order_segments",
    "source_segments",
]

BATCHINGS = ("random", "stratified")
MAX_SAMPLES = 2**62  # more samples than any epoch holds; larger counts would overflow int64


@dataclass(frozen=True)
class Rule:
    """How much of one source an epoch takes: exactly one of the three, or none (repeat 1)."""

    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("weight", "repeat", "choose") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ConfigError(
                f"give a source at most one of weight=, repeat=, choose= (got {given})"
            )
        for k in given:
            v = getattr(self, k)
            kind = numbers.Integral if k == "choose" else numbers.Real
            if isinstance(v, bool) or not isinstance(v, kind):
                raise ConfigError(
                    f"{k}= must be a {'whole ' if k == 'choose' else ''}number, got {v!r}"
                )
            x = float(v) if k != "choose" or v < MAX_SAMPLES else float(MAX_SAMPLES)
            if not math.isfinite(x) or x < 0 or (k != "weight" and x >= MAX_SAMPLES):
                raise ConfigError(
                    f"{k}= must be a finite number >= "
                    f"0{'' if k == 'weight' else ' (below 2**62)'}, "
                    f"got {v!r}"
                )
            # plain Python numbers (not numpy's): saved states hold them and must stay JSON
            object.__setattr__(self, k, int(getattr(self, k)) if k == "choose" else x)

    def natural(self, size: int) -> int:
        """Samples per epoch of a source of ``size`` samples by ``repeat``/``choose`` alone:
        ``floor(size * repeat)``, where a product within a few float roundings of a whole
        number is that number (``0.57`` of 100 samples is 57, not the 56 of the float
        product 56.99999999999999), or ``choose``."""
        if self.choose is not None:
            return int(self.choose)
        if self.repeat is None:
            return int(size)
        product = float(size) * float(self.repeat)
        near = round(product)
        n = (
            near
            if abs(product - near) <= 8 * np.finfo(np.float64).eps * max(product, 1.0)
            else math.floor(product)
        )
        if n >= MAX_SAMPLES:
            raise ConfigError(
                f"repeat={self.repeat!r} of {size} samples is {n} samples per epoch, too many"
            )
        return n


@dataclass(frozen=True)
class Mixing:
    """Sources of one dataset and how an epoch mixes them.

    Attributes:
        bounds: source ``s`` owns units ``bounds[s]:bounds[s + 1]`` (``len(rules) + 1`` entries).
        rules: one :class:`Rule` per source.
        epoch_size: samples per epoch before rounding to whole global batches (None: natural).
        batching: ``"random"`` (sources mixed across the epoch) or ``"stratified"`` (every
            batch holds each source's share).
    """

    bounds: tuple[int, ...]
    rules: tuple[Rule, ...]
    epoch_size: int | None = None
    batching: str = "random"

    def __post_init__(self) -> None:
        if self.batching not in BATCHINGS:
            raise ConfigError(f"batching must be 'random' or 'stratified', got {self.batching!r}")
        if len(self.bounds) != len(self.rules) + 1 or not self.rules:
            raise ConfigError("a mixing needs one rule per source and the sources' unit bounds")
        weighted = {r.weight is not None for r in self.rules}
        if len(weighted) > 1:
            raise ConfigError("give weight= to every source or to none (then repeat= or choose=)")
        e = self.epoch_size
        if e is not None and (
            isinstance(e, bool) or not isinstance(e, numbers.Integral) or not 1 <= e < MAX_SAMPLES
        ):
            raise ConfigError(
                "epoch_size must be a whole number of samples, at least 1 (and below 2**62), got "
                f"{e!r}"
            )
        if e is not None:
            object.__setattr__(self, "epoch_size", int(e))

    def sizes(self, counts: np.ndarray) -> np.ndarray:
        """Samples per source."""
        ends = np.cumsum(np.concatenate([[0], np.asarray(counts, dtype=np.int64)]))
        b = np.asarray(self.bounds)
        return np.asarray(ends[b[1:]] - ends[b[:-1]], dtype=np.int64)

    def quotas(self, counts: np.ndarray) -> np.ndarray:
        """Each source's samples per epoch before rounding to whole global batches."""
        sizes = self.sizes(counts)
        if self.rules[0].weight is not None:
            weights = np.array([r.weight for r in self.rules], dtype=np.float64) * (sizes > 0)
            total = self.epoch_size if self.epoch_size is not None else int(sizes.sum())
            return largest_remainder(total, weights)
        natural = np.array(
            [r.natural(s) for r, s in zip(self.rules, sizes.tolist())], dtype=np.int64
        ) * (sizes > 0)
        if self.epoch_size is not None:
            return largest_remainder(self.epoch_size, natural.astype(np.float64))
        if sum(natural.tolist()) >= MAX_SAMPLES:
            raise ConfigError(
                f"the sources' rules ask for {sum(natural.tolist())} samples per epoch, too many"
            )
        return natural

    def aligned_quotas(self, counts: np.ndarray, topology: Topology) -> np.ndarray:
        """:meth:`quotas` scaled to a whole number of ``topology``'s global batches."""
        q = self.quotas(counts)
        quantum = topology.slots * topology.batch_size
        total = int(q.sum())
        aligned = (total // quantum if topology.drop_last else -(-total // quantum)) * quantum
        if aligned == 0:
            raise PlanError(
                f"the sources' quotas ({total} samples) are fewer than "
                f"world_size*num_workers*batch_size = {quantum}"
            )
        return q if aligned == total else largest_remainder(aligned, q.astype(np.float64))

    def rounding(self, counts: np.ndarray, topology: Topology) -> tuple[int, int]:
        """``(left out, padded)``: the samples :meth:`aligned_quotas` takes from or adds to
        :meth:`quotas` (a plan reports them as it reports a cut's tail)."""
        total = int(self.quotas(counts).sum())
        aligned = int(self.aligned_quotas(counts, topology).sum())
        return max(0, total - aligned), max(0, aligned - total)


def largest_remainder(total: int, weights: np.ndarray | Sequence[float]) -> np.ndarray:
    """``total`` split in integers proportional to ``weights``: shares rounded down, the
    rest one each to the largest fractional parts, computed in float64 (ties, equal in
    float64, go to the earlier index; parts equal only in exact arithmetic may not tie)."""
    w = np.asarray(weights, dtype=np.float64)
    if total < 0 or (w < 0).any() or not np.isfinite(w).all():
        raise ConfigError("largest_remainder needs a total >= 0 and finite weights >= 0")
    if total and not (w > 0).any():
        raise PlanError("every source has weight 0 or no samples: nothing to mix")
    if not total:
        return np.zeros(len(w), dtype=np.int64)
    with np.errstate(over="ignore"):
        if not np.isfinite(w.sum()):  # weights near the float maximum: their sum overflows
            w = w / w.max()
    exact = w / w.sum() * total
    base = np.floor(exact).astype(np.int64)
    rest = int(total - base.sum())
    order = np.argsort(-(exact - base), kind="stable")
    base[order[:rest]] += 1
    return np.asarray(base, dtype=np.int64)


def source_segments(
    counts: np.ndarray,
    lo: int,
    hi: int,
    quota: int,
    *,
    seed: int,
    epoch: int,
    source: int,
    shuffle: bool,
) -> list[Segment]:
    """The segments of units ``lo:hi`` (one source) that fill ``quota`` samples this epoch
    (:func:`~shardwise.plan.deal.source_arrays` as segments)."""
    return range_segments(
        *source_arrays(
            counts, lo, hi, quota, seed=seed, epoch=epoch, source=source, shuffle=shuffle
        )
    )


def order_segments(
    segments: list[Segment],
    topology: Topology,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    salt: int = 0,
) -> Stream:
    """The epoch's stream of ``segments``: stratified over workers and windows
    (:func:`~shardwise.plan.order.spread_order`), or as given without ``shuffle``."""
    if not shuffle:
        return Stream(segments)
    sizes = np.fromiter((s.size for s in segments), dtype=np.int64, count=len(segments))
    order = spread_order(
        sizes, topology.slots, topology.interleave, rng_for(seed, epoch, UNITS, MIX, salt)
    )
    return Stream([segments[i] for i in order.tolist()], sizes[order])


# the last few epoch streams built: a resume (or a state_dict, which plans and then resumes)
# plans the interrupted epoch again, and its stream is the costly part
_STREAMS: OrderedDict[tuple[object, ...], Stream] = OrderedDict()
STREAMS_KEPT = 4


def counts_key(counts: np.ndarray) -> str:
    """A digest of per-unit counts, for :func:`kept_stream` keys."""
    return hashlib.sha1(np.ascontiguousarray(counts, dtype=np.int64).tobytes()).hexdigest()


def kept_stream(key: tuple[object, ...], build: Callable[[], Stream]) -> Stream:
    """The stream ``build`` makes, kept for the same ``key`` (streams are never modified)."""
    stream = _STREAMS.get(key)
    if stream is None:
        stream = _STREAMS[key] = build()
        while len(_STREAMS) > STREAMS_KEPT:
            _STREAMS.popitem(last=False)
    return stream
