"""The progress bars of a parallel run: tqdm on stderr, imported only when a bar is shown."""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = ["progress_bar", "tqdm_class"]


class _NoBar:
    """The bar of a run without progress output: tqdm (and the ~0.1 s of its imports)
    only loads when a bar is shown, so a worker or a quiet run never pays for it."""

    def update(self, n: int = 1) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to close."""


def progress_bar(total: int | None, desc: str | None, enabled: bool, unit: str = "task") -> Any:
    """A tqdm bar counting to ``total`` (in ``unit``) on stderr, redrawn at most every 10 s
    when stderr is not a terminal (``TQDM_MININTERVAL`` sets it); one that draws nothing
    when ``enabled`` is false or ``SHARDWISE_PROGRESS=0``."""
    if not enabled or os.environ.get("SHARDWISE_PROGRESS") == "0":
        return _NoBar()
    tqdm = tqdm_class()
    tty = sys.stderr.isatty()
    env_interval = os.environ.get("TQDM_MININTERVAL")
    return tqdm(
        total=total,
        desc=desc or "tasks",
        unit=unit,
        mininterval=float(env_interval) if env_interval else (0.1 if tty else 10.0),
        dynamic_ncols=tty,
        ascii=not tty,
        file=sys.stderr,
    )


def tqdm_class() -> Any:
    """``tqdm.auto``'s bar: the notebook widget in a Jupyter kernel with ipywidgets, else
    the text bar. Imported without the warning tqdm gives in a kernel without ipywidgets
    ("IProgress not found. Please update jupyter and ipywidgets"): a run's text bar shows
    there as in a terminal, and whether to install ipywidgets is the user's choice."""
    from tqdm.std import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        from tqdm.auto import tqdm
    return tqdm
