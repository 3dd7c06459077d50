"""Reusing generated data: a directory is reused when its ``meta.json`` matches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from datagen import DATA_ROOT

__all__ = ["fresh_dir", "reusable"]


def reusable(out: Path, version: int, **expected: Any) -> bool:
    """Whether ``out`` holds data of this ``version`` with the ``expected`` meta values."""
    meta_path = out / "meta.json"
    if not meta_path.exists():
        return False
    meta = json.loads(meta_path.read_text())
    if meta.get("version") != version or any(meta.get(k) != v for k, v in expected.items()):
        return False
    print(f"data: reusing {out}", flush=True)
    return True


def fresh_dir(out: Path, *subdirs: str) -> None:
    """Empty ``out`` (git-ignored) and create its ``subdirs``."""
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    (DATA_ROOT / ".gitignore").write_text("*\n")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for s in subdirs:
        (out / s).mkdir(parents=True)
