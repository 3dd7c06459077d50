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
"""

from __future__ import annotations

from typing import Any

from shardwise.loader.hosted import firsts
from shardwise.loader.wrappers import Hosting
from shardwise.plan import Resume

__all__ = ["pass_state", "served"]


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
    first ``prepended`` of them placeholders before the epoch's rest; it names the
    wrapper's topology (``"served"``)."""
    plan = ds.plan(h.workers, h.processes)
    if h.dispatch:
        resumes = _dispatched(plan, h, steps, prepended)
    else:
        resumes = list(plan.resume(steps - prepended).resumes)
    return ds.state.saved_at(ds.planner, resumes) | {"served": served(h)}


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
