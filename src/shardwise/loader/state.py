"""What a dataset saves and loads, and how the training process tells DataLoader workers
the epoch and resume point it set: the :class:`LoaderState` object a dataset holds.

It keeps the epoch, the resume points and the positions, and turns them into a saved
state and back (exact and elastic resume); the plans it needs come from the dataset's
:class:`~shardwise.loader.planner.Planner`, passed in.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardwise.errors import ConfigError, PlanError
from shardwise.loader._args import check_int, check_state
from shardwise.loader.channel import Seen, consumer
from shardwise.loader.passes import Passes
from shardwise.loader.placement import in_dataloader_worker
from shardwise.loader.planner import Planner
from shardwise.loader.position import Position
from shardwise.loader.state_version import STATE_VERSION, check_version
from shardwise.loader.window_layout import check_kind, split_blocks, with_blocks
from shardwise.plan import Plan, Resume
from shardwise.plan.compose import WorkerWindows

__all__ = ["STATE_VERSION", "LoaderState"]


@dataclass
class LoaderState(Passes):
    """The position of one dataset object (and of the DataLoader workers it reaches); the
    epoch, resume points and pass records are its :class:`~shardwise.loader.passes.Passes`.

    Attributes:
        counts: samples per unit (their digest identifies the dataset and filter).
        mixing_key: what a saved state must agree on besides the counts (see
            :func:`~shardwise.loader.stats.mixing_key`), without head windows.
        blocks: ``k`` of the dataset's head windows (1: whole units); a loaded state's
            epoch is planned with the state's (:mod:`~shardwise.loader.window_layout`).
        first_window: the dataset's setting (explicit ones refuse a state of the other kind).
    """

    counts: np.ndarray
    mixing_key: dict[str, Any] | None
    seen: Seen | None = None  # the topology iterating in this process, if any
    position: Position | None = None  # what the current iteration yielded
    resume_at: Position | None = None  # a worker's own saved position
    _digest: str | None = None
    blocks: int = 1
    first_window: str | None = "auto"
    # (epoch, steps): a wrapper skipping these steps of this epoch gets placeholders before
    # the epoch's rest (a resume on another topology, see .trainer_hooks)
    prepended: tuple[int, int] | None = None
    hosted_at: float = 0.0  # when an accelerate wrapper last started a pass (time.time())
    parked: Any = None  # the state of the epoch set before this one (see of_epoch)

    def copy(self) -> LoaderState:
        """A copy of its own (a copied dataset moves on apart from the original)."""
        new = copy.copy(self)
        new.last_pass = dict(self.last_pass)
        return new

    def set_epoch(self, epoch: int, counted: bool = False) -> None:
        """Start ``epoch``; a resume point of another epoch is forgotten (kept aside for
        :meth:`of_epoch` only). ``counted``: set by a loader's own count of its passes, not
        by its user (``advanced``)."""
        if epoch != self.epoch:
            self.parked = self.copy()
            self.parked.parked = None
            self.resumes, self.loaded_blocks = [], None
        self.epoch = epoch
        self.publish()
        if counted:
            self.advanced = self.control

    def of_epoch(self, epoch: int) -> LoaderState:
        """The state a pass of ``epoch`` began with: this one, or the one set before it (an
        evaluation through another loader over the dataset sets its own epoch while a
        training pass runs), else ``epoch`` from its start."""
        if epoch == self.epoch:
            return self
        if self.parked is not None and self.parked.epoch == epoch:
            return self.parked
        fresh = self.copy()
        fresh.parked, fresh.epoch, fresh.resumes, fresh.loaded_blocks = None, epoch, [], None
        fresh.prepended = None
        return fresh

    def plan(
        self, planner: Planner, num_workers: int | None = None, world: int | None = None
    ) -> Plan:
        """This epoch's plan (continuing a loaded resume point, with its windows)."""
        blocks = self.epoch_blocks()
        if blocks != planner.blocks:
            planner = replace(planner, blocks=blocks)
        return planner.plan(self.epoch, self.resumes, num_workers, world)

    def epoch_blocks(self) -> int:
        """``k`` of this epoch's head windows: a loaded state's for its epoch, else the
        dataset's own."""
        loaded = self.loaded_blocks
        return int(loaded[1]) if loaded is not None and loaded[0] == self.epoch else self.blocks

    def start_at(self, wp: WorkerWindows, here: Position) -> Position:
        """Where the worker ``wp`` at ``here`` starts: after the resume point's progress when
        it is this worker's, or the same worker's of another rank (``wp`` then skips it), else
        at its start. Ranks advance in lockstep over equal worker pieces, so one rank's
        position is every rank's: frameworks that checkpoint on rank 0 alone (Lightning, HF)
        resume every rank from it.

        Raises:
            PlanError: the resume point is a worker's of this epoch on another number of
                ranks or workers (it says how much that worker yielded, not what the others
                did, so it cannot be continued elsewhere).
        """
        _check_topology(self.resume_at, here)
        if self.resume_at is not None and _same_worker(self.resume_at, here):
            done = min(self.resume_at.samples, wp.num_samples)
            wp.skip, wp.num_samples = wp.skip + done, wp.num_samples - done
            here = Position(*here.where(), done)
        self.resume_at, self.position = None, here
        return here

    def begin_pass(self, rank: int, worker_id: int) -> bool:
        """See :meth:`Passes.begin_pass`; the next epoch starts at its start."""
        moved = super().begin_pass(rank, worker_id)
        if moved:
            self.resume_at = None
        return moved

    def sync_epoch(self) -> int:
        """The epoch the latest pass streamed (DataLoader workers advance epochs by themselves
        and report them), taken on without the resume point of another epoch."""
        return self.latest_epoch(self.seen)

    def follow(self) -> bool:
        """See :meth:`Passes.follow`; a worker's own saved position is of its epoch only."""
        changed = super().follow()
        if changed:
            self.resume_at = None
        return changed

    def digest(self) -> str:
        """A short digest of the counts (asked for after every batch by StatefulDataLoader)."""
        if self._digest is None:
            self._digest = hashlib.sha1(self.counts.tobytes()).hexdigest()[:16]
        return self._digest

    def state_dict(self, planner: Planner, consumed_batches: int | None) -> dict[str, Any]:
        """See :meth:`~shardwise.loader.dataset.StreamingDatasetBase.state_dict`."""
        if consumed_batches is None:
            here = self.position or Position(self.epoch, 0, 1, 0, 1)
            return self._saved(planner, position=here.to_dict())
        consumed_batches = check_int("consumed_batches", consumed_batches)
        world_size, num_workers = self._consumer(planner, consumed_batches)
        self.sync_epoch()
        p = self.plan(planner, num_workers, world_size)
        if not 0 <= consumed_batches <= p.batches_per_rank:
            raise PlanError(
                f"consumed_batches must be in [0, {p.batches_per_rank}], got {consumed_batches}"
            )
        resumes = [r.to_dict() for r in p.resume(consumed_batches).resumes]
        return self._saved(planner, resumes=resumes)

    def saved_at(self, planner: Planner, resumes: list[Resume]) -> dict[str, Any]:
        """The state of this epoch interrupted at ``resumes`` (the last one's position)."""
        return self._saved(planner, resumes=[r.to_dict() for r in resumes])

    def _saved(self, planner: Planner, **fields: Any) -> dict[str, Any]:
        state = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "seed": planner.seed,
            "shuffle": planner.shuffle,
            "counts": self.digest(),
            "resumes": [r.to_dict() for r in self.resumes],
        }
        key = with_blocks(self.mixing_key, self.epoch_blocks())
        if key is not None:
            state["mixing"] = key
        state.update(fields)
        return state

    def _consumer(self, planner: Planner, consumed_batches: int) -> tuple[int, int]:
        """(world_size, num_workers) of whatever iterated this dataset most recently: a
        DataLoader's workers (through the channel) or this process itself."""
        return consumer(
            (self.seen, self.channel.read()),
            lambda: (planner.dp_size, planner.num_workers),
            consumed_batches,
            "StreamingDataset",
        )

    def load_state_dict(self, planner: Planner, state: dict[str, Any]) -> None:
        """See :meth:`~shardwise.loader.dataset.StreamingDatasetBase.load_state_dict`."""
        check_state(state)
        check_version(state, PlanError)
        if state.get("counts") != self.digest():
            raise PlanError("the loader state was saved for a different dataset or filter")
        if state.get("seed") != planner.seed or state.get("shuffle") != planner.shuffle:
            raise PlanError("the loader state was saved with another seed or shuffle setting")
        blocks = self._check_mixing(state.get("mixing"))
        try:
            epoch = int(state["epoch"])
            resumes = [Resume.from_dict(r) for r in state["resumes"]]
            at = Position.from_dict(state["position"]) if "position" in state else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(
                f"not a loader state written by state_dict: {type(exc).__name__} {exc}"
            ) from exc
        if self._ended_before(planner, epoch, resumes, at):
            return  # a later epoch was set since: it starts at its start
        self.epoch, self.resumes, self.resume_at = epoch, resumes, at
        self.loaded_blocks = [epoch, blocks] if blocks != self.blocks else None
        self.pinned = in_dataloader_worker()  # a worker's copy: its next pass is this epoch
        self.plan(planner)  # fail now, not inside a worker
        self.publish()

    def _ended_before(
        self, planner: Planner, epoch: int, resumes: list[Resume], at: Position | None
    ) -> bool:
        """Whether a worker's own position (torchdata's per-worker state) is at the end of
        its piece of an epoch before the one set since (Lightning restores the workers'
        states of an epoch it counts as done, see ``wrappers.lightning_epoch``)."""
        if at is None or epoch >= self.epoch:
            return False
        plan = planner.plan(epoch, resumes, at.num_workers, at.world_size)
        return at.samples >= plan.worker(at.rank, at.worker_id).num_samples

    def _check_mixing(self, saved: Any) -> int:
        """The saved sources, rules and plan layout are this dataset's; the saved epoch's
        head windows' ``k`` (1: whole units), if this dataset may continue it."""
        saved, blocks = split_blocks(saved)
        now = self.mixing_key
        if isinstance(saved, dict) and now is not None:
            was = saved.get("layout", 1)  # states saved before plans had a layout: 1
            if was != now["layout"]:
                raise PlanError(
                    "the loader state was saved by a shardwise version whose plans lay out "
                    f"this epoch differently (plan layout {was}, this version's is "
                    f"{now['layout']}), so it cannot continue that epoch exactly; start a new "
                    "epoch instead (set_epoch) of loading it"
                )
            saved = {**saved, "layout": was}
        if saved != now:
            raise PlanError(
                "the loader state was saved with other sources, epoch_size, batching or "
                "canonical_workers"
            )
        check_kind(self.first_window, self.blocks, blocks)
        return blocks


def _check_topology(saved: Position | None, here: Position) -> None:
    if saved is None or saved.epoch != here.epoch:
        return
    was, now = (saved.world_size, saved.num_workers), (here.world_size, here.num_workers)
    if was != now:
        raise PlanError(
            f"this state is one DataLoader worker's own position in epoch {saved.epoch} "
            f"(torchdata's StatefulDataLoader saves these, and Lightning with it), saved on "
            f"{was[0]} ranks x {was[1]} workers: it continues on that topology only, and "
            f"this pass runs on {now[0]} x {now[1]}. To resume on another number of ranks "
            "or workers, save ds.state_dict(consumed_batches=...) in the training process "
            "(an elastic state; see docs/concepts/resume.md); under Lightning, return a "
            "shardwise.integrations.loader.ShardwiseLoader, whose state is one"
        )


def _same_worker(saved: Position, here: Position) -> bool:
    """Whether ``saved`` is the position of ``here``'s worker, on any rank, in this epoch."""
    return (saved.epoch, *saved.where()[2:]) == (here.epoch, *here.where()[2:])
