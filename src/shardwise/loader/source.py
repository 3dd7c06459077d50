"""The user's :class:`Source`: one source of a mixed ``StreamingDataset`` and its rule.

This is the one meaning of "source" in the loader. Imports the plan's ``Rule`` and the
index only; the loader's rooms may import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.index import DatasetIndex
from shardwise.plan import Rule

__all__ = ["Source"]


class Source:
    """One source of a mixed :class:`~shardwise.StreamingDataset`.

    Give at most one of ``weight``, ``repeat`` and ``choose`` (none: every sample once per
    epoch, i.e. ``repeat=1``). Per epoch the source contributes an exact integer quota.

    Args:
        path: a path, glob, URL or list of them, or a :class:`~shardwise.DatasetIndex`.
        weight: relative share of the epoch (give it to every source or to none); the
            epoch is ``epoch_size`` samples, or all samples of all sources.
        repeat: samples per epoch as a multiple of the source's size (``2.0``: every
            sample twice; ``0.5``: a different half each epoch).
        choose: exactly this many samples per epoch (a source smaller than that wraps around).
        columns: this source's columns: a list of names, or a mapping ``{dataset name:
            this source's name}`` that renames them to align with the other sources.
        name: the name shown in ``ds.stats()`` and ``shardwise plan`` (default: the path).
        **open_options: passed to :func:`shardwise.index_dataset` (``format``,
            ``storage_options``, format options).
    """

    def __init__(
        self,
        path: Any,
        *,
        weight: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        columns: Sequence[str] | Mapping[str, str] | None = None,
        name: str | None = None,
        **open_options: Any,
    ) -> None:
        if choose is not None and (
            isinstance(choose, bool) or not isinstance(choose, (int, np.integer))
        ):
            raise ConfigError(f"choose= must be a whole number of samples, got {choose!r}")
        self.rule = Rule(weight, repeat, None if choose is None else int(choose))
        self.path = path
        if isinstance(columns, str) or (
            columns is not None and not isinstance(columns, (Mapping, Sequence))
        ):
            raise ConfigError(
                f"Source columns= must be a list of names or a mapping, got {columns!r}"
            )
        self.columns: dict[str, str] | None = (
            None
            if columns is None
            else dict(columns)
            if isinstance(columns, Mapping)
            else {c: c for c in columns}
        )
        self.name = name if name is not None else _describe(path)
        if "on_error" in open_options:
            raise ConfigError("give on_error= to StreamingDataset: it applies to every source")
        self.open_options = open_options

    def __repr__(self) -> str:
        rule = {k: v for k, v in vars(self.rule).items() if v is not None}
        given = ", ".join(f"{k}={v!r}" for k, v in rule.items()) or "repeat=1"
        return f"Source({self.name!r}, {given})"


def _describe(path: Any) -> str:
    if isinstance(path, DatasetIndex):
        return path.location or (path.files[0].path if path.files else "index")
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    return ", ".join(os.fspath(p) for p in path)
