"""The layer table of the design page, read from the one place ``tests/test_layers.py``
checks: ``docs/layers.toml`` (packages, and the rooms inside a package), or, in a tree
without that file, the test's own ``ALLOWED`` mapping."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TOML = ROOT / "docs" / "layers.toml"
TEST = ROOT / "tests" / "test_layers.py"


def _from_test() -> dict[str, list[str]]:
    spec = importlib.util.spec_from_file_location("_shardwise_layers", TEST)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {TEST}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = {k: sorted(v) for k, v in module.ALLOWED.items()}
    table["cli"] = ["*"]
    return table


def _layers() -> dict[str, Any]:
    if TOML.exists():
        return tomllib.loads(TOML.read_text())
    return {"packages": _from_test(), "inside": {}}


def allowed() -> dict[str, list[str]]:
    """package -> what it may import (``["*"]``: everything but the package root)."""
    packages: dict[str, list[str]] = _layers()["packages"]
    return packages


def _table(title: str, rows: dict[str, list[str]], star: str, besides: str) -> list[str]:
    lines = [f"| {title} | may import (besides {besides}) |", "| --- | --- |"]
    for name, deps in rows.items():
        shown = ", ".join(f"`{d}`" for d in sorted(deps)) or "nothing of shardwise"
        lines.append(f"| `{name}` | {star if deps == ['*'] else shown} |")
    return lines


def markdown_table() -> str:
    """The packages' table, then one table of rooms per package that has rooms."""
    layers = _layers()
    lines = _table(
        "package", layers["packages"], "every package (the top layer)", "itself and the stdlib"
    )
    for package, rooms in layers.get("inside", {}).items():
        lines += ["", f"Inside `{package}/` (names relative to the package):", ""]
        lines += _table("room", rooms, "everything", "itself, its sub-rooms and the package root")
    return "\n".join(lines)
