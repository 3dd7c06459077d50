"""The site's pictures are drawn from real output by ``tools/docsite/figures.py``: run into
a scratch directory, it makes every picture the pages embed, byte for byte the committed
ones (a run report's charts, the plan view's, the mixing chart), except the task timeline,
whose times differ on every run; and the pages embed every picture it makes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "docs" / "assets"
sys.path.insert(0, str(ROOT / "tools" / "docsite"))

import figures  # noqa: E402

TIMED = {"run-tasks.svg"}  # task start and end times: a new drawing on every run
EMBED = re.compile(r"!\[[^\]]*\]\((?:\.\./)*assets/([\w.-]+)\)")


def _embedded() -> dict[str, list[str]]:
    """asset -> the pages that embed it."""
    found: dict[str, list[str]] = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for name in EMBED.findall(page.read_text()):
            found.setdefault(name, []).append(str(page.relative_to(ROOT)))
    return found


def test_pages_embed_exactly_the_pictures_figures_makes() -> None:
    embedded = _embedded()
    assert set(embedded) == set(figures.names()), embedded
    assert sorted(p.name for p in ASSETS.iterdir()) == sorted(figures.names())
    for picture in ("run-ledger.svg", "plan-samples.svg", "mixing.svg"):  # the three
        assert embedded[picture], picture


@pytest.mark.slow
def test_figures_are_redrawn_from_real_output(tmp_path: Path) -> None:
    figures.make(tmp_path)
    for name in figures.names():
        drawn = (tmp_path / name).read_text()
        assert drawn.startswith("<?xml") and "<svg" in drawn, name
        if name not in TIMED:
            assert drawn == (ASSETS / name).read_text(), (
                f"docs/assets/{name} is not what tools/docsite/figures.py draws: rerun it"
            )
