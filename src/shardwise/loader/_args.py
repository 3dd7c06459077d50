"""Checks of the arguments of ``StreamingDataset`` and ``TokenStream`` at the public edge
(the one home of these checks: both use them): a wrong type or value is a
:class:`ConfigError` naming the argument, never a silent coercion (``batch_size=2.5``
becoming 2, ``drop_last="no"`` being true) or a raw ``TypeError`` from deep inside."""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError

__all__ = [
    "check_bool",
    "check_choice",
    "check_columns",
    "check_filter",
    "check_format",
    "check_int",
    "check_order",
    "check_ranks",
    "check_state",
    "check_threads",
    "default_threads",
]


def check_int(name: str, value: Any, minimum: int | None = None, optional: bool = False) -> Any:
    """An integer (numpy's too; not a bool, float or string) of at least ``minimum``."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``True`` or ``False`` (numpy booleans too), nothing merely truthy."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """One of ``choices``."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def check_order(seed: Any, shuffle: Any, drop_last: Any) -> tuple[int, bool, bool]:
    """``seed`` (an integer >= 0), ``shuffle`` and ``drop_last`` (booleans), checked."""
    return (
        check_int("seed", seed, 0),
        check_bool("shuffle", shuffle),
        check_bool("drop_last", drop_last),
    )


def check_ranks(rank: Any, world_size: Any) -> tuple[int | None, int | None]:
    """``rank`` (>= 0) and ``world_size`` (>= 1) as given, integers; None: detected."""
    world = check_int("world_size", world_size, 1, optional=True)
    return check_int("rank", rank, 0, optional=True), world


def check_columns(columns: Sequence[str] | None) -> list[str] | None:
    """A list of column names; a single name given as a string is refused (it would be
    read as one column per character)."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not all(isinstance(c, str) for c in columns):
        raise ConfigError(f"columns must be a list of column names, got {columns!r}")
    return list(columns)


def check_filter(expression: Any, index: Any) -> pc.Expression | None:
    """A ``pyarrow.compute`` expression that applies to the schema of ``index`` (each
    source's, when sources are mixed: the filter is applied to each before mixing)."""
    schemas = [ix.schema for ix in getattr(index, "indexes", [index])]
    if expression is None:
        return None
    if not isinstance(expression, pc.Expression):
        raise ConfigError(
            f"filter must be a pyarrow.compute expression (e.g. pc.field('label') == 3), "
            f"got {type(expression).__name__} {expression!r}"
        )
    for schema in schemas:
        try:
            schema.empty_table().filter(expression)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ConfigError(
                f"filter {expression} does not apply to the dataset's columns {schema.names}: {exc}"
            ) from exc
    return expression


_STATE_KEYS = {
    "version": int,
    "epoch": int,
    "seed": int,
    "shuffle": bool,
    "counts": str,
    "resumes": list,
}


def check_state(state: Any) -> None:
    """A loader state as ``state_dict`` writes it (keys and their types)."""
    if not isinstance(state, dict):
        raise ConfigError(
            f"load_state_dict takes the dict state_dict returned, got {type(state).__name__}"
        )
    for key, kind in _STATE_KEYS.items():
        if key in state and not isinstance(state[key], kind):
            raise ConfigError(
                f"loader state field {key!r} must be {kind.__name__}, got {state[key]!r}"
            )


def default_threads() -> int:
    """Threads per training process: the CPUs this process may use (its affinity, capped
    by a cgroup CPU quota), shared by the ranks of this node (``LOCAL_WORLD_SIZE``, as
    torchrun sets it), between 1 and 8."""
    from shardwise.parallel.cpus import cpu_count

    cpus = cpu_count()
    try:
        local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local_ranks = 1
    return max(1, min(8, cpus // local_ranks))


def check_threads(num_threads: int | None) -> int:
    """``num_threads`` as given (an integer >= 1), or the default for this process."""
    given = check_int("num_threads", num_threads, 1, optional=True)
    return given or default_threads()


def check_format(batch_format: Any, pad_to: Any) -> Any:
    """A batch format ``StreamingDataset`` makes (returned), and ``pad_to`` only where it
    pads."""
    if batch_format not in (None, "numpy", "torch", "arrow"):
        raise ConfigError(
            f"batch_format must be None, 'numpy', 'torch' or 'arrow', got {batch_format!r}"
        )
    if pad_to is not None and batch_format not in ("numpy", "torch"):
        raise ConfigError(
            f"pad_to={pad_to!r} pads numpy or torch batches; batch_format is {batch_format!r}"
        )
    return batch_format
