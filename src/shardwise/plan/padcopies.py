"""What an elastic resume continues with when the interrupted topology padded its epoch.

With ``drop_last=False`` an epoch's pieces end with ``padded`` repeats of the samples at
the start of its stream (:mod:`.cut`). After an interruption, every worker's part of what
it had not delivered (:meth:`~.worker_share.WorkerPlan.remaining_segments`) may hold such
a sample twice (its original and its repeat, neither delivered yet) or once when the other
copy was delivered already. :func:`without_copies` makes the new stream hold each sample
no copy of which was delivered, once, and none other: the repeated samples are taken out
of the parts that hold them and the undelivered ones put back once, in a part of their
own at the end. The new topology then pads its own epoch from the start of that stream,
so the resumed epoch repeats no more than its own padding (without this, the old
padding's repeats were carried over and padded again: a whole extra step of repeats).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardwise.plan.segments import PartedStream, Segment, Stream

__all__ = ["without_copies"]

Build = Callable[[int], list[Segment]]


def _keys(segments: list[Segment]) -> np.ndarray:
    """One int64 per sample: its unit and its position in the unit."""
    parts = [(np.int64(s.unit) << np.int64(32)) | s.positions() for s in segments]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _drop(segments: list[Segment], keys: np.ndarray) -> list[Segment]:
    """``segments`` without the samples of ``keys``."""
    out: list[Segment] = []
    for s in segments:
        pos = s.positions()
        keep = ~np.isin((np.int64(s.unit) << np.int64(32)) | pos, keys)
        if keep.all():
            out.append(s)
        elif keep.any():
            out.append(Segment(s.unit, 0, 0, pos[keep]))
    return out


def _segments(keys: np.ndarray) -> list[Segment]:
    """The samples of ``keys`` as one segment per unit, units in first-seen order."""
    units = keys >> np.int64(32)
    out = []
    for u in dict.fromkeys(units.tolist()):
        rows = np.sort(keys[units == u] & np.int64(0xFFFFFFFF))
        out.append(Segment(int(u), 0, 0, rows))
    return out


def without_copies(
    stream: Stream | PartedStream, per: int, padded: int, sizes: np.ndarray, left: Build
) -> tuple[np.ndarray, Build]:
    """The parts' sizes and builder of an elastic resume's stream (see the module
    docstring) from those of every slot's undelivered samples (``sizes``, ``left``), when
    the interrupted cut of ``stream`` into pieces of ``per`` samples padded ``padded``."""
    n, slots = stream.size, len(sizes)
    if padded <= 0 or per <= 0 or n == 0:
        return sizes, left
    # the samples the padding repeats (at offsets [n, n + padded)), and how often each;
    # their originals lie at offsets [0, min(padded, n)): the slots holding either
    made = np.unique(_keys(stream.slice(n, n + padded)), return_counts=True)
    originals = range(-(-min(padded, n) // per))
    holders = sorted({*originals, *range(n // per, slots)})
    built = {s: left(s) for s in holders}
    still = np.concatenate([_keys(b) for b in built.values()] or [np.zeros(0, np.int64)])
    still_keys, still_counts = np.unique(still[np.isin(still, made[0])], return_counts=True)
    whole = dict(zip(made[0].tolist(), (made[1] + 1).tolist()))  # every copy of each
    keep = np.array(
        [k for k, c in zip(still_keys.tolist(), still_counts.tolist()) if c == whole[k]],
        dtype=np.int64,
    )
    parts = {s: _drop(b, made[0]) for s, b in built.items()}
    new_sizes = np.append(np.asarray(sizes, dtype=np.int64).copy(), len(keep))
    for s, p in parts.items():
        new_sizes[s] = sum(seg.size for seg in p)
    tail = _segments(keep)

    def build(i: int) -> list[Segment]:
        if i == slots:
            return tail
        return parts[i] if i in parts else left(i)

    return new_sizes, build
