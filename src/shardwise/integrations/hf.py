"""HF Accelerate and HF ``Trainer``, exact: every sample once per epoch, equal steps, resume.

The plain ``Trainer(train_dataset=ds)`` and ``accelerator.prepare(..., DataLoader(ds))`` are
exact too (the dataset recognises Accelerate's wrappers and serves them, see
:mod:`shardwise.loader.hosted`), but under Accelerate's default dispatch rank 0 reads the
whole epoch and broadcasts it, and a resume steps through the trained batches. Better for
large jobs:

- :class:`ShardwiseLoader` (from :mod:`shardwise.integrations.loader`, which needs no
  transformers): a ``torch.utils.data.DataLoader`` over a ``StreamingDataset`` that
  ``accelerator.prepare`` returns as it is and whose ``state_dict()`` is the dataset's
  exact position; ``accelerator.register_for_checkpointing(loader)`` puts it into
  ``save_state`` / ``load_state``, and a resume continues the epoch without replaying it.
  :func:`~shardwise.integrations.loader.continue_epoch` resumes a prepared plain loader
  from its :func:`~shardwise.integrations.loader.epoch_position`.
- :class:`ShardwiseTrainer`: a ``transformers.Trainer`` whose training dataloader is a
  :class:`ShardwiseLoader` over its ``train_dataset`` (batched datasets as they are,
  per-sample ones with the Trainer's collator), which saves the loader's position into every
  checkpoint and continues from it on ``train(resume_from_checkpoint=...)`` (instead of the
  Trainer's skipping of already-trained batches, which would read them again).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from shardwise._optional import require
from shardwise.errors import ConfigError
from shardwise.integrations.loader import ShardwiseLoader
from shardwise.loader import StreamingDatasetBase
from shardwise.loader.trainer_hooks import RECORD, continued_counters, write_record

__all__ = ["LOADER_STATE", "ShardwiseLoader", "ShardwiseTrainer"]

LOADER_STATE = RECORD  # the loader's position in a Trainer checkpoint

_transformers = require("transformers", "shardwise.integrations.hf.ShardwiseTrainer")


class ShardwiseTrainer(_transformers.Trainer):  # type: ignore[name-defined]
    """A ``transformers.Trainer`` that trains exactly on a ``StreamingDataset``.

    Use it as ``Trainer`` (``train_dataset=`` a StreamingDataset, ``data_collator=`` for a
    per-sample one). ``per_device_train_batch_size`` must equal the dataset's batch size
    (a ``ConfigError`` says so otherwise). The dataloader workers, pin memory and persistent workers
    come from the TrainingArguments.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shardwise_resume: dict[str, Any] | None = None
        self._shardwise_loader: ShardwiseLoader | None = None
        self._shardwise_resumed = False
        self.add_callback(_SaveLoaderState(self))

    def get_train_dataloader(self) -> Any:
        ds = self.train_dataset
        if not isinstance(ds, StreamingDatasetBase):
            return super().get_train_dataloader()
        args = self.args
        kwargs: dict[str, Any] = {
            "num_workers": args.dataloader_num_workers,
            "pin_memory": args.dataloader_pin_memory,
            "persistent_workers": args.dataloader_persistent_workers,
        }
        if ds.batch_format is None:
            kwargs.update(batch_size=self._train_batch_size, collate_fn=self.data_collator)
        elif self._train_batch_size != ds.batch_size:
            raise ConfigError(
                f"the dataset makes batches of {ds.batch_size} but the TrainingArguments ask "
                f"for {self._train_batch_size} per device: give per_device_train_batch_size="
                f"{ds.batch_size}"
            )
        loader = self._shardwise_loader = ShardwiseLoader(ds, **kwargs)
        self._shardwise_resumed = self._shardwise_resume is not None
        if self._shardwise_resume is not None:
            loader.load_state_dict(self._shardwise_resume)
            self._shardwise_resume = None
        return self.accelerator.prepare(loader)

    def train(self, resume_from_checkpoint: Any = None, **kwargs: Any) -> Any:
        """``Trainer.train``; a resume continues the loader from the checkpoint's position."""
        if resume_from_checkpoint and isinstance(self.train_dataset, StreamingDatasetBase):
            path = resume_from_checkpoint
            if path is True:
                path = _transformers.trainer_utils.get_last_checkpoint(self.args.output_dir)
            with open(os.path.join(path, LOADER_STATE)) as f:
                saved = json.load(f)
            self._shardwise_resume = {k: v for k, v in saved.items() if k != "served"}
            self.args.ignore_data_skip = False  # the Trainer counts the trained batches
            with self._continued():
                return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    def set_initial_training_values(self, args: Any, dataloader: Any) -> Any:
        """The Trainer's counts. Resumed under ``max_steps``, it counts epochs past the
        loaded one: its own count (``max_steps`` over this topology's steps per epoch) can
        end before it on fewer processes or workers, and it would train nothing."""
        values = super().set_initial_training_values(args, dataloader)
        loader = self._shardwise_loader
        if loader is None or not self._shardwise_resumed or args.max_steps <= 0:
            return values
        return (max(values[0], loader.dataset.state.epoch + 2), *values[1:])

    def _init_training_state(self, *args: Any) -> Any:
        """The Trainer's (epochs trained, batches to skip), from the loaded position when it
        resumes: on another number of processes the checkpoint's global step means another
        epoch and step, so the loader's saved epoch and its rest decide them."""
        counters = super()._init_training_state(*args)
        loader = self._shardwise_loader
        if loader is None or not self._shardwise_resumed:
            return counters
        ds = loader.dataset
        left = ds.plan(max(1, loader.num_workers)).batches_per_rank
        return continued_counters(self, ds.state.epoch, left, len(loader))

    @contextlib.contextmanager
    def _continued(self) -> Iterator[None]:
        """The Trainer resumes an epoch by skipping its trained batches; this loader goes
        on from its saved position instead, so that skip is none for it. The Trainer still
        counts the epoch from its start: its gradient accumulation (a last step of fewer
        batches synced at the epoch's end) and fractional epoch are an uninterrupted run's."""
        module, loader = _transformers.trainer, self
        skip = module.skip_first_batches

        def continued(dataloader: Any, num_batches: int = 0) -> Any:
            if dataloader is loader._shardwise_loader:
                return dataloader
            return skip(dataloader, num_batches)

        module.skip_first_batches = continued
        try:
            yield
        finally:
            module.skip_first_batches = skip


class _SaveLoaderState(_transformers.TrainerCallback):  # type: ignore[name-defined]
    """Writes the loader's position into each checkpoint the Trainer saves."""

    def __init__(self, trainer: ShardwiseTrainer) -> None:
        self.trainer = trainer

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = self.trainer._shardwise_loader
        if loader is not None and args.should_save:
            write_record(args, state, loader.state_dict())
