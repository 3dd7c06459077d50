"""What an elastic resume continues with when the interrupted topology padded its epoch.

With ``drop_last=False`` an epoch's pieces end with ``padded`` repeats of the samples at
the start of its stream (:mod:`.cut`). After an interruption, every worker's part of what
it had not delivered (:meth:`~.worker_share.WorkerPlan.remaining_segments`) may hold such
a sample twice (its original and its repeat, neither delivered yet) or once when the other
copy was delivered already. :func:`without_copies` makes the new stream hold each sample
as often as the epoch still owes it, and none other: the repeated samples are taken out
of the parts that hold them and the owed ones put back, in a part of their own at the
end. The new topology then pads its own epoch from the start of that stream, so the
resumed epoch repeats no more than its own padding (without this, the old padding's
repeats were carried over and padded again: a whole extra step of repeats).

Owed is counted in multisets: a mixed source its quota wraps around puts some samples in
the epoch twice (or more), maybe both in the slots holding the padding or its originals,
and a delivered copy counts as one delivery of its sample. So a sample is owed as often as
it is left in those slots beyond its copies; when fewer are left, the copies delivered
stood in for its occurrences in other slots, taken out of those (:func:`_paid_elsewhere`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from shardwise.plan.segments import PartedStream, Segment, Stream

__all__ = ["repeated_units", "without_copies"]

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
    stream: Stream | PartedStream,
    per: int,
    padded: int,
    sizes: np.ndarray,
    left: Build,
    repeated: Callable[[], np.ndarray],
) -> tuple[np.ndarray, Build]:
    """The parts' sizes and builder of an elastic resume's stream (see the module
    docstring) from those of every slot's undelivered samples (``sizes``, ``left``), when
    the interrupted cut of ``stream`` into pieces of ``per`` samples padded ``padded``;
    ``repeated()``: the units the epoch holds some sample of more than once (sorted)."""
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
    keep, short = _owed(still, *made)
    parts = {s: _drop(b, made[0]) for s, b in built.items()}
    if short:  # copies delivered beyond the holders' own occurrences: paid by the others'
        others = [s for s in range(slots) if s not in parts]
        parts.update(_paid_elsewhere(short, repeated(), others, left))
    new_sizes = np.append(np.asarray(sizes, dtype=np.int64).copy(), len(keep))
    for s, p in parts.items():
        new_sizes[s] = sum(seg.size for seg in p)
    tail = _segments(keep)

    def build(i: int) -> list[Segment]:
        if i == slots:
            return tail
        return parts[i] if i in parts else left(i)

    return new_sizes, build


def _owed(
    still: np.ndarray, made: np.ndarray, copies: np.ndarray
) -> tuple[np.ndarray, dict[int, int]]:
    """What the holders' undelivered samples ``still`` owe the epoch of the repeated
    samples ``made`` (the padding held ``copies`` of each): a key once per occurrence
    owed; and the keys the holders delivered more often than they hold them of their own,
    with how many times more.

    Counted as multisets: a sample may be in the stream more than once of its own (a
    mixed source its quota wraps around), so the holders had their own occurrences of it
    plus its padding copies, and a delivered copy counts as a delivery of the sample. What
    is left beyond the copies is owed, ``left - copies`` (a sample held once: once if no
    copy of it was delivered, else never); when ``left < copies`` the holders delivered it
    ``copies - left`` times beyond their own occurrences, a debt its occurrences in other
    slots, if any, pay (:func:`_paid_elsewhere`)."""
    keys, left = np.unique(still[np.isin(still, made)], return_counts=True)
    held = np.zeros(len(made), dtype=np.int64)
    held[np.searchsorted(made, keys)] = left
    owed = held - copies
    short = dict(zip(made[owed < 0].tolist(), (-owed[owed < 0]).tolist()))
    return np.repeat(made, np.maximum(owed, 0)), short


def _paid_elsewhere(
    short: dict[int, int], repeated: np.ndarray, others: list[int], left: Build
) -> dict[int, list[Segment]]:
    """The parts of ``others`` (the slots not holding the padding or its originals) that
    hold undelivered occurrences of the keys of ``short``, without as many of them as
    ``short`` says were delivered beyond the holders' own (the first ones, in slot order).

    Only a sample of a ``repeated`` unit can be in the epoch twice: for the others (every
    sample of an epoch without mixing, most of a mixed one) no slot is built here, so the
    new stream stays built only where a worker's piece reaches it."""
    twice = set(repeated.tolist())
    debt = {k: c for k, c in short.items() if k >> 32 in twice}
    out: dict[int, list[Segment]] = {}
    for s in others:
        if not debt:
            break
        segments = left(s)
        paid = _take_out(segments, debt)
        if paid is not segments:
            out[s] = paid
    return out


def _take_out(segments: list[Segment], debt: dict[int, int]) -> list[Segment]:
    """``segments`` without the first ``debt[k]`` occurrences of each key ``k`` they hold,
    ``debt`` lowered by those taken out (a key paid off leaves it); ``segments`` itself
    when none is held."""
    out: list[Segment] = []
    taken = False
    for seg in segments:
        keys = (np.int64(seg.unit) << np.int64(32)) | seg.positions()
        keep = np.ones(len(keys), dtype=bool)
        for i in np.flatnonzero(np.isin(keys, np.fromiter(debt, np.int64, len(debt)))).tolist():
            k = int(keys[i])
            if debt.get(k, 0) > 0:
                keep[i], taken = False, True
                debt[k] -= 1
                if not debt[k]:
                    del debt[k]
        if keep.all():
            out.append(seg)
        elif keep.any():
            out.append(Segment(seg.unit, 0, 0, seg.positions()[keep]))
    return out if taken else segments


def repeated_units(stream: Stream | None, counts: np.ndarray) -> np.ndarray:
    """The units ``stream`` (an epoch's own; None: an epoch without mixing) holds some
    sample of more than once (a mixed source its quota wraps around), sorted: only their
    samples can be owed twice after a resume. A unit's occurrences are disjoint ranges
    unless they hold more samples than it has (sources fill their quotas so,
    :func:`.deal.source_arrays`)."""
    if stream is None:
        return np.zeros(0, dtype=np.int64)
    segments = stream.segments
    units = np.fromiter((s.unit for s in segments), np.int64, len(segments))
    held = np.zeros(len(counts), dtype=np.int64)
    np.add.at(held, units, np.diff(stream.ends, prepend=0))
    return np.flatnonzero(held > counts)
