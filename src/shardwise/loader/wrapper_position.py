"""The position of a dataset served to an HF Accelerate wrapper (:mod:`.hosted`), as a
loader state that a resume on any topology continues.

A pass under a ``DataLoaderDispatcher`` does not take the ranks' batches in lockstep: rank
0's DataLoader worker ``w`` serves the pieces ``(0, w), (1, w), ...`` one after the other,
and the DataLoader takes its workers' items in turn. So after ``s`` steps each slot's
delivered batches are worked out from the items each worker made, and the state records
them per slot (:class:`~shardwise.plan.topology.Resume` ``done``). Under an
``IterableDatasetShard`` every rank takes its own piece's batches in lockstep, and the
state is the ordinary one after ``s`` batches per rank.

A wrapper resuming with accelerate's ``skip_first_batches`` draws and drops its first
steps. Served as they are (the same topology), those steps are the trained ones, and
placeholders stand in for them. After a resume from a saved state (another topology) the
skipped steps are placeholders put before the epoch's rest (``prepended``).

``ds.state_dict(consumed_batches=k)`` is this position when the dataset's latest pass in
this process was served to a wrapper (:func:`position_of`): ``k`` counts the wrapper's
steps (each rank's batches) of the pass, from the epoch's start, or from a loaded state's
position.
"""

from __future__ import annotations

import time
from typing import Any

from shardwise.errors import PlanError
from shardwise.loader.hosted import firsts
from shardwise.loader.wrappers import Hosting
from shardwise.plan import Resume

__all__ = [
    "StateView",
    "hosted_now",
    "pass_state",
    "position_of",
    "same_course",
    "served",
    "wrapper_state",
]


class StateView:
    """A dataset as :func:`wrapper_state` reads it, with another state (a pass's own)."""

    def __init__(self, ds: Any, state: Any) -> None:
        self.planner, self.state = ds.planner, state

    def plan(self, num_workers: int, world_size: int) -> Any:
        return self.state.plan(self.planner, num_workers, world_size)


def hosted_now(state: Any) -> None:
    """Note that an accelerate wrapper starts a pass over the dataset of ``state`` now."""
    state.hosted_at = time.time()


def position_of(ds: Any, consumed_batches: int | None) -> dict[str, Any]:
    """``ds.state_dict(consumed_batches)``: the wrapper's position when the dataset's latest
    pass was served to one (no plain pass reported since a wrapper last started one)."""
    h, state = ds.hosting, ds.state
    seen = [s for s in (state.seen, state.channel.read()) if s is not None]
    plain = any(not s.hosted and s.at > state.hosted_at for s in seen)
    if consumed_batches is None or h is None or plain:
        return state.state_dict(ds.planner, consumed_batches)
    return wrapper_state(ds, h, consumed_batches)


def wrapper_state(ds: Any, h: Hosting, steps: int) -> dict[str, Any]:
    """The position after the wrapper ``h`` drew ``steps`` steps of the dataset's pass."""
    state = ds.state
    prepended = h.skip_batches if state.prepended == (state.epoch, h.skip_batches) else 0
    have = ds.plan(h.workers, h.processes).batches_per_rank + prepended
    if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= have:
        raise PlanError(f"consumed_batches must be in [0, {have}], got {steps!r}")
    return pass_state(ds, h, steps, prepended)


def served(h: Hosting) -> dict[str, Any]:
    """What of the wrapper decides which batches its steps take (its topology)."""
    return {
        "dispatch": h.dispatch,
        "processes": h.processes,
        "workers": h.workers,
        "split": h.split,
        "samples": h.samples,
        "loader_batch": h.loader_batch,
    }


def pass_state(ds: Any, h: Hosting, steps: int, prepended: int) -> dict[str, Any]:
    """The dataset's state once the wrapper ``h`` drew ``steps`` steps of this pass, the
    first ``prepended`` of them placeholders before the epoch's rest. It names the
    wrapper's topology (``"served"``) and, when the pass was the epoch's own from its start
    (nothing loaded, nothing prepended), the steps a wrapper of that topology may skip of
    the epoch's fresh plan instead (``"skip"``): that resume gives the uninterrupted order."""
    plan = ds.plan(h.workers, h.processes)
    if h.dispatch:
        resumes = _dispatched(plan, h, steps, prepended)
    else:
        resumes = list(plan.resume(steps - prepended).resumes)
    state = ds.state.saved_at(ds.planner, resumes) | {"served": served(h)}
    if not plan.resumes and not prepended:
        state["skip"] = steps
    return state


def same_course(saved: Any, h: Hosting, epoch: int, skip: int) -> bool:
    """Whether the saved position is the start of ``epoch`` skipping ``skip`` steps under a
    wrapper of ``h``'s topology (a resume there skipping them gives the same order)."""
    return (
        isinstance(saved, dict)
        and saved.get("served") == served(h)
        and saved.get("epoch") == epoch
        and saved.get("skip") == skip
    )


def _dispatched(plan: Any, h: Hosting, steps: int, prepended: int) -> list[Resume]:
    """The plan's interruptions, ending with the batches each slot delivered."""
    t = plan.topology
    k = t.num_workers
    per_step = 1 if h.split else h.processes  # DataLoader items per step
    per_item = h.loader_batch * (h.processes if h.split else 1)  # samples per item
    last = plan.resumes[-1] if plan.resumes else None
    continued = last is not None and last.done is None and last.topology == t
    before = last if continued and last is not None else Resume(t, 0)  # one it continues
    left = [
        (firsts(steps * per_step, w, k) - firsts(prepended * per_step, w, k)) * per_item
        for w in range(k)
    ]
    done = [before.delivered(s) for s in range(t.slots)]
    for r in range(t.world_size):
        for w in range(k):  # worker w serves the pieces of ranks 0, 1, ... in turn
            taken = min(left[w], plan.worker(r, w).num_samples)
            left[w] -= taken
            done[r * k + (w + plan.consumed_batches) % k] += taken // t.batch_size
    previous = plan.resumes[:-1] if continued else plan.resumes
    return [*previous, Resume(t, 0, tuple(done))]
