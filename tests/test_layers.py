"""The layering of ``src/shardwise`` holds, read from the source's own imports.

Arrows point down (the table is ``docs/layers.toml``, drawn in ``docs/design.md``): a
package may import only the packages listed for it there, a room inside a package (a
sub-package such as ``storage/cache/``) only what its entry lists, the package's core no
room at all; ``plan/`` imports numpy and the standard library only (and the exception
tree), and no module takes part in an import circle. Imports inside
functions count as much as those at the top of a module: a lazy import is still an arrow.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"
# the one layer table, which docs/design.md draws: top-level packages and each package's rooms
LAYERS = tomllib.loads((SRC.parents[1] / "docs" / "layers.toml").read_text())

# what each top-level package or module of shardwise may import (besides itself)
ALLOWED: dict[str, set[str]] = {k: set(v) for k, v in LAYERS["packages"].items()}
ALLOWED["cli"] = {k for k in ALLOWED if k != "cli"}  # "*": everything but the root
# the rooms (sub-packages, or modules) inside a package: room -> what else it may import
INSIDE: dict[str, dict[str, set[str]]] = {
    pkg: {room: set(targets) for room, targets in rooms.items() if room != "_core"}
    for pkg, rooms in LAYERS.get("inside", {}).items()
}
# the rooms a package's core may import (the "_core" entry; none unless listed): the
# loader's dataset is composed of its rooms, storage's paths never see the cache
CORE: dict[str, set[str]] = {
    pkg: set(rooms.get("_core", [])) for pkg, rooms in LAYERS.get("inside", {}).items()
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
    allowed = ALLOWED
    bad = []
    for module, targets in _graph().items():
        src = _top(module)
        if src == "__init__":
            continue
        assert src in allowed, f"{module}: add its package to docs/layers.toml"
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


def _room(module: str, rooms: dict[str, set[str]]) -> str | None:
    """The room of ``module`` (the longest room name it lies in), None for the core."""
    rel = module.split(".", 2)[2] if module.count(".") >= 2 else ""
    found = [r for r in rooms if rel == r or rel.startswith(r + ".")]
    return max(found, key=len) if found else None


def _room_allows(
    room: str | None, target: str, rooms: dict[str, set[str]], core: frozenset[str] = frozenset()
) -> bool:
    """Whether a module of ``room`` (None: the core) may import ``target`` of the package;
    ``core`` names the rooms the core may import."""
    if target.count(".") < 2:
        return room is not None  # the package's root: its rooms may use it
    dst = _room(target, rooms)
    if room is None:
        return dst is None or dst in core
    rel = target.split(".", 2)[2]
    own = dst is not None and (dst == room or dst.startswith(room + "."))
    listed = any(rel == t or rel.startswith(t + ".") for t in rooms[room])
    return own or listed or (dst is None and rel in rooms[room])


def _bad_room_arrows() -> set[str]:
    bad = set()
    for module, targets in _graph().items():
        rooms = INSIDE.get(_top(module))
        if not rooms or module.count(".") < 2:
            continue
        room = _room(module, rooms)
        core = frozenset(CORE.get(_top(module), set()))
        for target in targets:
            if _top(target) == _top(module) and not _room_allows(room, target, rooms, core):
                bad.add(f"{module} -> {target}")
    return bad


def test_every_room_imports_only_what_its_entry_lists() -> None:
    bad = _bad_room_arrows()
    assert not bad, "imports against a package's rooms:\n" + "\n".join(sorted(bad))


def test_every_room_in_the_table_exists() -> None:
    mods = _modules()
    for pkg, rooms in INSIDE.items():
        for room in rooms:
            assert f"shardwise.{pkg}.{room}" in mods, f"docs/layers.toml: no {pkg}/{room}"


def test_the_room_checker_sees_a_core_module_importing_a_room() -> None:
    rooms = {"cache": {"paths"}, "cache.x": set()}
    assert _room("shardwise.storage.cache.node", rooms) == "cache"
    assert _room("shardwise.storage.cache.x", rooms) == "cache.x"
    assert _room("shardwise.storage.paths", rooms) is None
    assert not _room_allows(None, "shardwise.storage.cache.node", rooms)
    assert _room_allows("cache", "shardwise.storage.paths", rooms)
    assert not _room_allows("cache", "shardwise.storage.retry", rooms)
    assert not _room_allows("cache.x", "shardwise.storage.cache.node", rooms)
    assert _room_allows("cache", "shardwise.storage.cache.x", rooms)


# packages whose docstring does not yet say what they hold and may import (being
# rewritten on another branch); each entry must be real
KNOWN_UNDOCUMENTED: set[str] = set()


def test_every_package_says_what_it_holds_and_may_import() -> None:
    missing = set()
    for module, path in _modules().items():
        if path.name != "__init__.py" or module == "shardwise":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "May import" not in doc:
            missing.add(module)
    assert missing <= KNOWN_UNDOCUMENTED, f"add 'May import: ...' to {missing - KNOWN_UNDOCUMENTED}"
    assert missing >= KNOWN_UNDOCUMENTED, f"stale: {KNOWN_UNDOCUMENTED - missing}"
