"""The version of saved loader and token stream states, and which saved ones continue.

Both kinds of state hold the plan's resume points (``resumes``), which the plans of this
version continue: a change to what a plan yields after a resume changes the version.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STATE_VERSION", "check_version"]

# 2 (2026-11-30): an elastic resume of a padded epoch (drop_last=False) continues with each
# undelivered sample once (:mod:`shardwise.plan.padcopies`); a state of 1 is continued
# unless it went through such a resume already (what it delivered since differs)
STATE_VERSION = 2


def check_version(state: dict[str, Any], error: type[Exception]) -> None:
    """Refuse a saved state of an unknown version, or of version 1 that went through an
    elastic resume of a padded epoch (whose rest this version plans differently)."""
    version = state.get("version")
    if version not in (1, STATE_VERSION):
        raise error(f"unsupported state version {version!r}")
    resumes = state.get("resumes") or []
    padded = [
        r
        for r in resumes[:-1]
        if isinstance(r, dict) and not r.get("topology", {}).get("drop_last", True)
    ]
    if version == 1 and padded:
        raise error(
            "the state was saved by a shardwise version that continued a padded epoch "
            "(drop_last=False) on another topology differently, so it cannot continue that "
            "epoch exactly; start a new epoch instead (set_epoch)"
        )
