"""Modules and functions stay small by design: no module of ``src/shardwise`` over 300 lines,
no function body over 40 (from its first statement after the docstring to its end), and no
comment that turns the formatter off (``# fmt: skip``, ``# fmt: off``, ``# yapf: disable``) to
fold code into fewer lines than ``ruff format`` gives it.

An exception, if one is ever needed, is listed in KNOWN; each entry must still be over a
limit (a test fails on a stale one), and anything new over a limit fails at once.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "shardwise"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 40

# "path relative to src/shardwise" or "path:function" over a limit today: none
KNOWN: set[str] = set()
# the comments ruff format obeys to leave code as written (yapf's is its alias of fmt: off)
FORMATTER_OFF = re.compile(r"#\s*(fmt:\s*(skip|off)|yapf:\s*disable)\b")


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


def _formatter_off(text: str, rel: str) -> list[str]:
    """``rel:line`` of every comment in ``text`` that turns the formatter off (comments
    only: the same words in a string are data)."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [
        f"{rel}:{tok.start[0]}"
        for tok in tokens
        if tok.type == tokenize.COMMENT and FORMATTER_OFF.search(tok.string)
    ]


def test_no_module_turns_the_formatter_off() -> None:
    found = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        for hit in _formatter_off(path.read_text(), path.relative_to(SRC).as_posix())
    ]
    assert not found, "the formatter is turned off at:\n" + "\n".join(found)


def test_the_finder_sees_skip_and_off_in_comments_not_in_strings() -> None:
    text = (
        "x = (1,\n"
        "     2)  # fmt: skip\n"
        "# fmt: off\n"
        "y = [1,2]  # noqa: E231  #fmt:skip\n"
        "# yapf: disable\n"
        "z = '# fmt: skip'  # fmt: on\n"
        "w = 1  # a format: skip is no pragma\n"
    )
    assert _formatter_off(text, "m.py") == ["m.py:2", "m.py:3", "m.py:4", "m.py:5"]
