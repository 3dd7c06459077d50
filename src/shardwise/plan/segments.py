"""A sample stream as segments of units, and cutting it into equal consecutive pieces.

Rows are addressed in *permuted-row* coordinates: row ``p`` of unit ``u`` is the
``p``-th entry of that unit's per-epoch row permutation (identity without shuffle).
A segment is a range ``[lo, hi)`` of such positions of one unit, or an explicit array
of them (left over from a partly consumed window when a run resumes elastically).
Everything here is O(segments), never O(samples), except explicit segments, which
are bounded by one window of one worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import repeat
from typing import NamedTuple

import numpy as np

from shardwise.errors import PlanError

__all__ = ["PartedStream", "Segment", "Stream", "range_segments", "unit_stream"]


class Segment(NamedTuple):
    """Positions ``[lo, hi)`` of unit ``unit``, or the explicit positions ``rows``.

    A named tuple: a plan at scale makes a million of them, and a tuple is built several
    times faster than a frozen dataclass."""

    unit: int
    lo: int
    hi: int
    rows: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.rows) if self.rows is not None else self.hi - self.lo

    def cut(self, start: int, stop: int) -> Segment:
        """The sub-segment of stream offsets ``[start, stop)`` inside this segment."""
        if self.rows is not None:
            return Segment(self.unit, 0, 0, self.rows[start:stop])
        return Segment(self.unit, self.lo + start, self.lo + stop)

    def positions(self) -> np.ndarray:
        """The permuted-row positions of this segment."""
        if self.rows is not None:
            return self.rows
        return np.arange(self.lo, self.hi, dtype=np.int64)


class Stream:
    """An ordered list of segments with O(log n) random cutting by offset."""

    def __init__(self, segments: list[Segment], sizes: np.ndarray | None = None) -> None:
        """``sizes``: the segments' sizes when the caller has them (saves a pass)."""
        if sizes is None:
            sizes = np.fromiter((s.size for s in segments), dtype=np.int64, count=len(segments))
        keep = np.flatnonzero(sizes > 0)
        if len(keep) < len(segments):
            segments, sizes = [segments[i] for i in keep.tolist()], sizes[keep]
        self.segments = segments
        self.ends = np.cumsum(sizes)

    @property
    def size(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def slice(self, start: int, stop: int) -> list[Segment]:
        """Segments covering stream offsets ``[start, stop)``; wraps around past the end
        (used to pad with samples from the start of the order)."""
        out: list[Segment] = []
        for a, b in _wrapped(self.size, start, stop):
            first = int(np.searchsorted(self.ends, a, side="right"))
            last = int(np.searchsorted(self.ends, b, side="left"))
            out.extend(self._cut(first, a, b))
            if last > first:  # the segments in between are whole: taken as they are
                out.extend(self.segments[first + 1 : last])
                out.extend(self._cut(last, a, b))
        return out

    def _cut(self, i: int, a: int, b: int) -> list[Segment]:
        """The part of segment ``i`` inside stream offsets ``[a, b)`` (none if empty)."""
        seg_start = int(self.ends[i - 1]) if i else 0
        lo, hi = max(a, seg_start) - seg_start, min(b, int(self.ends[i])) - seg_start
        return [self.segments[i].cut(lo, hi)] if hi > lo else []


class PartedStream:
    """A stream made of consecutive parts of known sizes whose segments are built only
    when a slice reaches them (once each).

    An elastic resume makes one part per worker of the interrupted topology (what it had
    not delivered); working out a part's segments means ordering the window it was in, so
    a worker of the new topology orders only the two or three windows its piece takes.
    """

    def __init__(self, sizes: np.ndarray, build: Callable[[int], list[Segment]]) -> None:
        self.ends = np.cumsum(np.asarray(sizes, dtype=np.int64))
        self._build = build
        self._parts: dict[int, Stream] = {}

    @property
    def size(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    @property
    def parts_built(self) -> int:
        """How many parts were built so far."""
        return len(self._parts)

    def part(self, i: int) -> Stream:
        """Part ``i`` (built on first use)."""
        part = self._parts.get(i)
        if part is None:
            part = self._parts[i] = Stream(self._build(i))
            want = int(self.ends[i] - (self.ends[i - 1] if i else 0))
            if part.size != want:
                raise PlanError(f"part {i} of the stream holds {part.size} samples, not {want}")
        return part

    def slice(self, start: int, stop: int) -> list[Segment]:
        """Segments covering stream offsets ``[start, stop)`` (as :meth:`Stream.slice`)."""
        out: list[Segment] = []
        for a, b in _wrapped(self.size, start, stop):
            first = int(np.searchsorted(self.ends, a, side="right"))
            last = int(np.searchsorted(self.ends, b, side="left"))
            for i in range(first, last + 1):
                lo, hi = (int(self.ends[i - 1]) if i else 0), int(self.ends[i])
                if hi > lo:
                    out.extend(self.part(i).slice(max(a, lo) - lo, min(b, hi) - lo))
        return out


def _wrapped(total: int, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """Offsets ``[start, stop)`` of a stream of ``total`` samples, wrapping around past its
    end, as ranges ``[a, b)`` inside it."""
    while start < stop:
        if total == 0:
            raise PlanError("cannot slice an empty stream")
        base = (start // total) * total
        a, b = start - base, min(stop - base, total)
        yield a, b
        start = base + b


def unit_stream(counts: np.ndarray, order: np.ndarray) -> Stream:
    """Whole units in ``order`` (a permutation of unit ids)."""
    sizes = np.asarray(counts, dtype=np.int64)[order]
    return Stream(
        [Segment(u, 0, n) for u, n in zip(np.asarray(order).tolist(), sizes.tolist())], sizes
    )


def range_segments(unit: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> list[Segment]:
    """Segments ``unit[i], lo[i]:hi[i]`` (built from tuples: a plan at scale makes a million)."""
    return list(map(Segment._make, zip(unit.tolist(), lo.tolist(), hi.tolist(), repeat(None))))
