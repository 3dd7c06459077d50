"""Readers and writers for Parquet, JSONL and WebDataset tar shards.

Each format is an object implementing :class:`shardwise.formats.contract.Format`,
found by name with :func:`get_format` or by file name with :func:`detect_format`.

Each format is a sub-package (:mod:`.parquet`, :mod:`.jsonl`, :mod:`.webdataset`) over
the core: the contract every format meets (:mod:`.contract`) and the rolling shard
writer (:mod:`._writer`).

May import: ``shardwise.errors``, ``shardwise._optional`` and ``shardwise.storage`` (see
``docs/layers.toml``).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise.errors import ConfigError, FormatError
from shardwise.formats.contract import (
    SUFFIXES,
    Format,
    OnError,
    Quarantine,
    ShardWriter,
    Unit,
    WrittenFile,
    check_on_error,
    guess_format,
    unit_place,
)

__all__ = [
    "Format",
    "OnError",
    "Quarantine",
    "ShardWriter",
    "Unit",
    "WrittenFile",
    "check_format_options",
    "check_on_error",
    "detect_format",
    "format_class",
    "get_format",
    "guess_format",
    "known_formats",
    "unit_place",
]

# name -> (module, class); modules are imported on first use.
_REGISTRY: dict[str, tuple[str, str]] = {
    "parquet": ("shardwise.formats.parquet", "ParquetFormat"),
    "jsonl": ("shardwise.formats.jsonl", "JsonlFormat"),
    "webdataset": ("shardwise.formats.webdataset", "WebDatasetFormat"),
}
_ALIASES = {
    "json": "jsonl",
    "ndjson": "jsonl",
    "tar": "webdataset",
    "wds": "webdataset",
    "pq": "parquet",
}
_CACHE: dict[str, Format] = {}


def known_formats() -> list[str]:
    """Names of the registered formats."""
    return sorted(_REGISTRY)


def get_format(name: str, **options: object) -> Format:
    """Return the format object registered under ``name`` (or an alias).

    Args:
        name: format name or alias.
        **options: constructor options (e.g. ``unit_bytes`` for JSONL); with
            options a new object is made, without them a shared default one.

    Raises:
        FormatError: unknown name; the message lists the known ones.
    """
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        raise FormatError(f"unknown format {name!r}; known formats: {', '.join(known_formats())}")
    if options:
        check_format_options(key, options, f"format {key!r}")
        return format_class(key)(**options)
    if key not in _CACHE:
        _CACHE[key] = format_class(key)()
    return _CACHE[key]


def check_format_options(
    format: str | None, options: Mapping[str, Any], caller: str, own: Iterable[str] = ()
) -> None:
    """Refuse an option that neither ``format`` (any format when ``None``) nor the public
    call ``caller`` takes, suggesting the nearest name among both.

    Raises:
        ConfigError: ``caller() got an unexpected keyword argument 'x' (did you mean 'y'?)``.
    """
    if not options:
        return  # nothing to refuse (and no format's reader imported to list its options)
    names: set[str] = set()
    for key in [format] if format else known_formats():
        names.update(_options_of(format_class(_ALIASES.get(key.lower(), key.lower()))))
    for key in options:
        if key not in names:
            near = difflib.get_close_matches(key, sorted({*names, *own}), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")


@functools.cache
def _options_of(cls: type[Format]) -> frozenset[str]:
    """The keyword arguments ``cls`` takes (asked at each unit read with options)."""
    return frozenset(p for p in inspect.signature(cls).parameters if p != "self")


def format_class(name: str) -> type[Format]:
    """The class registered under ``name`` (or an alias)."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in _REGISTRY:
        raise FormatError(f"unknown format {key!r}; known formats: {', '.join(known_formats())}")
    module, cls = _REGISTRY[key]
    found: type[Format] = getattr(importlib.import_module(module), cls)
    return found


def detect_format(path: str) -> str:
    """Return the format name for a file from its suffix.

    Raises:
        FormatError: the suffix is not one shardwise reads.
    """
    name = guess_format(path)
    if name is not None:
        return name
    known = ", ".join(suffix for suffix, _ in SUFFIXES)
    raise FormatError(
        f"unknown format (expected one of {known}); pass format=... to choose one", path
    )
