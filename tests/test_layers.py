"""The layering of ``src/shardwise`` holds, read from the source's own imports.

Arrows point down (see the design notes in the README): a package may import only the
packages listed for it below, ``plan/`` imports numpy and the standard library only (and
the exception tree), and no module takes part in an import circle. Imports inside
functions count as much as those at the top of a module: a lazy import is still an arrow.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"

BASE = {"errors", "_optional", "_types"}
# what each top-level package or module of shardwise may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "_optional": {"errors"},
    "_types": {"errors"},
    "plan": {"errors"},
    "storage": BASE,
    "formats": BASE | {"storage"},
    "parallel": BASE,
    "index": BASE | {"storage", "formats", "parallel"},
    "ops": BASE,
    "dedup": BASE | {"ops"},
    "loader": BASE | {"storage", "formats", "parallel", "index", "plan"},
    "pipeline": BASE | {"storage", "formats", "parallel", "index", "ops", "dedup"},
    "prepare": BASE | {"storage", "formats", "parallel", "index", "pipeline"},
    "integrations": BASE | {"storage", "formats", "parallel", "index", "plan", "loader"},
    "report": BASE | {"storage", "formats", "index", "plan", "pipeline", "loader"},
    "cli": set(),  # filled below: everything but the package root
}
THIRD_PARTY_FOR_PLAN = {"numpy"}
# violations being removed by the architecture work; each entry must still be real (a
# test below fails on a stale one), and new ones fail at once
KNOWN_BAD_ARROWS: set[str] = set()
KNOWN_CIRCLES: list[list[str]] = []


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = ["shardwise", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(module: str, path: Path) -> Iterator[str]:
    """Every module name ``module`` imports, top-level or inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            yield prefix
            yield from (f"{prefix}.{alias.name}" for alias in node.names)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: {i for i in _imports(m, p) if i in mods and i != m} for m, p in mods.items()}


def _bad_arrows() -> set[str]:
    allowed = dict(ALLOWED)
    allowed["cli"] = {k for k in ALLOWED if k != "cli"}
    bad = []
    for module, targets in _graph().items():
        src = _top(module)
        if src == "__init__":
            continue
        assert src in allowed, f"{module}: add its package to the layer table in this test"
        for target in targets:
            dst = _top(target)
            if dst != src and dst not in allowed[src]:
                bad.append(f"{module} -> {target}")
    return set(bad)


def test_every_package_imports_only_lower_layers() -> None:
    bad = _bad_arrows()
    assert bad <= KNOWN_BAD_ARROWS, "imports against the layering:\n" + "\n".join(
        sorted(bad - KNOWN_BAD_ARROWS)
    )
    assert bad >= KNOWN_BAD_ARROWS, (
        f"fixed, remove from KNOWN_BAD_ARROWS: {sorted(KNOWN_BAD_ARROWS - bad)}"
    )


def test_plan_imports_numpy_and_the_standard_library_only() -> None:
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = []
    for module, path in _modules().items():
        if _top(module) != "plan":
            continue
        for name in _imports(module, path):
            root = name.split(".")[0]
            if root == "shardwise":
                if _top(name) not in ("plan", "errors"):
                    bad.append(f"{module} -> {name}")
            elif root not in stdlib and root not in THIRD_PARTY_FOR_PLAN:
                bad.append(f"{module} -> {name}")
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circles() -> None:
    # a package's __init__ re-exporting its modules is not a circle by itself, but a
    # module importing its own package's __init__ back closes one
    found = _cycles(_graph())
    new = [c for c in found if c not in KNOWN_CIRCLES]
    assert new == [], f"import circles: {new}"
    assert all(c in found for c in KNOWN_CIRCLES), (
        "a known circle is gone: remove it from KNOWN_CIRCLES"
    )


def test_the_checker_sees_a_circle_and_a_wrong_arrow() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _top("shardwise.plan.epoch") == "plan" and _top("shardwise") == "__init__"


# -- the loader's rooms (shardwise.loader's sub-packages) ------------------------------
# What each sub-package of the loader may import of the loader's other children (its
# sub-packages and its top-level modules); imports inside one room are free. The
# top-level modules (the dataset and the small objects it is made of) may import every
# room. inprocess/ and workers/ are the two paths: they share batches/ and read/, and
# never import each other.
LOADER_SUBPACKAGES: dict[str, set[str]] = {
    "read": {"source", "placement"},
    "batches": {"read"},
    "inprocess": {"batches", "read"},
    "workers": {"batches", "read"},
}


def _loader_child(module: str) -> str | None:
    """The child of ``shardwise.loader`` that ``module`` is or sits in, if any."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "loader" else None


def test_the_loaders_rooms_import_only_the_rooms_below_them() -> None:
    bad = []
    for module, targets in _graph().items():
        room = _loader_child(module)
        if room not in LOADER_SUBPACKAGES:
            continue
        for target in targets:
            dst = _loader_child(target)
            if dst is not None and dst != room and dst not in LOADER_SUBPACKAGES[room]:
                bad.append(f"{module} -> {target}")
    assert not bad, "imports against the loader's rooms:\n" + "\n".join(sorted(bad))
    rooms = {p.name for p in (SRC / "loader").iterdir() if (p / "__init__.py").is_file()}
    assert rooms == set(LOADER_SUBPACKAGES)  # a new room gets its line above
    for room in rooms:
        doc = ast.get_docstring(ast.parse((SRC / "loader" / room / "__init__.py").read_text()))
        assert doc and "May import" in doc, f"loader/{room}/__init__.py: say what it may import"
