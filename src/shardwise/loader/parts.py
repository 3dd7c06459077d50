"""The small objects a ``StreamingDataset`` is made of besides its :class:`Ranks`, made from
its checked arguments: its :class:`Planner` (what every plan of it shares), its
:class:`Reading` (how its units are read and what they become) and its
:class:`LoaderState` (where it is in an epoch); and the checks that need them, made when
the dataset is: the columns exist, one worker's topology fits the batch size, and there
is something to stream. Each epoch, its :class:`HeadStart` (the node cache filled with the
workers' first units while they start).

The dataset keeps its checked arguments as attributes of the same names (``ds.batch_size``,
``ds.index``, ...); :class:`Checked` names the ones its parts are made from.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Protocol

import numpy as np
import pyarrow.compute as pc

from shardwise.formats import OnError, Quarantine
from shardwise.index import DatasetIndex
from shardwise.loader.batches.convert import Padding
from shardwise.loader.batches.heads import PartReading
from shardwise.loader.batches.reading import BatchFormat, Reading
from shardwise.loader.placement import Ranks
from shardwise.loader.planner import Planner, blocks_for
from shardwise.loader.read.headstart import HeadStart, head_start
from shardwise.loader.read.mixed import MixedIndex, unit_reader
from shardwise.loader.read.opening import check_not_empty
from shardwise.loader.state import LoaderState
from shardwise.loader.stats import mixing_key
from shardwise.plan import Mixing, Plan, Topology
from shardwise.storage.cache import NodeCache

__all__ = [
    "Checked",
    "check_streamable",
    "make_planner",
    "make_reading",
    "make_state",
    "reads_in_parts",
    "start_head",
]


class Checked(Protocol):
    """A dataset's checked arguments and what they opened, by the names it keeps them under
    (see ``StreamingDataset``'s Args)."""

    index: DatasetIndex | MixedIndex
    cache: NodeCache | None
    columns: list[str] | None
    filter: pc.Expression | None
    on_error: OnError
    batch_format: BatchFormat | None
    pad_to: Padding
    num_threads: int
    pin_memory: bool
    prefetch_bytes: int
    batch_size: int
    drop_last: bool
    interleave: int
    seed: int
    shuffle: bool
    mixing: Mixing | None
    canonical_workers: int | None
    ranks: Ranks
    counts: np.ndarray
    quarantine: Quarantine
    blocks: int
    first_window: str | None


def make_planner(ds: Checked) -> Planner:
    """The dataset's planner, for its data-parallel ranks and workers."""
    return Planner(
        counts=ds.counts,
        batch_size=ds.batch_size,
        drop_last=ds.drop_last,
        interleave=ds.interleave,
        seed=ds.seed,
        shuffle=ds.shuffle,
        mixing=ds.mixing,
        canonical_workers=ds.canonical_workers,
        dp_size=ds.ranks.dp_size,
        num_workers=ds.ranks.num_workers,
        blocks=ds.blocks,
    )


def make_reading(ds: Checked) -> Reading:
    """How the dataset's units are read (through its node cache, if any) and what they
    become; in parts with head windows (:mod:`shardwise.loader.batches.heads`)."""
    reading = Reading(
        index=ds.index,
        columns=ds.columns,
        filter=ds.filter,
        on_error=ds.on_error,
        batch_format=ds.batch_format,
        batch_size=ds.batch_size,
        interleave=ds.interleave,
        prefetch_bytes=ds.prefetch_bytes,
        pad_to=ds.pad_to,
        num_threads=ds.num_threads,
        pin_memory=ds.pin_memory,
        cache=ds.cache,
    )
    return PartReading.of(reading, ds.counts, ds.blocks) if ds.blocks > 1 else reading


def make_state(ds: Checked) -> LoaderState:
    """The dataset's state at the start of epoch 0 (a saved state must agree with its
    counts, and with its sources and their rules when it mixes them); the channel it
    tells DataLoader workers the epoch through is removed with the dataset."""
    key = mixing_key(ds.index, ds.mixing, ds.canonical_workers)
    state = LoaderState(ds.counts, key, blocks=ds.blocks, first_window=ds.first_window)
    weakref.finalize(ds, state.channel.remove)
    return state


def first_blocks(ds: Checked) -> int:
    """``k`` of the dataset's head windows (1: whole units), from ``ds.first_window``,
    planned for one rank of one worker (:func:`~shardwise.loader.planner.blocks_for`)."""
    one = Topology(1, 1, ds.batch_size, ds.drop_last, ds.interleave)
    return blocks_for(
        ds.first_window,
        ds.counts,
        one,
        ds.mixing,
        parts=reads_in_parts(ds.index, ds.filter),
        shuffle=ds.shuffle,
        unit_bytes=mean_unit_bytes(ds.index, ds.counts),
    )


def mean_unit_bytes(index: DatasetIndex | MixedIndex, counts: np.ndarray) -> float:
    """The stored bytes of the units that yield rows, on average (0: none yields any)."""
    sizes = np.array([u.num_bytes for u in index.units], dtype=np.float64)
    live = sizes[np.asarray(counts) > 0]
    return float(live.mean()) if len(live) else 0.0


def reads_in_parts(index: DatasetIndex | MixedIndex, filter: pc.Expression | None) -> bool:
    """Whether head windows read the units in two parts, each row decoded once (plain
    Parquet of one dataset, without a filter; see :mod:`shardwise.loader.read.unit_heads`),
    from the format and the arguments alone (not from where the files are, nor the node
    cache), so that ``first_window="auto"`` plans the same epochs everywhere."""
    return isinstance(index, DatasetIndex) and index.format == "parquet" and filter is None


def check_streamable(ds: Checked, planner: Planner) -> None:
    """Refuse now what would fail at the first batch: columns the dataset does not have, a
    batch size (and the rest) that one worker's topology does not fit, nothing to stream."""
    unit_reader(ds.index, ds.columns, ds.filter, ds.on_error)
    planner.topology(1)
    check_not_empty(ds.index, ds.counts, ds.filter, ds.quarantine)


def start_head(
    previous: HeadStart | None, ds: Checked, plan: Callable[[], Plan], workers: int, resuming: bool
) -> HeadStart | None:
    """The dataset's head start of a new epoch (``previous`` stopped): this rank's
    ``workers`` first units of ``plan`` fetched into its node cache, up to
    ``prefetch_bytes`` per worker, as the workers will read them (every column under a
    filter), unless ``resuming`` (see :func:`~shardwise.loader.read.headstart.head_start`)."""
    columns = None if ds.filter is not None else ds.columns  # what the workers read
    return head_start(
        previous,
        ds.index,
        ds.cache,
        plan,
        ds.ranks.dp_rank,
        workers,
        ds.prefetch_bytes,
        resuming,
        columns,
    )
