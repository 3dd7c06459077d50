"""Figures the docs quote come from the results files, not typed by hand.

A measured figure (a ratio like ``1.7x``, a rate in rows/s or MB/s, a duration a run took,
a share in percent, bytes fetched) on the README or a page of ``docs/`` is written as a
``<!-- value: FILE PATH FORMAT -->`` marker or comes from a rendered results table
(``tools/docsite/results.py``). The prose outside those is scanned; what looks measured
fails, unless it is listed below as not measured (a target, a definition, a workload's
size, arithmetic) or as still to convert, by the page that owns it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MEASURED = {
    "ratio": r"(?<![\w.])\d+(?:\.\d+)?x(?!\w)",
    "rate": r"\d[\d,.]*\s*[kM]?\s*(?:rows|samples|tokens|docs|documents|[KMG]i?B|B)/s\b",
    "duration": r"(?:about|took|takes|~)\s*\d+(?:\.\d+)?(?:-\d+)?\s*(?:s|ms|us|seconds|minutes)\b"
    r"|\d+(?:\.\d+)?(?:-\d+)?\s*(?:s|ms) each",
    "percent": r"\d+(?:\.\d+)?\s?%",
    "bytes": r"fetched\s+[\d,]{4,}",
}
NOT_MEASURED = {
    "docs/concepts/plan.md": ["1.000x means"],  # the definition of read amplification
    "docs/guides/streaming.md": ["1.000x means"],
    "docs/benchmarks/index.md": ["example 1.5x"],  # what a target looks like
    "docs/guides/tokens.md": ["0.8x and 1.5x targets"],  # the benchmark's targets
    "docs/guides/dedup.md": ["99% of the pairs"],  # the banding's S-curve, computed
    "docs/benchmarks/parallel.md": ["about 0.07 s each"],  # the benchmark's task size
}
TO_CONVERT: dict[str, list[str]] = {}  # hand-typed figures still to become value markers


def _prose(page: Path) -> str:
    """The page without code blocks, value markers and the README's generated table, on
    one line (a figure may be cut by a line break)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    text = re.sub(r"<!-- value: [^>]*-->", "VALUE", text)
    text = re.sub(
        r"<!-- bench-summary:start -->.*?<!-- bench-summary:end -->", "", text, flags=re.S
    )
    return re.sub(r"\s+", " ", text)


def measured_figures(text: str) -> list[str]:
    """Each figure that looks measured, with the words around it."""
    found = []
    for pattern in MEASURED.values():
        for match in re.finditer(pattern, text):
            found.append(text[max(0, match.start() - 15) : match.end() + 25])
    return found


def test_quoted_figures_are_markers_not_typed() -> None:
    typed = {}
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        allowed = NOT_MEASURED.get(name, []) + TO_CONVERT.get(name, [])
        left = [f for f in measured_figures(_prose(page)) if not any(a in f for a in allowed)]
        if left:
            typed[name] = left
    assert not typed, f"hand-typed figures (use <!-- value: ... --> markers): {typed}"


def test_every_listed_exception_is_still_on_its_page() -> None:
    """A converted figure leaves the lists, so they only ever shrink to what is true."""
    for listed in (NOT_MEASURED, TO_CONVERT):
        for name, phrases in listed.items():
            prose = _prose(ROOT / name)
            for phrase in phrases:
                assert phrase in prose, f"{name}: {phrase!r} is gone, drop it from the list"


def test_the_scan_finds_typed_figures() -> None:
    text = "it ran 2.5x faster, at 1,200 rows/s; took 3.2 s; 4% left; fetched 273,477 bytes"
    assert len(measured_figures(text)) == 5
    assert measured_figures("ran VALUEx faster at VALUE rows/s, 15 x 8 bands") == []
