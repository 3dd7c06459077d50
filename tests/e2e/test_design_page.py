"""docs/design.md draws the code as it is: the tree names every module of src/shardwise
(and none that is gone), and the layer diagram every package of docs/layers.toml."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "shardwise"
DESIGN = (ROOT / "docs" / "design.md").read_text()
BLOCK = re.compile(r"^```\n(.*?)^```", re.S | re.M)
MODULE = re.compile(r"\b([A-Za-z_]\w*\.py)\b")


def _block_under(heading: str) -> str:
    section = DESIGN.split(f"\n{heading}\n", 1)[1]
    match = BLOCK.search(section)
    assert match is not None, f"docs/design.md: no code block under {heading!r}"
    return match.group(1)


def drawn_modules(tree: str) -> set[str]:
    """Module paths (relative to src/shardwise) the tree names. A line starting with
    ``name/`` opens a folder inside the nearest less indented folder; the ``*.py`` names on
    a line belong to the folder it opens, else to the nearest less indented one."""
    stack: list[tuple[int, str]] = []
    found = set()
    for line in tree.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        first = line.split()[0]
        if first.endswith("/"):
            parent = stack[-1][1] if stack else ""
            stack.append((indent, "" if first == "src/shardwise/" else parent + first))
        folder = stack[-1][1] if stack else ""
        found |= {folder + name for name in MODULE.findall(line)}
    return found


def test_design_tree_names_every_module_and_no_other() -> None:
    drawn = drawn_modules(_block_under("## The tree"))
    code = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "__pycache__" not in p.parts}
    inits = {m for m in code if m.endswith("__init__.py")}
    assert not drawn - code, f"docs/design.md names modules that do not exist: {drawn - code}"
    missing = code - inits - drawn
    assert not missing, f"docs/design.md's tree lacks: {sorted(missing)}"


def test_layer_diagram_draws_every_package() -> None:
    diagram = _block_under("## Layers")
    packages = tomllib.loads((ROOT / "docs" / "layers.toml").read_text())["packages"]
    for name in packages:
        assert re.search(rf"(^|\s){re.escape(name)}(/|\.py)", diagram, re.M), name


def test_tree_reader_places_modules_in_their_folders() -> None:
    tree = "src/shardwise/\n  a.py\n  pkg/   b.py\n    sub/\n      c.py d.py\n    e.py\n  f.py\n"
    assert drawn_modules(tree) == {
        "a.py",
        "pkg/b.py",
        "pkg/sub/c.py",
        "pkg/sub/d.py",
        "pkg/e.py",
        "f.py",
    }
