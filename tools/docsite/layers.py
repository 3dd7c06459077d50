"""The layer table of the design page, read from the one place ``tests/test_layers.py``
checks it from (the ``ALLOWED`` mapping of package -> what it may import)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "tests" / "test_layers.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_shardwise_layers", SOURCE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def allowed() -> dict[str, set[str]]:
    table: dict[str, set[str]] = dict(_load().ALLOWED)
    return table


def markdown_table() -> str:
    table = allowed()
    lines = ["| package | may import (besides itself and the standard library) |", "| --- | --- |"]
    for package, deps in table.items():
        shown = ", ".join(f"`{d}`" for d in sorted(deps)) or "nothing of shardwise"
        if package == "cli":
            shown = "every package (the command line is the top layer)"
        lines.append(f"| `{package}` | {shown} |")
    return "\n".join(lines)
