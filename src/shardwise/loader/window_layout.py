"""Which windows an epoch was planned with, as a saved loader state records it: head
windows (``k`` > 1, :mod:`shardwise.plan.blocks`) or whole units (``k = 1``).

A state records ``k`` in its ``"mixing"`` key (``{"blocks": {"k": k, "layout":
BLOCKS_LAYOUT}}``); a state without it (every state of a dataset without head windows,
among them those saved before head windows existed) was planned with whole units.
Loading a state, a dataset plans the epoch it continues with the state's ``k``, whatever
its own ``first_window`` would give, so that the epoch goes on exactly as it was planned:

- ``first_window="auto"`` (the default) continues a state of either kind;
- ``first_window="heads"`` and ``first_window=None`` continue a state of their own kind
  only (head windows, or whole units), and refuse the other kind with a
  :class:`~shardwise.errors.PlanError` naming the setting that continues it.

The epochs after the one continued use the dataset's own ``k``.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import PlanError
from shardwise.plan.blocks import BLOCKS_LAYOUT

__all__ = ["PLAIN_KEY", "check_kind", "split_blocks", "with_blocks"]

# the mixing key of a dataset without mixing or canonical workers (saved when it has heads)
PLAIN_KEY: dict[str, Any] = {
    "sources": [],
    "bounds": [],
    "rules": [],
    "epoch_size": None,
    "batching": "random",
    "canonical_workers": None,
    "layout": 1,
}


def with_blocks(key: dict[str, Any] | None, blocks: int) -> dict[str, Any] | None:
    """``key`` (None: a plain dataset's) of an epoch planned with ``blocks`` (1: none)."""
    if blocks <= 1:
        return key
    return (key or PLAIN_KEY) | {"blocks": {"k": blocks, "layout": BLOCKS_LAYOUT}}


def split_blocks(saved: Any) -> tuple[Any, int]:
    """A saved mixing key without its head windows (None for a plain dataset's), and
    their ``k`` (1: whole units)."""
    if not isinstance(saved, dict) or "blocks" not in saved:
        return saved, 1
    blocks = saved["blocks"]
    k = blocks.get("k") if isinstance(blocks, dict) else None
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise PlanError(f"not a loader state written by state_dict: head windows {blocks!r}")
    if blocks.get("layout") != BLOCKS_LAYOUT:
        raise PlanError(
            "the loader state was saved by a shardwise version whose head windows lay out "
            f"this epoch differently (layout {blocks.get('layout')!r}, this version's is "
            f"{BLOCKS_LAYOUT}), so it cannot continue that epoch exactly; start a new epoch "
            "instead (set_epoch) of loading it"
        )
    rest = {name: value for name, value in saved.items() if name != "blocks"}
    return (None if rest == PLAIN_KEY else rest), k


def check_kind(first_window: str | None, own: int, saved: int) -> None:
    """Refuse a state planned with ``saved`` blocks when the dataset's explicit
    ``first_window`` (with ``own`` blocks) plans the other kind of windows."""
    if first_window == "auto" or (own > 1) == (saved > 1):
        return
    was = "head windows (first_window='heads')" if saved > 1 else "whole units"
    now = "first_window='heads'" if first_window == "heads" else f"first_window={first_window!r}"
    raise PlanError(
        f"the loader state's epoch was planned with {was}, but this dataset was made with "
        f"{now}, which plans {'head windows' if own > 1 else 'whole units'}; make it with "
        "first_window='auto' (the default) to continue the state's epoch as it was planned "
        "(later epochs then follow the dataset's own setting)"
    )
