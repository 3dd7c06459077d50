"""Work done after a run is published, by layers above the pipeline.

The pipeline cannot import what sits above it (the run report, for one), so those
layers register a function here and :meth:`Pipeline.run` calls each one with the
published output once the run is complete (also when it was complete already).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["AfterRun", "after_run", "on_run_published"]

AfterRun = Callable[[str, dict[str, Any]], object]
"""Called as ``hook(output_dir, storage_options)`` after a run is published."""

_HOOKS: dict[str, AfterRun] = {}


def on_run_published(name: str, hook: AfterRun) -> None:
    """Call ``hook`` after every published run (a second hook of the same ``name`` replaces
    the first)."""
    _HOOKS[name] = hook


def after_run(output: str, storage_options: dict[str, Any]) -> None:
    """Call every registered hook for the run published in ``output``."""
    for hook in list(_HOOKS.values()):
        hook(output, storage_options)
