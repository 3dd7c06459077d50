"""Data generation shared by the benchmarks, built once under ``benchmarks/.data/``."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_ROOT"]

#: where generated data sets (and downloaded source wheels) live; git-ignored
DATA_ROOT = Path(__file__).resolve().parent.parent / ".data"
