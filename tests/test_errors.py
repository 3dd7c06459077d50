"""Every error a user can cause is a ShardwiseError: the source raises no bare builtin
exception outside a short list of internal invariants, each with its reason."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"

# (module, exception): internal invariants a user cannot trigger through the public API
INTERNAL = {
    ("loader/workers/receive.py", "RuntimeError"),  # a ring replaced under it: a bug, not input
    # the caller's slot signalled done without a chunk: a bug
    ("parallel/backends/local_caller.py", "RuntimeError"),
    ("pipeline/runner.py", "AssertionError"),  # a dedup decision asked of a stage without a dedup
    ("storage/retry.py", "AssertionError"),  # unreachable end of the retry loop
    ("__init__.py", "AttributeError"),  # module __getattr__: the protocol Python expects
    ("loader/__init__.py", "AttributeError"),  # module __getattr__: the protocol Python expects
    ("loader/dataset.py", "AttributeError"),  # module __getattr__: the protocol Python expects
    (
        "loader/tokens/__init__.py",
        "AttributeError",
    ),  # module __getattr__: the protocol Python expects
    ("pipeline/__init__.py", "AttributeError"),  # module __getattr__: the protocol Python expects
}
BUILTIN_ERRORS = {
    n
    for n in dir(builtins)
    if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)
}


def _raised(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id in BUILTIN_ERRORS:
                out.append((node.lineno, exc.id))
    return out


def test_no_bare_builtin_exceptions_are_raised() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        for line, name in _raised(path):
            if (rel, name) not in INTERNAL:
                found.append(f"{rel}:{line} raise {name}")
    assert not found, "raise a ShardwiseError subclass instead:\n" + "\n".join(found)


def test_the_internal_list_is_not_stale() -> None:
    for rel, name in INTERNAL:
        assert name in {n for _, n in _raised(SRC / rel)}, (rel, name)
