"""Self-contained HTML pages: inline style, no script, nothing fetched (no CDN, no fonts)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["Section", "key_values", "number", "page", "table"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222;
       padding: 0 1em; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 2em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; } .note { color: #666; } .bad { color: #b00020; font-weight: bold; }
img.chart { display: block; max-width: 100%; margin: 0.6em 0; }
.sample { white-space: pre-wrap; max-width: 28em; font-size: 12px; }
"""


class Section:
    """A titled part of a page, filled with HTML fragments in order."""

    def __init__(self, title: str, anchor: str) -> None:
        self.title = title
        self.anchor = anchor
        self.parts: list[str] = []

    def add(self, html: str) -> Section:
        """Append an HTML fragment (already escaped)."""
        self.parts.append(html)
        return self

    def note(self, text: str) -> Section:
        """Append a paragraph of plain text."""
        return self.add(f'<p class="note">{escape(text)}</p>')

    def render(self) -> str:
        return (
            f'<section id="{escape(self.anchor)}"><h2>{escape(self.title)}</h2>\n'
            + "\n".join(self.parts)
            + "</section>"
        )


def number(value: float) -> str:
    """A number as a cell shows it: whole numbers grouped by thousands with commas
    (``2,211``); fractions never grouped, so a comma is never read as a decimal point
    (``2211.2``, ``0.125``; ``2,211.213`` reads as two million where a comma is the
    decimal mark)."""
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3f}"


def _cell(value: object, tag: str) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"<{tag}>{escape(str(value))}</{tag}>"
    return f'<{tag} class="num">{number(value)}</{tag}>'


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    table_id: str = "",
    sample: Sequence[int] = (),
) -> str:
    """An HTML table; numbers are right-aligned with thousands separators, columns listed
    in ``sample`` hold long text."""
    attr = f' id="{escape(table_id)}"' if table_id else ""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = [
            f'<td class="sample">{escape(str(v))}</td>' if i in sample else _cell(v, "td")
            for i, v in enumerate(row)
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f"<table{attr}><thead><tr>{head}</tr></thead><tbody>" + "".join(body) + "</tbody></table>"
    )


def key_values(rows: Sequence[tuple[str, object]], *, table_id: str = "") -> str:
    """A two-column table of names and values."""
    attr = f' id="{escape(table_id)}"' if table_id else ""
    body = "".join(f"<tr><th>{escape(k)}</th>{_cell(v, 'td')}</tr>" for k, v in rows)
    return f"<table{attr}><tbody>{body}</tbody></table>"


def page(title: str, subtitle: str, sections: Sequence[Section]) -> str:
    """The whole document."""
    nav = " · ".join(f'<a href="#{escape(s.anchor)}">{escape(s.title)}</a>' for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # nothing may be fetched: images are data: URIs, styles inline
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        f'<h1>{escape(title)}</h1><p class="note">{escape(subtitle)}</p><nav>{nav}</nav>\n'
        + "\n".join(s.render() for s in sections)
        + "\n</body></html>\n"
    )
