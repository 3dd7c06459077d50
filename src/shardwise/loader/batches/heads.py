"""Head windows in the loader (``first_window="heads"``, or ``"auto"`` where the rule of
:func:`~shardwise.loader.planner.blocks_for` says): every unit is read in two
parts, its head (its first ``n // k`` rows, :mod:`shardwise.plan.blocks`) and the rest.

A plan with blocks gives a worker, for each group of units, a window of every unit's head
and then a window of every unit's rest; the rows of a unit in a window are all in one of
its parts. The loader sees each part as a unit of its own, a *part id*: ``u`` for unit
``u``'s head and ``u + U`` for its rest (``U`` units in the dataset), with rows counted
from the part's first row (:class:`HeadWindows`). :class:`PartReading` reads parts: on
plain Parquet a head alone and then the rest continuing its read, each row decoded once
(:mod:`shardwise.loader.read.unit_heads`, through the node cache
:mod:`shardwise.loader.read.cached_parts`), else the whole unit sliced (a tar's or JSONL
range's rest kept for the rest window, :mod:`shardwise.loader.batches.kept_rests`), so the
rows of every part are the rows the plan counts (after a filter and quarantine) in their stored
order. Both paths (in-process threads, DataLoader workers)
build windows, pieces and batches from part ids the same way as from units.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from shardwise.loader.batches import kept_rests
from shardwise.loader.batches.kept_rests import KeptRests
from shardwise.loader.batches.reading import Reading
from shardwise.loader.read.cached_parts import part_reader
from shardwise.loader.read.mixed import place_of
from shardwise.loader.read.values import check_values, without_views
from shardwise.plan.compose import WorkerWindows
from shardwise.plan.segments import Segment

__all__ = ["HeadWindows", "PartReading", "reading_for"]


@dataclass(frozen=True)
class PartReading(Reading):
    """A :class:`Reading` of part ids (see the module docstring).

    Attributes:
        counts: the plan's rows per unit.
        blocks: ``k``: a unit's head is its first ``n // k`` rows.
    """

    counts: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    blocks: int = 1

    @classmethod
    def of(cls, reading: Reading, counts: np.ndarray, blocks: int) -> PartReading:
        """``reading`` in parts of heads of ``1/blocks`` of ``counts``."""
        fields = {f.name: getattr(reading, f.name) for f in dataclasses.fields(Reading)}
        return cls(**fields, counts=np.asarray(counts, dtype=np.int64), blocks=blocks)

    def part(self, p: int) -> tuple[int, int, int]:
        """Part ``p``'s unit and its rows ``[lo, hi)`` in the unit."""
        units = len(self.counts)
        u, rest = p % units, p >= units
        n = int(self.counts[u])
        head = n // self.blocks
        return (u, head, n) if rest else (u, 0, head)

    def first_piece(self, rows: int) -> int | None:
        """The head window's whole batches (when it has one): the first batch waits for
        the heads only, not for the rest window's whole units."""
        return (rows // self.batch_size) * self.batch_size or None

    def unit_rows(self, u: int) -> int:
        """Rows of part ``u`` as indexed (an upper bound of those read)."""
        unit, lo, hi = self.part(u)
        return self.index.units[unit].num_samples - lo if lo else hi

    def stored_unit(self, u: int) -> int | None:
        """A head's unit (a rest's bytes were downloaded for its head: None)."""
        unit, lo, _ = self.part(u)
        return None if lo else unit

    def size(self, u: int) -> int:
        """Part ``u``'s estimated decoded bytes (its share of the unit's)."""
        unit, lo, hi = self.part(u)
        n = max(int(self.counts[unit]), 1)
        return max(1, super().size(unit) * (hi - lo) // n)

    def loader(self) -> Callable[[int], pa.Table]:
        """A function reading one part as one contiguous table (see the module docstring)."""
        whole = super().loader()
        parts = part_reader(self.index, self.columns, self.filter, self.cache, self.schema())
        share = int(self.prefetch_bytes * kept_rests.SHARE)
        kept = KeptRests(whole, share, kept_rests.keeps_rests(self.index))
        fmt = self.batch_format

        def load(p: int) -> pa.Table:
            u, lo, hi = self.part(p)
            if parts is not None:
                table = parts.head(u, hi) if lo == 0 else parts.rest(u, lo, hi - lo)
                if table is not None:
                    table = without_views(table)
                    if fmt != "arrow":
                        unit = self.index.units[u]
                        check_values(table, unit, place_of(self.index, u), dates=fmt != "numpy")
                    return table
            return kept.part(u, lo, hi, int(self.counts[u]))

        def close() -> None:  # with the epoch's windows: units still open, rests kept
            kept.close()
            if parts is not None:
                parts.close()

        load.close = close  # type: ignore[attr-defined]
        return load


def reading_for(reading: Reading, counts: np.ndarray, blocks: int) -> Reading:
    """``reading`` for an epoch planned with ``blocks`` (a loaded state's may not be the
    dataset's): in parts of heads of ``1/blocks`` of ``counts``, or of whole units."""
    if isinstance(reading, PartReading):
        if reading.blocks == blocks:
            return reading
        fields = {f.name: getattr(reading, f.name) for f in dataclasses.fields(Reading)}
        reading = Reading(**fields)
    return PartReading.of(reading, counts, blocks) if blocks > 1 else reading


class HeadWindows:
    """A worker's windows (of a plan with blocks) in part ids (see the module docstring).

    A window's parts are listed in the order of its segments, from the segments where the
    worker has them (a ``WorkerPlan``: then the first window's parts are read while its
    order is worked out), else from its rows."""

    def __init__(self, wp: WorkerWindows, reading: PartReading) -> None:
        self.wp, self.reading = wp, reading
        self.slot, self.skip, self.num_samples = wp.slot, wp.skip, wp.num_samples
        self.heads = reading.counts // reading.blocks
        self._listed: list[list[int]] | None = None

    def iter_windows(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        """The worker's windows: their parts, then (part, row in the part) per place."""
        listed = self._segment_parts()
        for w, (units, unit_ids, rows) in enumerate(self.wp.iter_windows()):
            rest = rows >= self.heads[unit_ids]
            parts = unit_ids + rest * len(self.heads)
            local = rows - np.where(rest, self.heads[unit_ids], 0)
            if listed is not None:
                yield listed[w], parts, local
                continue
            there = set(parts.tolist())
            both = [p for u in units for p in (u, u + len(self.heads))]
            yield [p for p in both if p in there], parts, local

    def _segment_parts(self) -> list[list[int]] | None:
        """The parts of each window left after ``skip``, from the segments (None when the
        worker does not show them)."""
        windows = getattr(self.wp, "windows", None)
        if windows is None:
            return None
        if self._listed is None:
            kept = len(self.wp.window_units())
            everything = windows()
            self._listed = [
                list(dict.fromkeys(self._part(s) for s in window))
                for window in everything[len(everything) - kept :]
            ]
        return self._listed

    def _part(self, seg: Segment) -> int:
        first = seg.rows[0] if seg.rows is not None else seg.lo
        return seg.unit + len(self.heads) * int(first >= self.heads[seg.unit])

    def window_units(self) -> list[list[int]]:
        """The parts of each window, in the order :meth:`iter_windows` gives them."""
        listed = self._segment_parts()
        return listed if listed is not None else [u for u, _, _ in self.iter_windows()]

    def units(self) -> list[int]:
        """Parts in first-use order."""
        return list(dict.fromkeys(p for units in self.window_units() for p in units))
