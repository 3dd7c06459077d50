"""A DataLoader that keeps a ``StreamingDataset``'s own split and knows its position, and
the resume of a DataLoader that HF Accelerate prepared; neither needs transformers.

- :class:`ShardwiseLoader`: a ``torch.utils.data.DataLoader`` over a ``StreamingDataset``
  that counts the batches it hands out, so ``state_dict()`` is the dataset's exact position
  (an elastic one: it continues on any number of ranks and workers). Frameworks that save
  a stateful loader's state take it: ``accelerator.register_for_checkpointing(loader)``
  (``accelerator.prepare`` returns it as it is: it carries accelerate's "already prepared"
  mark, ``_is_accelerate_prepared``, read by accelerate 1.x and tested with the pinned
  version), and Lightning, which saves the state of any loader with ``state_dict`` and
  ``load_state_dict`` in its checkpoints.
- :func:`epoch_position` and :func:`continue_epoch`: the position of a loader
  ``accelerator.prepare`` wrapped, and its epoch continued from it on any topology.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shardwise._optional import require
from shardwise.errors import ConfigError
from shardwise.loader import StreamingDatasetBase
from shardwise.loader.wrapper_position import StateView, same_course, wrapper_state
from shardwise.loader.wrappers import hosting_of, lightning_epoch

__all__ = ["ShardwiseLoader", "continue_epoch", "epoch_position"]

_torch_data = require("torch.utils.data", "shardwise.integrations.loader")


class ShardwiseLoader(_torch_data.DataLoader):  # type: ignore[name-defined]
    """A DataLoader that keeps the dataset's exact split and knows its position.

    Args:
        dataset: a ``StreamingDataset``.
        **kwargs: ``DataLoader`` arguments. ``batch_size`` defaults to ``None`` for a batched
            dataset (``batch_format=``) and to the dataset's ``batch_size`` per sample (give
            a ``collate_fn`` there, e.g. a Trainer's data collator).
    """

    _is_accelerate_prepared = True  # accelerator.prepare returns it unchanged (accelerate 1.x)

    def __init__(self, dataset: Any, **kwargs: Any) -> None:
        if not isinstance(dataset, StreamingDatasetBase):
            raise ConfigError(f"ShardwiseLoader streams a StreamingDataset, got {type(dataset)}")
        batched = dataset.batch_format is not None
        kwargs.setdefault("batch_size", None if batched else dataset.batch_size)
        if kwargs["batch_size"] != (None if batched else dataset.batch_size):
            raise ConfigError(
                f"batch_size must be {None if batched else dataset.batch_size} for this dataset "
                f"(batch_format={dataset.batch_format!r}), got {kwargs['batch_size']}"
            )
        super().__init__(dataset, **kwargs)
        self._yielded = 0  # batches handed out in the current pass
        self._pass: Any = None  # the dataset's state as this pass began (its epoch, resume)
        self._epoch: int | None = None  # the epoch of its last pass that handed out a batch
        self._control = 0  # the dataset's control number as its last pass began
        self._loaded: dict[str, Any] | None = None  # the state loaded for its next pass

    def __iter__(self) -> Iterator[Any]:
        self.dataset.ranks.check_now()
        for batch in self._started(self._begin_pass()):
            if self._pass is None:  # its workers have reported the pass's epoch now; an
                self._pass = self.dataset.state.copy()  # evaluation over the dataset may
                self._epoch = self._pass.sync_epoch()  # set another epoch on it meanwhile
            self._yielded += 1
            yield batch

    def _begin_pass(self) -> bool:
        """Give this pass its epoch whatever other loaders' passes over the dataset did
        since its last one (a validation over the training dataset starts the next epoch,
        or takes a loaded position): the state loaded into this loader, else an epoch set
        on the dataset since, else the epoch after this loader's last pass. Whether this
        loader chose it (not the dataset's own count of passes)."""
        ds = self.dataset
        set_since = ds.state.control not in (self._control, ds.state.advanced)
        chose = self._loaded is not None or (self._epoch is not None and not set_since)
        if self._loaded is not None:
            ds.load_state_dict(self._loaded)
        elif chose and self._epoch is not None:
            ds.set_epoch(self._epoch + 1)
            ds.state.advanced = ds.state.control
        self._loaded, self._control = None, ds.state.control
        self._yielded, self._pass = 0, None
        return chose

    def _started(self, pinned: bool) -> Iterator[Any]:
        """The DataLoader's iterator. ``pinned``: the workers it starts now take the
        dataset's epoch and position as they are, not the next epoch after the passes other
        loaders' workers made in their slots (a validation's workers still starting)."""
        state = self.dataset.state
        state.pinned = pinned
        try:
            return super().__iter__()
        finally:
            state.pinned = False

    def __len__(self) -> int:
        """Batches per rank of a whole epoch (a Trainer counts its steps per epoch with it;
        a resumed epoch yields only its rest). Asked by Lightning's fit loop as it sets up,
        it takes Lightning's epoch, as the dataset's own ``len`` does."""
        ds = self.dataset
        if (epoch := lightning_epoch()) is not None and epoch != ds.epoch:
            self.set_epoch(epoch)  # a job resumed from an epoch's end: the next epoch
        plan = ds.planner.plan(ds.epoch, [], max(1, self.num_workers), None)
        return int(plan.batches_per_rank)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (a resumed epoch keeps its resume point); a state taken
        before its first batch is its start."""
        self.dataset.set_epoch(epoch)
        self._yielded, self._pass, self._loaded = 0, None, None

    def state_dict(self) -> dict[str, Any]:
        """The dataset's position after the batches handed out in the current pass, in the
        epoch that pass streams (whatever another loader over the dataset did meanwhile)."""
        ds = self.dataset
        state = self._pass
        if state is None:
            state = ds.state.copy()
            state.sync_epoch()
        plan = state.plan(ds.planner, max(1, self.num_workers), None)
        return state.saved_at(ds.planner, list(plan.resume(self._yielded).resumes))

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state_dict` (before iterating)."""
        self.dataset.load_state_dict(state)
        self._yielded, self._pass, self._loaded = 0, None, state


def epoch_position(loader: Any, consumed_batches: int) -> dict[str, Any]:
    """The dataset's position after ``consumed_batches`` steps of the current epoch of a
    dataloader ``accelerator.prepare`` returned (counted from the epoch's start, or from
    where :func:`continue_epoch` continued it): what :func:`continue_epoch` continues, on
    this or another number of processes and DataLoader workers. It is the same on every
    rank. Unlike ``ds.state_dict(consumed_batches=...)``, it is this loader's epoch also
    when another loader over the same dataset ran a pass meanwhile (an evaluation).

    Raises:
        ConfigError: ``loader`` is not over a ``StreamingDataset``.
        PlanError: ``consumed_batches`` is more than the epoch has.
    """
    ds, hosting = hosting_of(loader)
    if not isinstance(ds, StreamingDatasetBase):
        raise ConfigError(f"epoch_position takes a loader over a StreamingDataset, got {ds!r}")
    epoch = getattr(loader, "iteration", None)  # accelerate's own count of its epochs
    state = ds.state.of_epoch(epoch) if isinstance(epoch, int) else ds.state
    if hosting is None:
        return state.state_dict(ds.planner, consumed_batches)
    return wrapper_state(StateView(ds, state), hosting, consumed_batches)


def continue_epoch(loader: Any, position: dict[str, Any]) -> tuple[Any, int]:
    """Continue an epoch of a dataloader ``accelerator.prepare`` returned, from the
    :func:`epoch_position` saved in it (on this or another number of processes and
    DataLoader workers); call it after ``loader.set_epoch(epoch)``.

    Returns:
        (the batches to iterate, the epoch's steps they start after): on the topology that
        saved the position, accelerate's ``skip_first_batches`` over the trained steps (the
        order of an uninterrupted run, counted from the epoch's start); on another, the
        loader itself after the dataset loaded the position (the epoch's rest, cut again
        for this topology, counted from there).

    Raises:
        ConfigError: ``loader`` is not over a ``StreamingDataset``.
    """
    ds, hosting = hosting_of(loader)
    if not isinstance(ds, StreamingDatasetBase):
        raise ConfigError(f"continue_epoch takes a loader over a StreamingDataset, got {ds!r}")
    skip = position.get("skip") if isinstance(position, dict) else None
    epoch = ds.state.epoch
    if (
        hosting is not None
        and isinstance(skip, int)
        and same_course(position, hosting, epoch, skip)
    ):
        accelerate = require("accelerate", "shardwise.integrations.loader.continue_epoch")
        return (accelerate.skip_first_batches(loader, skip) if skip else loader), skip
    ds.load_state_dict(position)
    return loader, 0
