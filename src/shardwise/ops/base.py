"""Operators: pure functions on ``pyarrow.RecordBatch``, registered by name.

Three kinds:

- a *mapper* returns a new batch (same or fewer/more columns, same rows);
- a *filter* returns ``(mask, reason)``: a boolean array (True = keep) and the reason
  recorded for every dropped row; nulls in the mask count as drop;
- a *dedup* marks a global stage: rows are dropped when their key was seen earlier in
  input order (decided across all tasks by the pipeline).

Register one with ``@register_op("name", kind="map")`` on a function taking the batch
first and keyword arguments after; YAML configs and ``Pipeline.apply(name, **kw)`` use the
name. Unknown names and wrong arguments raise :class:`ConfigError` with the choices.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from shardwise.errors import ConfigError

__all__ = ["Op", "OpKind", "get_op", "known_ops", "make_op", "register_op"]

OpKind = Literal["map", "filter", "dedup"]
_REGISTRY: dict[str, tuple[OpKind, Callable[..., Any]]] = {}


@dataclass(frozen=True)
class Op:
    """A configured operator.

    Attributes:
        name: registered name, or the function's name for user functions.
        kind: ``map``, ``filter`` or ``dedup``.
        fn: the function; called as ``fn(batch, **kwargs)``.
        kwargs: its arguments.
    """

    name: str
    kind: OpKind
    fn: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def map(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        out = self.fn(batch, **self.kwargs)
        if isinstance(out, pa.Table):
            out = out.combine_chunks().to_batches()[0] if out.num_rows else pa.RecordBatch.from_pylist([], schema=out.schema)
        if not isinstance(out, pa.RecordBatch):
            raise TypeError(f"mapper {self.name!r} must return a RecordBatch, got {type(out).__name__}")
        if out.num_rows != batch.num_rows:
            raise ValueError(f"mapper {self.name!r} changed the row count ({batch.num_rows} -> {out.num_rows}); use a filter")
        return out

    def mask(self, batch: pa.RecordBatch) -> tuple[pa.BooleanArray, str]:
        out = self.fn(batch, **self.kwargs)
        mask, reason = out if isinstance(out, tuple) else (out, self.name)
        mask = pa.array(mask, pa.bool_()) if not isinstance(mask, (pa.Array, pa.ChunkedArray)) else mask
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        if len(mask) != batch.num_rows:
            raise ValueError(f"filter {self.name!r} returned {len(mask)} values for {batch.num_rows} rows")
        return mask.fill_null(False), str(reason)

    def describe(self) -> dict[str, Any]:
        return {"op": self.name, **{k: v for k, v in self.kwargs.items() if _plain(v)}}


def _plain(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, tuple, dict))


def register_op(name: str, kind: OpKind) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn`` as operator ``name`` of ``kind``."""
    if kind not in ("map", "filter", "dedup"):
        raise ValueError(f"kind must be map, filter or dedup, got {kind!r}")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        _REGISTRY[name] = (kind, fn)
        return fn

    return deco


def known_ops() -> dict[str, OpKind]:
    """Registered operator names and their kinds."""
    _load_builtins()
    return {k: v[0] for k, v in sorted(_REGISTRY.items())}


def _load_builtins() -> None:
    from shardwise.dedup import minhash  # noqa: F401 - registration side effect
    from shardwise.ops import columns, exact, text  # noqa: F401


def get_op(name: str, **kwargs: Any) -> Op:
    """A registered operator with validated arguments."""
    _load_builtins()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown operator {name!r}; known operators: {', '.join(sorted(_REGISTRY))}")
    kind, fn = _REGISTRY[name]
    return make_op(fn, kind, name, kwargs)


def make_op(fn: Callable[..., Any], kind: OpKind, name: str | None = None, kwargs: dict[str, Any] | None = None) -> Op:
    """Wrap a function as an operator, checking ``kwargs`` against its signature."""
    kwargs = dict(kwargs or {})
    label = name or getattr(fn, "__name__", "op")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return Op(label, kind, fn, kwargs)
    params = list(sig.parameters.values())[1:]
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params)
    names = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = [k for k in kwargs if k not in names]
    if unknown and not accepts_any:
        raise ConfigError(f"operator {label!r} has no argument {unknown[0]!r}; its arguments: {', '.join(names) or '(none)'}")
    missing = [p.name for p in params if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in kwargs]
    if missing:
        raise ConfigError(f"operator {label!r} needs argument {missing[0]!r}")
    validate = getattr(fn, "validate", None)
    if validate is not None:  # operators may check their arguments before any data is read
        validate(**{p.name: kwargs.get(p.name, p.default) for p in params
                    if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)})
    return Op(label, kind, fn, kwargs)
