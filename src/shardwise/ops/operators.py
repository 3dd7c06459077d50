"""Operators: pure functions on ``pyarrow.RecordBatch``, registered by name.

Three kinds:

- a *mapper* returns a new batch (same or fewer/more columns, same rows);
- a *filter* returns ``(mask, reason)``: a boolean array (True = keep) and the reason
  recorded for every dropped row; nulls in the mask count as drop;
- a *dedup* marks a global stage: rows are dropped when their key was seen earlier in
  input order (decided across all tasks; see :mod:`shardwise.ops.dedup`).

Register one with ``@register_op("name", kind="map")`` on a function taking the batch
first and keyword arguments after (a dedup operator is a
:class:`~shardwise.ops.dedup.DedupOp` subclass); YAML configs and
``Pipeline.apply(name, **kw)`` use the name. Built-in operators are listed by name and
module here and imported on first use. Unknown names and wrong arguments raise
:class:`ConfigError` with the choices and the nearest match.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from shardwise.errors import ConfigError
from shardwise.ops._argcheck import check_types
from shardwise.ops.dedup import DedupOp

__all__ = ["Op", "OpKind", "get_op", "known_ops", "make_op", "register_op"]

OpKind = Literal["map", "filter", "dedup"]
_KINDS = ("map", "filter", "dedup")
# built-in operators, imported on first use (so that no module imports this one back)
_BUILTINS: dict[str, tuple[OpKind, str]] = {
    "select_columns": ("map", "shardwise.ops.columns:select_columns"),
    "drop_columns": ("map", "shardwise.ops.columns:drop_columns"),
    "rename_columns": ("map", "shardwise.ops.columns:rename_columns"),
    "normalize_text": ("map", "shardwise.ops.text:normalize_text"),
    "strip_urls": ("map", "shardwise.ops.text:strip_urls"),
    "strip_html": ("map", "shardwise.ops.text:strip_html"),
    "length_filter": ("filter", "shardwise.ops.text:length_filter"),
    "word_count_filter": ("filter", "shardwise.ops.text:word_count_filter"),
    "char_ratio_filter": ("filter", "shardwise.ops.text:char_ratio_filter"),
    "regex_filter": ("filter", "shardwise.ops.text:regex_filter"),
    "repetition_filter": ("filter", "shardwise.ops.text:repetition_filter"),
    "tokenize": ("map", "shardwise.ops.tokens:tokenize"),
    "exact_dedup": ("dedup", "shardwise.ops.exact:ExactDedup"),
    "minhash_dedup": ("dedup", "shardwise.dedup.minhash:MinHashDedup"),
}
_REGISTRY: dict[str, tuple[OpKind, Callable[..., Any]]] = {}


@dataclass(frozen=True)
class Op:
    """A configured operator.

    Attributes:
        name: registered name, or the function's name for user functions.
        kind: ``map``, ``filter`` or ``dedup``.
        fn: the function, called as ``fn(batch, **kwargs)``; for ``dedup``, the
            :class:`~shardwise.ops.dedup.DedupOp` instance.
        kwargs: its arguments.
    """

    name: str
    kind: OpKind
    fn: Callable[..., Any] | DedupOp
    kwargs: dict[str, Any] = field(default_factory=dict)

    def _call(self, batch: pa.RecordBatch) -> Any:
        if isinstance(self.fn, DedupOp):
            raise ConfigError(f"operator {self.name!r} is a dedup operator, not a {self.kind}")
        return self.fn(batch, **self.kwargs)

    def map(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Apply a mapper; it must keep the row count."""
        out = self._call(batch)
        if isinstance(out, pa.Table):
            out = (
                out.combine_chunks().to_batches()[0]
                if out.num_rows
                else pa.RecordBatch.from_pylist([], schema=out.schema)
            )
        if not isinstance(out, pa.RecordBatch):
            raise ConfigError(
                f"mapper {self.name!r} must return a RecordBatch, got {type(out).__name__}"
            )
        if out.num_rows != batch.num_rows:
            raise ConfigError(
                f"mapper {self.name!r} changed the row count ({batch.num_rows} -> "
                f"{out.num_rows}); use a filter"
            )
        return out

    def mask(self, batch: pa.RecordBatch) -> tuple[pa.BooleanArray, str]:
        """Apply a filter: the keep-mask (nulls count as drop) and the drop reason."""
        out = self._call(batch)
        mask, reason = out if isinstance(out, tuple) else (out, self.name)
        try:
            mask = (
                pa.array(mask, pa.bool_())
                if not isinstance(mask, (pa.Array, pa.ChunkedArray))
                else mask
            )
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ConfigError(
                f"filter {self.name!r} returned no mask of booleans ({type(exc).__name__}: {exc})"
            ) from exc
        if isinstance(mask, pa.ChunkedArray):
            mask = mask.combine_chunks()
        if not pa.types.is_boolean(mask.type):
            raise ConfigError(f"filter {self.name!r} returned {mask.type} values, not booleans")
        if len(mask) != batch.num_rows:
            raise ConfigError(
                f"filter {self.name!r} returned {len(mask)} values for {batch.num_rows} rows"
            )
        return mask.fill_null(False), str(reason)

    @property
    def dedup(self) -> DedupOp:
        """The dedup operator (``kind == "dedup"`` only)."""
        if not isinstance(self.fn, DedupOp):
            raise ConfigError(f"operator {self.name!r} is not a dedup operator")
        return self.fn

    def describe(self) -> dict[str, Any]:
        return {"op": self.name, **{k: v for k, v in self.kwargs.items() if _plain(v)}}


def _plain(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, tuple, dict))


def register_op(name: str, kind: OpKind) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn`` as operator ``name`` of ``kind``.

    For ``kind="dedup"`` decorate a :class:`~shardwise.ops.dedup.DedupOp` subclass (a
    frozen dataclass whose fields are its parameters)."""
    if kind not in _KINDS:
        raise ConfigError(f"kind must be map, filter or dedup, got {kind!r}")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if kind == "dedup" and not (isinstance(fn, type) and issubclass(fn, DedupOp)):
            raise ConfigError(f"dedup operator {name!r} must be a DedupOp subclass")
        _REGISTRY[name] = (kind, fn)
        return fn

    return deco


def known_ops() -> dict[str, OpKind]:
    """Registered operator names and their kinds."""
    kinds = {name: kind for name, (kind, _) in _BUILTINS.items()}
    kinds.update({name: kind for name, (kind, _) in _REGISTRY.items()})
    return dict(sorted(kinds.items()))


def _lookup(name: str) -> tuple[OpKind, Callable[..., Any]]:
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in _BUILTINS:
        names = sorted({*_BUILTINS, *_REGISTRY})
        near = difflib.get_close_matches(name, names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ConfigError(f"unknown operator {name!r}{hint} known operators: {', '.join(names)}")
    kind, target = _BUILTINS[name]
    module, attr = target.split(":")
    return kind, getattr(importlib.import_module(module), attr)


def get_op(name: str, **kwargs: Any) -> Op:
    """A registered operator with validated arguments."""
    kind, fn = _lookup(name)
    return make_op(fn, kind, name, kwargs)


def _check_kwargs(label: str, params: list[inspect.Parameter], kwargs: dict[str, Any]) -> None:
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in params)
    names = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = [k for k in kwargs if k not in names]
    if unknown and not accepts_any:
        near = difflib.get_close_matches(unknown[0], names, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(
            f"operator {label!r} has no argument {unknown[0]!r}{hint}; "
            f"its arguments: {', '.join(names) or '(none)'}"
        )
    missing = [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.name not in kwargs
    ]
    if missing:
        raise ConfigError(f"operator {label!r} needs argument {missing[0]!r}")


def make_op(
    fn: Callable[..., Any],
    kind: OpKind,
    name: str | None = None,
    kwargs: dict[str, Any] | None = None,
) -> Op:
    """Wrap a function (or, for ``dedup``, a DedupOp class) as an operator, checking
    ``kwargs`` against its signature."""
    kwargs = dict(kwargs or {})
    label: str = name or str(getattr(fn, "__name__", "op"))
    if kind == "dedup":
        if not (isinstance(fn, type) and issubclass(fn, DedupOp)):
            raise ConfigError(f"dedup operator {label!r} must be a DedupOp subclass")
        _check_kwargs(label, list(inspect.signature(fn).parameters.values()), kwargs)
        check_types(label, fn, kwargs)
        return Op(label, kind, fn(**kwargs), kwargs)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return Op(label, kind, fn, kwargs)
    _check_kwargs(label, list(sig.parameters.values())[1:], kwargs)
    check_types(label, fn, kwargs)
    return Op(label, kind, fn, kwargs)
