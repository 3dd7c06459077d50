"""Records what the model of a docs page's script trains on, from outside the script.

On the path only for the docs pages' framework runs (``tests/integrations/
test_framework_docs.py``), with ``SWTEST_STEPS`` naming a directory: once ``torch.nn``
is imported, a global forward pre-hook appends each training step's sample ids to
``SWTEST_STEPS/<pid>.jsonl`` as ``{"rank": R, "ids": [...]}``. The pages' models are known:
a ``Linear(1, 1)`` fed ``x / 1000`` (``x`` is ``id / 2``), or a GPT-2 whose token embedding
(1,000 tokens) is fed ``id % 1000`` in its first column."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from types import ModuleType
from typing import Any

_DIR = os.environ.get("SWTEST_STEPS")
_HOOKED = "torch.nn.modules.module"


def _ids(module: Any, args: tuple[Any, ...]) -> list[int] | None:
    import torch

    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 2:
        return None
    inputs = args[0].detach()
    if isinstance(module, torch.nn.Linear) and module.in_features == 1:
        return [int(v) for v in (inputs[:, 0].double() * 2000).round().tolist()]
    if isinstance(module, torch.nn.Embedding) and module.num_embeddings == 1000:
        return [int(v) for v in inputs[:, 0].tolist()]
    return None


def _rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0"))


def _record(module: Any, args: tuple[Any, ...]) -> None:
    ids = _ids(module, args)
    if ids is not None and _DIR:
        line = json.dumps({"rank": _rank(), "ids": ids})
        with open(os.path.join(_DIR, f"{os.getpid()}.jsonl"), "a") as f:
            f.write(line + "\n")


class _HookTorchNN(importlib.abc.MetaPathFinder):
    """Registers the hook as soon as ``torch.nn.modules.module`` has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _HOOKED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def run(module: ModuleType) -> None:
            exec_module(module)
            module.register_module_forward_pre_hook(_record)

        spec.loader.exec_module = run  # type: ignore[method-assign]
        return spec


if _DIR:
    sys.meta_path.insert(0, _HookTorchNN())
