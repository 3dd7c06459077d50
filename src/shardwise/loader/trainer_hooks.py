"""HF transformers ``Trainer`` over a dataset it serves through accelerate's wrappers: each
checkpoint records the loader's position, and a resume on another topology continues it.

The Trainer resumes by its step count. From the checkpoint's global step and the current
topology's steps per epoch it works out the epoch and how many batches to skip, and its
dataloader skips them. That is exact on the topology that saved the checkpoint only: with
another number of DataLoader workers the same steps are other samples, and with another
number of processes even the epoch differs. So:

- the dataset, asked its length or set an epoch by accelerate's wrapper in the training
  process, looks for a ``transformers.Trainer`` training on it. Finding one, it adds a
  callback to it (:func:`attend`). The callback counts the trained batches of each
  training pass and writes the dataset's position (:func:`~.wrapper_position.pass_state`)
  into every checkpoint (``shardwise_loader.json``, the file ``ShardwiseTrainer`` writes);
- a resume from a checkpoint whose record names another topology loads that position.
  The Trainer's epoch is then the record's, and its skip is the new topology's steps of
  that epoch before its rest (:func:`continued_counters`); the wrapper's skipped steps
  are served as placeholders before the rest. When epochs bound the training, its step
  limit becomes the steps left.

It relies on the ``Trainer`` methods ``_inner_training_loop``,
``set_initial_training_values``, ``_run_epoch``, ``get_batch_samples`` and
``_init_training_state``; it is tested with the transformers version pinned in
constraints.txt. A checkpoint without a record (saved before shardwise wrote one) resumes
by the Trainer's step count, as before.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from types import FrameType
from typing import Any

from shardwise.errors import FormatError
from shardwise.loader.placement import in_dataloader_worker
from shardwise.loader.wrapper_position import StateView, hosted_now, same_course, wrapper_state
from shardwise.loader.wrappers import Hosting, detect_hosting
from shardwise.storage import atomic_write

__all__ = ["RECORD", "attend", "continued_counters", "hosting_for", "write_record"]

RECORD = "shardwise_loader.json"  # the loader's position in a Trainer checkpoint
_PASS = ("_run_epoch", "get_batch_samples")  # a training pass sets its epoch from these


def hosting_for(ds: Any, previous: Hosting | None) -> Hosting | None:
    """:func:`~.wrappers.detect_hosting` for the dataset's ``set_epoch`` and ``__len__``,
    joining the Trainer that trains on it through that wrapper, if one does."""
    hosting = detect_hosting(ds, previous)
    if hosting is not None and hosting is not previous:  # a wrapper calls now
        hosted_now(ds.state)
        attend(ds, hosting)
    return hosting


def attend(ds: Any, hosting: Hosting) -> None:
    """Called when ``ds`` finds accelerate's wrapper ``hosting``: join the Trainer training
    on ``ds``, if one is."""
    module = sys.modules.get("transformers.trainer")
    if module is None or in_dataloader_worker():
        return
    found = _trainer_frame(module.Trainer)
    if found is None or found[0].train_dataset is not ds:
        return  # no Trainer, or an evaluation's dataset
    trainer, frame = found
    if hasattr(trainer, "_shardwise_resumed"):
        return  # a ShardwiseTrainer records its own loader's position
    if frame.f_code.co_name == "set_initial_training_values" and frame.f_back is not None:
        record = _record(trainer, ds)
        record.hosting = hosting
        resume = frame.f_back.f_locals.get("resume_from_checkpoint")
        if resume:
            _continue_from(trainer, record, str(resume))
    elif frame.f_code.co_name in _PASS:
        _record(trainer, ds).begin(hosting)


def _trainer_frame(trainer_type: type) -> tuple[Any, FrameType] | None:
    """The nearest caller that is a method of a Trainer, with the Trainer."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        obj = frame.f_locals.get("self")
        if isinstance(obj, trainer_type):
            return obj, frame
        frame = frame.f_back
    return None


def _record(trainer: Any, ds: Any) -> Any:
    """The Trainer's callback for ``ds``, added at first."""
    kind: Any = _callback_type()
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, kind) and callback.ds is ds:
            return callback
    callback = kind(ds)
    trainer.add_callback(callback)
    return callback


@functools.cache
def _callback_type() -> type:
    base: Any = sys.modules["transformers"].TrainerCallback

    class PositionRecord(base):
        """Counts the training pass's batches; writes the position into each checkpoint."""

        def __init__(self, ds: Any) -> None:
            self.ds, self.trained = ds, 0
            self.hosting: Hosting | None = None
            self.state: Any = None

        def begin(self, hosting: Hosting) -> None:
            self.hosting, self.trained, self.state = hosting, 0, None

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._trained()

        def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._trained()

        def _trained(self) -> None:
            if self.state is None:  # the pass's own epoch and plan (an evaluation over the
                self.state = self.ds.state.copy()  # dataset may set others meanwhile)
            self.trained += 1

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.hosting is not None and args.should_save:
                _write(self, args, state)

    return PositionRecord


def _write(record: Any, args: Any, trainer_state: Any) -> None:
    h, ds = record.hosting, record.ds
    view = StateView(ds, record.state or ds.state)
    write_record(args, trainer_state, wrapper_state(view, h, h.skip_batches + record.trained))


def write_record(args: Any, trainer_state: Any, position: dict[str, Any]) -> None:
    """Write ``position`` into the checkpoint the Trainer saves now (whole or not at all)."""
    prefix = sys.modules["transformers.trainer_utils"].PREFIX_CHECKPOINT_DIR
    folder = os.path.join(args.output_dir, f"{prefix}-{trainer_state.global_step}")
    with atomic_write(os.path.join(folder, RECORD), "w") as f:
        json.dump(position, f)


def _continue_from(trainer: Any, record: Any, checkpoint: str) -> None:
    """Have the Trainer's next ``_init_training_state`` continue from the checkpoint's
    record (once)."""
    own = type(trainer)._init_training_state
    _count_past(trainer, checkpoint)

    def init(*args: Any) -> tuple[int, int]:
        del trainer._init_training_state
        saved = trainer.__dict__.pop("_shardwise_args", None)
        if saved is not None:
            trainer.args.max_steps, trainer.args.num_train_epochs = saved
        counters = own(trainer, *args)
        return _resumed(trainer, record, checkpoint, counters)

    trainer._init_training_state = init


def _count_past(trainer: Any, checkpoint: str) -> None:
    """Called while the Trainer counts its epochs (``set_initial_training_values``, after
    it read ``max_steps``). Under ``max_steps`` it counts this topology's epochs in them and
    trains none past that count, which on fewer processes or workers (more steps an epoch)
    can end before the record's epoch. So its arguments ask for epochs past that one while
    it counts (``max_steps`` still ends the training), until ``_init_training_state``."""
    args = trainer.args
    try:
        with open(os.path.join(checkpoint, RECORD)) as f:
            epoch = json.load(f)["epoch"]
    except (OSError, ValueError, TypeError, KeyError):
        return  # no record: the Trainer's own count is right; a bad one fails later
    if args.max_steps > 0 and isinstance(epoch, int):
        trainer._shardwise_args = (args.max_steps, args.num_train_epochs)
        args.max_steps, args.num_train_epochs = -1, args.max_steps + epoch + 2


def _resumed(trainer: Any, record: Any, checkpoint: str, counters: Any) -> tuple[int, int]:
    path = os.path.join(checkpoint, RECORD)
    if not os.path.isfile(path):
        return tuple(counters)
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: not a loader position shardwise wrote ({exc})") from exc
    h: Hosting = record.hosting
    if not isinstance(saved, dict) or same_course(saved, h, *counters):
        return tuple(counters)  # the Trainer's skip is exact
    ds = record.ds
    ds.load_state_dict({k: v for k, v in saved.items() if k != "served"})
    epoch = ds.state.epoch
    left = ds.plan(h.workers, h.processes).batches_per_rank
    full = ds.planner.plan(epoch, [], h.workers, h.processes).batches_per_rank
    epochs_trained, skip = continued_counters(trainer, epoch, left, full)
    ds.state.prepended = (epochs_trained, skip) if skip else None
    return epochs_trained, skip


def continued_counters(trainer: Any, epoch: int, left: int, full: int) -> tuple[int, int]:
    """The Trainer's (epochs trained, batches to skip) to continue ``epoch`` with its
    ``left`` batches per rank of ``full``: the epoch's rest are its last batches (so its
    gradient accumulation ends with the epoch). When epochs bound the training, its step
    limit becomes the global step plus the optimizer steps left."""
    args, state = trainer.args, trainer.state
    accum = max(1, int(args.gradient_accumulation_steps))
    per_epoch = max(1, -(-full // accum))
    if left <= 0:  # the epoch is done: the next one starts whole
        epoch, skip = epoch + 1, 0
    else:
        skip = max(0, full - left)
    rest = full // accum - skip // accum + (1 if full % accum else 0) if skip else 0
    if args.max_steps <= 0:  # the optimizer steps of the epoch's rest and of the whole ones
        whole = max(0, math.ceil(args.num_train_epochs) - epoch - (1 if skip else 0))
        state.max_steps = state.global_step + rest + whole * per_epoch
    return epoch, skip
