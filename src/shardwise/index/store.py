"""Where an index is saved (beside the data, or in a cache directory) and loaded from."""

from __future__ import annotations

import hashlib
import json
import os
from functools import partial
from typing import Any

from shardwise.errors import StorageError
from shardwise.index.model import INDEX_NAME, DatasetIndex
from shardwise.storage import atomic_write, join, named, resolve, with_retries

__all__ = ["cache_root", "index_location", "load_saved", "save"]


def cache_root(cache_dir: str | None) -> str:
    root = (
        cache_dir
        or os.environ.get("SHARDWISE_CACHE_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "shardwise")
    )
    return os.path.join(root, "index")


def _spec_key(spec: list[str], fmt: str, format_options: dict[str, Any]) -> str:
    text = json.dumps([spec, fmt, sorted(format_options.items())], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def index_location(
    spec: list[str],
    fmt: str,
    format_options: dict[str, Any],
    cache_dir: str | None,
    directory: bool,
) -> str:
    """Beside the data when the dataset is one directory, else in the cache directory
    under a name made of the paths, the format and its options."""
    if len(spec) == 1 and directory:
        return join(spec[0], INDEX_NAME)
    return os.path.join(cache_root(cache_dir), _spec_key(spec, fmt, format_options) + ".json")


def load_saved(
    location: str, fmt: str, format_options: dict[str, Any], opts: dict[str, Any]
) -> DatasetIndex | None:
    try:
        fs, path = resolve(location, **(opts if "://" in location else {}))
        with named(location):
            payload = json.loads(with_retries(partial(fs.cat_file, path)))
        if payload.get("format_options") != json.loads(json.dumps(format_options, default=str)):
            return None
        saved = DatasetIndex.from_json(payload["index"])
    except (StorageError, OSError, ValueError, KeyError, TypeError):
        return None
    return saved if saved.format == fmt else None


def save(
    index: DatasetIndex,
    location: str,
    format_options: dict[str, Any],
    cache_dir: str | None,
    spec: list[str],
    opts: dict[str, Any],
) -> str:
    payload = json.dumps(
        {
            "format_options": json.loads(json.dumps(format_options, default=str)),
            "index": index.to_json(),
        }
    )
    fallback = os.path.join(
        cache_root(cache_dir), _spec_key(spec, index.format, format_options) + ".json"
    )
    for target in dict.fromkeys([location, fallback]):
        try:
            with atomic_write(target, "w", **(opts if "://" in target else {})) as f:
                f.write(payload)
            return target
        except (OSError, StorageError):
            continue
    return ""
