"""Check an operator's arguments against its type hints, so a wrong value in a YAML
config or a Python call fails at once with the argument's name instead of deep inside
Arrow. Hints the checker does not understand accept any value."""

from __future__ import annotations

import collections.abc as cabc
import types
import typing
from collections.abc import Callable
from typing import Any

from shardwise.errors import ConfigError

__all__ = ["check_types", "describe", "fits"]


def check_types(label: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Raise :class:`ConfigError` naming the first argument whose value does not fit
    its annotation on ``fn``."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to check against
        return
    for name, value in kwargs.items():
        hint = hints.get(name)
        if hint is not None and not fits(value, hint):
            raise ConfigError(
                f"operator {label!r}: argument {name!r} must be {describe(hint)}, "
                f"got {value!r} ({type(value).__name__})"
            )


def fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is acceptable for the annotation ``hint``."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin is None:
        return _fits_plain(value, hint)
    return _fits_generic(value, origin, typing.get_args(hint))


def _fits_plain(value: Any, hint: Any) -> bool:
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _fits_generic(value: Any, origin: Any, args: tuple[Any, ...]) -> bool:
    if origin in (list, tuple, set, frozenset, cabc.Sequence, cabc.Iterable, cabc.Collection):
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:  # fixed-length tuple[A, B]
            return len(value) == len(args) and all(fits(v, h) for v, h in zip(value, args))
        item = args[0] if args else Any
        return all(fits(v, item) for v in value)
    if origin in (dict, cabc.Mapping):
        return isinstance(value, dict)
    if origin is cabc.Callable:
        return callable(value)
    return True


def describe(hint: Any) -> str:
    """A readable form of a type hint (``int | None``, ``list[str]``)."""
    text = str(hint) if typing.get_origin(hint) or not isinstance(hint, type) else hint.__name__
    return text.replace("typing.", "").replace("NoneType", "None")
