"""Readers and writers for Parquet, JSONL and WebDataset tar shards.

Each format is an object implementing :class:`shardwise.formats.base.Format`,
found by name with :func:`get_format` or by file name with :func:`detect_format`.
"""

from __future__ import annotations

import importlib

from shardwise.errors import FormatError
from shardwise.formats.base import (
    Format,
    OnError,
    Quarantine,
    ShardWriter,
    Unit,
    WrittenFile,
    check_on_error,
    guess_format,
)

__all__ = [
    "Format",
    "OnError",
    "Quarantine",
    "ShardWriter",
    "Unit",
    "WrittenFile",
    "check_on_error",
    "detect_format",
    "get_format",
    "guess_format",
    "known_formats",
]

# name -> (module, class); modules are imported on first use.
_REGISTRY: dict[str, tuple[str, str]] = {
    "parquet": ("shardwise.formats.parquet", "ParquetFormat"),
    "jsonl": ("shardwise.formats.jsonl", "JsonlFormat"),
    "webdataset": ("shardwise.formats.webdataset", "WebDatasetFormat"),
}
_ALIASES = {"json": "jsonl", "ndjson": "jsonl", "tar": "webdataset", "wds": "webdataset", "pq": "parquet"}
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
    module, cls = _REGISTRY[key]
    if options:
        return getattr(importlib.import_module(module), cls)(**options)
    if key not in _CACHE:
        _CACHE[key] = getattr(importlib.import_module(module), cls)()
    return _CACHE[key]


def detect_format(path: str) -> str:
    """Return the format name for a file from its suffix.

    Raises:
        FormatError: the suffix is not one shardwise reads.
    """
    name = guess_format(path)
    if name is not None:
        return name
    raise FormatError(
        "unknown format (expected .parquet, .jsonl[.gz|.zst], .json, .ndjson or .tar); "
        "pass format=... to choose one",
        path,
    )
