"""Modules and functions stay small by design: no module of ``src/shardwise`` over 300 lines,
no function body over 40 (from its first statement after the docstring to its end).

An exception, if one is ever needed, is listed in KNOWN; each entry must still be over a
limit (a test fails on a stale one), and anything new over a limit fails at once.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 40

# "path relative to src/shardwise" or "path:function" over a limit today: none
KNOWN: set[str] = set()


def _body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = node.body
    first = body[0]
    if len(body) > 1 and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        first = body[1]  # the docstring is documentation, not body
    return (node.end_lineno or node.lineno) - first.lineno + 1


def _over() -> set[str]:
    out = set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        text = path.read_text()
        if len(text.splitlines()) > MAX_MODULE_LINES:
            out.add(rel)
        for node in ast.walk(ast.parse(text, rel)):
            is_function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_function and _body_lines(node) > MAX_FUNCTION_LINES:
                out.add(f"{rel}:{node.name}")
    return out


def test_no_module_or_function_over_the_limits() -> None:
    over = _over()
    assert over <= KNOWN, "over the size limits:\n" + "\n".join(sorted(over - KNOWN))


def test_every_known_entry_is_still_over_a_limit() -> None:
    assert _over() >= KNOWN, f"no longer over a limit, remove from KNOWN: {KNOWN - _over()}"


def test_the_counter_counts_a_body_from_its_first_statement() -> None:
    fn = ast.parse("def f(\n    a,\n):\n    '''doc'''\n    x = 1\n    return x\n").body[0]
    assert isinstance(fn, ast.FunctionDef) and _body_lines(fn) == 2
