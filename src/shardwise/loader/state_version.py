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
# 3 (2026-11-30): such a resume counts a sample the epoch holds more than once (a mixed
# source its quota wraps around) as a multiset; a state of 2 is continued unless its
# epoch was mixed at random (or is a token stream's, which does not record it) and went
# through such a resume after another elastic one (the first that can have differed)
STATE_VERSION = 3


def check_version(state: dict[str, Any], error: type[Exception]) -> None:
    """Refuse a saved state of an unknown version, or of an earlier one whose rest this
    version plans differently (see :data:`STATE_VERSION`)."""
    version = state.get("version")
    if version not in (1, 2, STATE_VERSION):
        raise error(f"unsupported state version {version!r}")
    resumes = state.get("resumes") or []
    padded = [i for i, r in enumerate(resumes[:-1]) if _padded(r)]
    after_another = any(i > 0 for i in padded)  # the first elastic resume is the same
    if (version == 1 and padded) or (version == 2 and after_another and _mixed(state)):
        raise error(
            "the state was saved by a shardwise version that continued a padded epoch "
            "(drop_last=False) on another topology differently, so it cannot continue that "
            "epoch exactly; start a new epoch instead (set_epoch)"
        )


def _padded(resume: Any) -> bool:
    """Whether a saved resume point's topology padded its epoch (drop_last=False)."""
    return isinstance(resume, dict) and not resume.get("topology", {}).get("drop_last", True)


def _mixed(state: dict[str, Any]) -> bool:
    """Whether the state's epoch may hold a sample more than once: sources mixed at random
    batches (stratified plans never carry padding copies over), or a token stream's state,
    which does not record its mixing."""
    mixing = state.get("mixing")
    if "seq_len" in state:
        return True
    return isinstance(mixing, dict) and mixing.get("batching", "random") == "random"
