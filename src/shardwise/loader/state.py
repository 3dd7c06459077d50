"""What a :class:`~shardwise.loader.dataset.StreamingDatasetBase` saves and loads, and how
the training process tells DataLoader workers the epoch and resume point it set.

A mixin: the dataset holds the counts, plan, channel and positions; this module holds the
rules that turn them into a saved state and back (exact and elastic resume)."""

from __future__ import annotations

import hashlib
import os
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.errors import ConfigError, PlanError
from shardwise.index import DatasetIndex
from shardwise.loader._args import check_int, check_state
from shardwise.loader.channel import Seen, TopologyChannel, in_dataloader_worker
from shardwise.loader.position import Position
from shardwise.loader.sources import MixedIndex
from shardwise.loader.stats import mixing_key
from shardwise.plan import Mixing, Plan, Resume
from shardwise.plan.compose import WindowSource

STATE_VERSION = 1


class LoaderState:
    """Saving and loading the loader's position (mixed into the dataset)."""

    index: DatasetIndex | MixedIndex
    counts: np.ndarray
    epoch: int
    seed: int
    shuffle: bool
    mixing: Mixing | None
    canonical_workers: int | None
    dp_size: int
    num_workers: int | None
    _explicit_workers: bool
    _counts_digest: str | None
    _resumes: list[Resume]
    _channel: TopologyChannel
    _seen: Seen | None
    _position: Position | None
    _resume_at: Position | None
    _control: int
    _pinned: bool
    _last_pass: dict[str, dict[str, int]]
    _set_at: float

    if TYPE_CHECKING:

        def plan(self, num_workers: int | None = None, world_size: int | None = None) -> Plan: ...

    def _start_state(self) -> None:
        """Epoch 0, no resume point, and the channel DataLoader workers report through."""
        self.epoch = 0
        self._counts_digest = None
        self._resumes = []
        self._channel = TopologyChannel.new()  # where DataLoader workers say how many they are
        weakref.finalize(self, self._channel.remove)
        self._seen = None  # the topology iterating in this process, if any
        self._position = None  # what the current iteration yielded
        self._resume_at = None  # a worker's own saved position
        self._control = 0  # number of the last epoch/resume published to or taken from workers
        self._pinned = False  # a worker's own copy loaded a state: its next pass is that epoch
        self._last_pass = {}  # the in-process pass records by slot (see channel.py)
        self._set_at = 0.0  # when set_epoch or load_state_dict last ran in this process

    def _start_at(self, wp: WindowSource, here: Position) -> Position:
        """Where the worker ``wp`` at ``here`` starts: after the resume point's progress when
        it is this worker's, or the same worker's of another rank (``wp`` then skips it), else
        at its start. Ranks advance in lockstep over equal worker pieces, so one rank's
        position is every rank's: frameworks that checkpoint on rank 0 alone (Lightning, HF)
        resume every rank from it."""
        if self._resume_at is not None and _same_worker(self._resume_at, here):
            done = min(self._resume_at.samples, wp.num_samples)
            wp.skip, wp.num_samples = wp.skip + done, wp.num_samples - done
            here = Position(*here.where(), done)
        self._resume_at, self._position = None, here
        return here

    def _publish(self) -> None:
        """Tell DataLoader workers that keep their dataset (``persistent_workers=True``)
        the epoch and resume point set in the training process."""
        if in_dataloader_worker():
            return
        self._set_at = time.time()
        self._control += 1
        self._channel.publish(
            {
                "n": self._control,
                "epoch": self.epoch,
                "resumes": [r.to_dict() for r in self._resumes],
            }
        )

    def _begin_pass(self, rank: int, worker_id: int) -> None:
        """Start a pass of (data-parallel) ``rank``'s worker ``worker_id`` over the dataset: the
        epoch set by ``set_epoch`` or ``load_state_dict`` if this is the slot's first pass
        since, else the epoch after the slot's previous pass (see channel.py)."""
        worker = in_dataloader_worker()
        if worker:
            self._follow()
            slot = f"{os.getppid()}.{rank}.{worker_id}"
            last = self._channel.last_pass(slot)
        else:
            slot = f"{rank}.{worker_id}"
            last = self._last_pass.get(slot)
        if not self._pinned and last is not None and last["n"] == self._control:
            self.epoch = last["epoch"] + 1  # a new pass: the next epoch, from its start
            self._resumes, self._resume_at = [], None
        self._pinned = False
        if worker:
            self._channel.record_pass(slot, self._control, self.epoch)
        else:
            self._last_pass[slot] = {"n": self._control, "epoch": self.epoch}

    def _follow(self) -> None:
        """In a DataLoader worker: take what the training process set since this copy of
        the dataset was made."""
        control = self._channel.control()
        if control is not None and int(control["n"]) > self._control:
            self._control = int(control["n"])
            if int(control["epoch"]) != self.epoch:
                self._resume_at = None
            self.epoch = int(control["epoch"])
            self._resumes = [Resume.from_dict(r) for r in control["resumes"]]

    def _digest(self) -> str:
        if self._counts_digest is None:  # asked for after every batch by StatefulDataLoader
            self._counts_digest = hashlib.sha1(self.counts.tobytes()).hexdigest()[:16]
        return self._counts_digest

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The position after ``consumed_batches`` batches of this rank in this epoch.

        Counted from the start of the epoch, or from the loaded state's position when the
        epoch was resumed. Every rank saves the same state (ranks advance together).
        Without ``consumed_batches`` (as torchdata's ``StatefulDataLoader`` calls it, in
        each worker), the state is this worker's own position: the samples its current
        iteration yielded.
        """
        if consumed_batches is None:
            return self._state(
                position=(self._position or Position(self.epoch, 0, 1, 0, 1)).to_dict()
            )
        consumed_batches = check_int("consumed_batches", consumed_batches)
        world_size, num_workers = self._consumer(consumed_batches)
        self.sync_epoch()
        p = self.plan(num_workers, world_size)
        if not 0 <= consumed_batches <= p.batches_per_rank:
            raise PlanError(
                f"consumed_batches must be in [0, {p.batches_per_rank}], got {consumed_batches}"
            )
        return self._state(resumes=[r.to_dict() for r in p.resume(consumed_batches).resumes])

    def _state(self, **fields: Any) -> dict[str, Any]:
        state = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "counts": self._digest(),
            "resumes": [r.to_dict() for r in self._resumes],
        }
        if (mixing := mixing_key(self.index, self.mixing, self.canonical_workers)) is not None:
            state["mixing"] = mixing
        state.update(fields)
        return state

    def sync_epoch(self) -> int:
        """The epoch the latest pass streamed (DataLoader workers advance epochs by themselves
        and report them); this object takes it on (without the resume point of another epoch).

        Returns:
            The current epoch.
        """
        seen = [s for s in (self._seen, self._channel.read()) if s is not None]
        if seen:
            latest = max(seen, key=lambda s: s.at)
            newer = latest.at > self._set_at  # a pass begun after the last set_epoch/load
            if newer and latest.epoch is not None and latest.epoch != self.epoch:
                self.epoch, self._resumes = latest.epoch, []
        return self.epoch

    def _consumer(self, consumed_batches: int) -> tuple[int, int]:
        """(world_size, num_workers) of whatever iterated this dataset most recently: a
        DataLoader's workers (through the channel) or this process itself."""
        seen = [s for s in (self._seen, self._channel.read()) if s is not None]
        if seen:
            latest = max(seen, key=lambda s: s.at)
            return latest.world_size, latest.num_workers
        if self._explicit_workers or consumed_batches == 0:
            return self.dp_size, self.num_workers or 1
        raise PlanError(
            "state_dict cannot tell how many DataLoader workers consumed these batches: this "
            "dataset was not iterated in this process and no worker reported; pass "
            "num_workers= (the DataLoader's, 1 for num_workers=0) to StreamingDataset"
        )

    def _check_mixing(self, saved: Any) -> None:
        """The saved sources, rules and plan layout are this dataset's."""
        now = mixing_key(self.index, self.mixing, self.canonical_workers)
        if isinstance(saved, dict) and now is not None:
            was = saved.get("layout", 1)  # states saved before plans had a layout: 1
            if was != now["layout"]:
                raise PlanError(
                    f"the loader state was saved by a shardwise version whose plans lay out this epoch "
                    f"differently (plan layout {was}, this version's is {now['layout']}), so it cannot "
                    "continue that epoch exactly; start a new epoch instead (set_epoch) of loading it"
                )
            saved = {**saved, "layout": was}
        if saved != now:
            raise PlanError(
                "the loader state was saved with other sources, epoch_size, batching or "
                "canonical_workers"
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position, on this or another topology (elastic resume)."""
        check_state(state)
        if state.get("version") != STATE_VERSION:
            raise PlanError(f"unsupported loader state version {state.get('version')!r}")
        if state.get("counts") != self._digest():
            raise PlanError("the loader state was saved for a different dataset or filter")
        if state.get("seed") != self.seed or state.get("shuffle") != self.shuffle:
            raise PlanError("the loader state was saved with another seed or shuffle setting")
        self._check_mixing(state.get("mixing"))
        try:
            epoch = int(state["epoch"])
            resumes = [Resume.from_dict(r) for r in state["resumes"]]
            at = Position.from_dict(state["position"]) if "position" in state else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"not a loader state written by state_dict: {type(exc).__name__} {exc}"
            ) from exc
        self.epoch, self._resumes, self._resume_at = epoch, resumes, at
        self._pinned = in_dataloader_worker()  # a worker's copy: its next pass is this epoch
        self.plan()  # fail now, not inside a worker
        self._publish()


def _worker_id() -> int:
    """The DataLoader worker id of this process (0 outside a worker)."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return 0 if info is None else int(info.id)


def _same_worker(saved: Position, here: Position) -> bool:
    """Whether ``saved`` is the position of ``here``'s worker, on any rank, in this epoch."""
    return (saved.epoch, *saved.where()[2:]) == (here.epoch, *here.where()[2:])
