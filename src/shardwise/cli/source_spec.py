"""Sources written as text (``shardwise plan --source``): ``PATH[:key=value,...]``.

``data/web:weight=0.7`` , ``s3://bucket/code/*.jsonl:repeat=2,name=code``,
``books:choose=100000,format=jsonl``. The keys are ``weight``, ``repeat``, ``choose``,
``name`` and ``format``; a path that itself ends in ``:key=value`` text is not supported.
"""

from __future__ import annotations

from typing import Any

from shardwise.errors import ConfigError
from shardwise.loader.source import Source

__all__ = ["parse_source"]

_NUMBERS = {"weight": float, "repeat": float, "choose": int}


def parse_source(spec: str, format: str | None = None) -> Source:
    """The :class:`Source` that ``spec`` describes (``format``: the default format)."""
    path, rest = spec, ""
    if ":" in spec:
        head, tail = spec.rsplit(":", 1)
        if "=" in tail:
            path, rest = head, tail
    options: dict[str, Any] = {"format": format} if format else {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in (*_NUMBERS, "name", "format"):
            raise ConfigError(
                f"--source {spec!r}: {item!r} is not weight=, repeat=, choose=, name= or format="
            )
        try:
            options[key] = _NUMBERS[key](value) if key in _NUMBERS else value
        except ValueError as exc:
            raise ConfigError(f"--source {spec!r}: {key}= needs a number, got {value!r}") from exc
    if not path:
        raise ConfigError(f"--source {spec!r} names no path")
    return Source(path, **options)
