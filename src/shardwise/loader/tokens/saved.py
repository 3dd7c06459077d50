"""What a ``TokenStream`` state records of the epoch's plan, and the checks of a loaded one.

A state records, besides its epoch and resume points, everything that decides which
sequence is where in the epoch: ``seed``, ``seq_len``, ``packing``, ``shuffle``, the
best-fit ``buffer``, a digest of the units' documents and sequences (``counts``: the data
and its packing), and, with sources, ``epoch_size`` or ``canonical_workers``, the mixing
key ``StreamingDataset`` records (:func:`~shardwise.loader.stats.mixing_key`). A state
loaded into a stream planned otherwise is a ``PlanError`` naming what differs (seed,
seq_len and packing, checked before, stay ``ConfigError`` s); the topology (world size,
workers, batch size, ``drop_last``) is the resume points' own and may change (elastic
resume). A state saved before the record was kept (no ``counts``) is checked on seed,
seq_len and packing alone, as it was then.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from shardwise.errors import ConfigError, PlanError
from shardwise.loader._args import check_state
from shardwise.loader.state_version import check_version
from shardwise.loader.stats import mixing_key
from shardwise.plan import Mixing, Resume

__all__ = ["check_loaded", "plan_record", "units_digest"]

NEEDED = ("epoch", "seed", "seq_len", "packing", "resumes")
FIRST = ("seed", "seq_len", "packing")  # recorded by every version: a ConfigError
DESCRIBED = {
    "shuffle": "shuffle",
    "buffer": "best_fit buffer",
    "counts": "dataset (its units' documents or sequences)",
    "mixing": "sources, weights, epoch_size or canonical_workers",
}


def units_digest(docs: np.ndarray, counts: np.ndarray) -> str:
    """A short digest of the documents and sequences per unit."""
    raw = np.ascontiguousarray(docs, np.int64).tobytes() + b"|"
    raw += np.ascontiguousarray(counts, np.int64).tobytes()
    return hashlib.sha1(raw).hexdigest()[:16]


def plan_record(
    *,
    seed: int,
    seq_len: int,
    packing: str,
    shuffle: bool,
    buffer: int,
    digest: str,
    index: Any,
    mixing: Mixing | None,
    canonical_workers: int | None,
) -> dict[str, Any]:
    """The state's record of what decides the epoch's plan (see the module docstring)."""
    record: dict[str, Any] = {
        "seed": seed,
        "seq_len": seq_len,
        "packing": packing,
        "shuffle": shuffle,
        "counts": digest,
    }
    if packing == "best_fit":
        record["buffer"] = buffer
    key = mixing_key(index, mixing, canonical_workers)
    if key is not None:
        record["mixing"] = key
    return record


def check_loaded(state: Any, record: dict[str, Any]) -> tuple[int, list[Resume]]:
    """``(epoch, resume points)`` of ``state``, a TokenStream state of a plan ``record``
    describes; a ``ConfigError`` for what is not such a state, a ``PlanError`` for one
    planned differently."""
    check_state(state)
    missing = [k for k in NEEDED if k not in state]
    if missing:
        other = " (a StreamingDataset's state?)" if "seq_len" not in state else ""
        raise ConfigError(
            f"not a TokenStream state written by state_dict{other}: it has no {missing}"
        )
    check_version(state, ConfigError)
    for key in FIRST:
        if state[key] != record[key]:
            raise ConfigError(f"the state has {key}={state[key]!r}, this stream {record[key]!r}")
    if "counts" in state:  # saved with the record (states before it lack every key of it)
        for key, what in DESCRIBED.items():
            was, now = state.get(key), record.get(key)
            if was != now:
                raise PlanError(
                    f"the state was saved for another {what} ({_differ(key, was, now)}): "
                    "it cannot continue this stream's epoch"
                )
    try:
        return int(state["epoch"]), [Resume.from_dict(r) for r in state["resumes"]]
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"not a TokenStream state written by state_dict: {type(exc).__name__} {exc}"
        ) from exc


def _differ(key: str, was: Any, now: Any) -> str:
    """What differs between a saved value and this stream's (a mixing key's own keys)."""
    if isinstance(was, dict) and isinstance(now, dict):
        keys = [k for k in {**was, **now} if was.get(k) != now.get(k)]
        return ", ".join(f"{k}={was.get(k)!r}, this stream {now.get(k)!r}" for k in keys)
    return f"{key}={was!r}, this stream {now!r}"
