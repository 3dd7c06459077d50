"""Which files a dataset is: paths and globs expanded, a committed output's manifest
trusted over a glob, an unfinished output refused, and the format chosen."""

from __future__ import annotations

import json
from typing import Any

from shardwise.errors import FormatError, StorageError
from shardwise.formats import (
    detect_format,
    get_format,
    guess_format,
)
from shardwise.storage import FileInfo, expand, info, join, named, open_input, resolve

__all__ = ["MANIFEST_NAME", "choose_format", "expand_with_manifests", "file_infos"]

MANIFEST_NAME = "_manifest.json"


def expand_with_manifests(spec: list[str], opts: dict[str, Any]) -> list[str]:
    """Expand paths; a directory holding a committed pipeline manifest contributes exactly
    the files the manifest lists (never a glob, which could pick up stray files)."""
    out: list[str] = []
    for item in spec:
        manifest = join(item, MANIFEST_NAME)
        try:
            with open_input(manifest, **opts) as f:
                listed = json.loads(f.read())["files"]
        except (FileNotFoundError, StorageError, NotADirectoryError, IsADirectoryError) as exc:
            if isinstance(exc, StorageError) and exc.refused:
                raise  # no credentials, access denied: say so, do not read around it
            _refuse_unfinished(item, opts)
            out.extend(expand(item, **opts))
            continue
        except (ValueError, KeyError) as exc:
            raise FormatError(f"unreadable manifest ({exc})", manifest) from exc
        out.extend(join(item, entry["path"]) for entry in listed)
    return out


def _refuse_unfinished(item: str, opts: dict[str, Any]) -> None:
    """A directory that a pipeline is still writing (or crashed writing) has ``_work/``
    and no manifest yet: reading its files would trust an unfinished output."""
    if any(ch in item for ch in "*?["):
        return
    try:
        fs, path = resolve(join(item, "_work", "out", "_work", "pipeline.json"), **opts)
        with named(item):
            unfinished = fs.exists(path)
    except (OSError, ValueError) as exc:
        if isinstance(exc, StorageError) and exc.refused:
            raise
        return
    if unfinished:
        raise StorageError(
            f"{item} is the output of an unfinished shardwise run (no {MANIFEST_NAME} yet); "
            "rerun the pipeline to finish it",
            item,
        )


def choose_format(files: list[str], format: str | None) -> str:
    if format is not None:
        name = get_format(format).name
        for f in files:  # a file whose suffix names another format is not read as this one
            other = guess_format(f)
            if other is not None and other != name:
                raise FormatError(
                    f"format={format!r} was given, but this is a {other} file by its name; "
                    f"drop format= or pass format={other!r}",
                    f,
                )
        return name
    found: dict[str, str] = {}
    for f in files:
        found.setdefault(detect_format(f), f)
    if len(found) > 1:
        shown = ", ".join(f"{k} ({v})" for k, v in found.items())
        raise FormatError(f"the paths mix formats: {shown}; pass format=... or narrow the glob")
    return next(iter(found))


def file_infos(files: list[str], opts: dict[str, Any]) -> list[FileInfo]:
    from shardwise.parallel import parallel_map

    if len(files) < 64:
        return [info(f, **opts) for f in files]
    return parallel_map(lambda f: info(f, **opts), files, backend="thread", desc="stat files")
