"""HF Accelerate on 2 processes (torchrun, gloo, cpu) over a StreamingDataset, 2 workers.

    torchrun --nproc_per_node=2 _fw_accelerate.py DATA OUT MODES FORMATS EPOCHS [resume]

MODES are separated by commas. ``plain``: the obvious code,
``accelerator.prepare(model, opt, DataLoader(ds, ...))``; ``nodispatch``: the same with
``dispatch_batches=False``. Both ``save_state`` after 27 steps with the epoch and step
written next to it, and with ``resume`` continue from it by ``load_state`` and accelerate's
``skip_first_batches``. ``loader``: the same with a ShardwiseLoader, registered for
checkpointing, ``save_state`` after 27 steps, and with ``resume`` a run continued from it by
``load_state``. FORMATS are batch_formats (``numpy``, ``torch``) or ``samples`` (per sample,
the default collator), separated by commas. Each mode and format is trained in turn in the
same processes (a new Accelerator, model and loader each), in OUT/<mode>/<format>. Each rank
writes (epoch, ids) per step to OUT/<mode>/<format>/<mode>-<rank>.json (``resumed-<rank>``
on resume).
"""

from __future__ import annotations

import gc
import json
import os
import sys

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from torch.utils.data import DataLoader

from shardwise import StreamingDataset


def main() -> None:
    data, out, modes, formats, epochs = sys.argv[1:6]
    resume = len(sys.argv) > 6
    accelerator = None
    for mode in modes.split(","):
        for fmt in formats.split(","):
            if accelerator is not None:
                accelerator.wait_for_everyone()
                accelerator.free_memory()
            where = os.path.join(out, mode, fmt)
            accelerator = train(data, where, mode, fmt, int(epochs), resume)
    assert accelerator is not None
    # the process group ends before Python exits, after the DDP model that holds it is gone
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    gc.collect()
    accelerator.end_training()


def train(data: str, out: str, mode: str, fmt: str, epochs: int, resume: bool) -> Accelerator:
    batch_format = None if fmt == "samples" else fmt
    ds = StreamingDataset(
        data, batch_size=10, batch_format=batch_format, seed=4, columns=["id", "x"]
    )
    bs = None if batch_format else 10
    dispatch = None if mode != "nodispatch" else False  # None: accelerate's default (dispatch)
    config = DataLoaderConfiguration(dispatch_batches=dispatch)
    accelerator = Accelerator(cpu=True, dataloader_config=config)  # on GPUs: without cpu=True
    model = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    if mode in ("plain", "nodispatch"):
        model, opt, loader = accelerator.prepare(
            model, opt, DataLoader(ds, batch_size=bs, num_workers=2)
        )
    else:
        from shardwise.integrations.hf import ShardwiseLoader

        model, opt, loader = accelerator.prepare(model, opt, ShardwiseLoader(ds, num_workers=2))
        accelerator.register_for_checkpointing(loader)
    where = os.path.join(out, "state")
    start, skip = 0, 0
    if resume:
        accelerator.load_state(where)
        if mode == "loader":
            start = ds.epoch  # the loader continues by itself
        else:
            with open(os.path.join(where, "position.json")) as f:
                start, skip = json.load(f)
    step, seen = 0, []
    for epoch in range(start, epochs):  # a ShardwiseLoader's passes advance by themselves
        if mode != "loader":
            loader.set_epoch(epoch)
        batches = loader
        if skip and epoch == start:
            batches = accelerator.skip_first_batches(loader, skip)
        for i, batch in enumerate(batches, start=skip if epoch == start else 0):
            ids = np.asarray(batch["id"]).tolist()
            seen.append((epoch, ids))
            x = torch.as_tensor(np.asarray(batch["x"]), dtype=torch.float32).unsqueeze(1) / 1000
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            step += 1
            if step == 27 and not resume:
                accelerator.save_state(where)
                if accelerator.is_main_process:
                    with open(os.path.join(where, "position.json"), "w") as f:
                        json.dump([epoch, i + 1], f)
    tag = "resumed" if resume else mode
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{tag}-{accelerator.process_index}.json"), "w") as f:
        json.dump(seen, f)
    del model, opt, loader, batches
    gc.collect()
    return accelerator


if __name__ == "__main__":
    main()
