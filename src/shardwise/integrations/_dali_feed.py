"""The iterable of one (rank, DALI Python worker): what a DALI parallel external source
iterates, one per worker (see :mod:`shardwise.integrations.dali`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from shardwise.errors import PlanError
from shardwise.integrations._arrays import column_arrays
from shardwise.loader import StreamingDatasetBase

__all__ = ["WorkerFeed"]


class WorkerFeed:
    """The iterable of one (rank, DALI worker): ``per_worker`` samples per ``next()``.

    Each item is a tuple with one entry per column (for ``num_outputs=len(columns)``):
    a list of per-sample arrays or one dense array (see :mod:`._arrays`). Picklable, so
    DALI can send it to a worker started with ``spawn``. Each ``iter()`` in a process
    starts that process's next epoch.
    """

    def __init__(
        self, ds: StreamingDatasetBase, worker: int, num_workers: int, columns: Sequence[str]
    ) -> None:
        self._ds = ds
        self.rank = ds.dp_rank  # the data-parallel rank (the rank unless model-parallel groups)
        self.worker, self.num_workers = worker, num_workers
        self.columns = list(columns)
        self.start_epoch = ds.epoch
        self._iters: dict[int, int] = {}  # pid -> iter() calls: a forked copy counts its own

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        pid = os.getpid()
        n = self._iters.get(pid, 0)
        self._iters[pid] = n + 1
        return self._epoch(self.start_epoch + n)

    def __repr__(self) -> str:
        return (
            f"WorkerFeed(rank={self.rank}, worker={self.worker} of {self.num_workers}, "
            f"per_worker={self._ds.batch_size}, columns={self.columns})"
        )

    def __len__(self) -> int:
        """Batches this source yields in the epoch it started on."""
        return self._ds.plan().batches_per_rank // self.num_workers

    def _epoch(self, epoch: int) -> Iterator[tuple[Any, ...]]:
        ds = self._ds
        ds.set_epoch(epoch)  # keeps a loaded resume point of this epoch
        per_worker = ds.batch_size
        for batch in ds.iter_shard(self.rank, ds.dp_size, self.worker, self.num_workers):
            if batch.num_rows != per_worker:
                raise PlanError(
                    f"DALI source {self.worker} of rank {self.rank} got {batch.num_rows} "
                    f"samples, not per_worker={per_worker}"
                )
            yield tuple(column_arrays(c, batch.column(c)) for c in self.columns)
