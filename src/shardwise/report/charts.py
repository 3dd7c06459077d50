"""Charts for the reports, drawn by matplotlib (the ``report`` extra) as SVG.

Each function takes plain numbers and returns an ``<img>`` tag holding the SVG as a
``data:`` URI: nothing is fetched, and glyphs are drawn as paths (no font files).
:func:`plotting` says whether matplotlib is there, or why not.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Sequence
from html import escape
from types import ModuleType
from typing import Any

from shardwise._optional import require
from shardwise.errors import MissingExtraError

__all__ = ["Chart", "bars", "heatmap", "histogram", "line", "plotting", "timeline"]

Chart = Callable[..., str]
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c")
WIDTH = 9.0  # inches (SVG: scaled to the page)
_RC = {
    "svg.fonttype": "path",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
}


def plotting() -> str | None:
    """``None`` when charts can be drawn, else the message naming the extra to install."""
    try:
        _mpl()
    except MissingExtraError as exc:
        return str(exc)
    return None


def _mpl() -> ModuleType:
    return require("matplotlib", "charts in reports")


def _draw(
    name: str,
    width: float,
    height: float,
    draw: Callable[[Any], None],
    alt: str,
    left: float = 0.75,
) -> str:
    """A figure of ``width`` x ``height`` inches drawn by ``draw(axes)``, as an ``<img>``.
    Margins are fixed (``left`` inches for the tick labels): a layout engine would draw
    every figure twice, the larger part of a report's time."""
    mpl = _mpl()
    from matplotlib.figure import Figure

    with mpl.rc_context({**_RC, "svg.hashsalt": name}):
        fig = Figure(figsize=(width, height))
        fig.subplots_adjust(
            left=left / width, right=1 - 0.25 / width, bottom=0.5 / height, top=1 - 0.35 / height
        )
        draw(fig.add_subplot())
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<img class="chart" id="chart-{escape(name)}" alt="{escape(alt)}" '
        f'src="data:image/svg+xml;base64,{data}">'
    )


def bars(
    name: str,
    labels: Sequence[str],
    values: Sequence[float],
    *,
    title: str,
    xlabel: str,
    stacked: Sequence[tuple[str, Sequence[float]]] = (),
    log: bool = False,
) -> str:
    """Horizontal bars, one per label (top to bottom), with the values written beside them;
    ``stacked`` adds named series after ``values`` on the same bars."""
    height = 1.1 + 0.28 * max(len(labels), 1)

    def draw(ax: Any) -> None:
        y = list(range(len(labels)))[::-1]
        left = [0.0] * len(labels)
        for i, (series, vals) in enumerate([(xlabel, values), *stacked]):
            ax.barh(y, vals, left=left, color=COLORS[i % len(COLORS)], label=series)
            left = [a + b for a, b in zip(left, vals)]
        for yy, total in zip(y, left):
            ax.annotate(
                f"{total:,.6g}",
                (total, yy),
                xytext=(3, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
            )
        ax.set_yticks(y, [_short(label) for label in labels])
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
        if log:
            ax.set_xscale("symlog")
        if stacked:
            ax.legend(loc="lower right", frameon=False)
        ax.margins(x=0.15)

    left = 0.3 + 0.062 * max((len(_short(label)) for label in labels), default=4)
    return _draw(name, WIDTH, height, draw, title, left=left)


def histogram(
    name: str, values: Sequence[float], *, title: str, xlabel: str, bins: int = 30
) -> str:
    """A histogram of ``values``."""

    def draw(ax: Any) -> None:
        ax.hist(
            values, bins=min(bins, max(len(set(values)), 1)), color=COLORS[0], edgecolor="white"
        )
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("count")

    return _draw(name, WIDTH, 2.6, draw, title)


def line(
    name: str, xs: Sequence[float], ys: Sequence[float], *, title: str, xlabel: str, ylabel: str
) -> str:
    """A step line of ``ys`` over ``xs``."""

    def draw(ax: Any) -> None:
        ax.step(xs, ys, where="post", color=COLORS[0])
        ax.fill_between(xs, ys, step="post", alpha=0.2, color=COLORS[0])
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)

    return _draw(name, WIDTH, 2.6, draw, title)


def timeline(
    name: str,
    rows: Sequence[Sequence[tuple[float, float, int]]],
    *,
    title: str,
    legend: Sequence[str],
) -> str:
    """One row per item (top to bottom) of ``(start, length, colour index)`` segments."""
    height = min(1.2 + 0.12 * len(rows), 9.0)

    def draw(ax: Any) -> None:
        for i, segments in enumerate(rows):
            colors = [COLORS[c % len(COLORS)] for _, _, c in segments]
            ax.broken_barh(
                [(s, max(w, 1e-6)) for s, w, _ in segments],
                (len(rows) - i - 0.4, 0.8),
                facecolors=colors,
            )
        for c, label in enumerate(legend):
            ax.barh([0], [0], color=COLORS[c % len(COLORS)], label=label)
        ax.set_title(title, loc="left")
        ax.set_xlabel("seconds since the run started")
        ax.set_ylabel("task")
        ax.set_ylim(0.4, len(rows) + 0.6)
        ax.set_yticks([])
        ax.legend(loc="upper right", frameon=False, fontsize=8)

    return _draw(name, WIDTH, height, draw, title)


def heatmap(
    name: str, matrix: Sequence[Sequence[float]], *, title: str, xlabel: str, ylabel: str, unit: str
) -> str:
    """``matrix[row][column]`` as coloured cells with a colour bar starting at 0."""
    import numpy as np

    data = np.asarray(matrix, dtype=np.float64)

    def draw(ax: Any) -> None:
        image = ax.imshow(
            data.T,
            aspect="auto",
            cmap="viridis",
            interpolation="nearest",
            origin="lower",
            vmin=0,
            vmax=max(float(data.max(initial=0.0)), 1e-9),
        )
        ax.figure.colorbar(image, ax=ax, label=unit, pad=0.01)
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)

    return _draw(name, WIDTH, 2.8, draw, title)


def _short(label: str, width: int = 42) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"
