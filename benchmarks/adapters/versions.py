"""Installed versions, for the results (stdlib only)."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

__all__ = ["dist_version", "loaded_versions"]


def dist_version(dist: str) -> str | None:
    """The installed version of distribution ``dist`` (None if it is not installed)."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def loaded_versions(*modules: str) -> dict[str, str | None]:
    """``__version__`` of each of ``modules`` that this process has imported."""
    return {m: getattr(sys.modules[m], "__version__", None) for m in modules if m in sys.modules}
