"""The command line's help, rendered from the click commands themselves (``<!-- cli-help -->``
on the CLI page), so the page lists exactly the commands and options the code has."""

from __future__ import annotations

from typing import Any


def _help(command: Any, name: str, parent: Any = None) -> str:
    import click

    ctx = click.Context(
        command, info_name=name, parent=parent, terminal_width=88, max_content_width=88
    )
    return command.get_help(ctx)


def _walk(command: Any, name: str, parent: Any = None, depth: int = 2) -> list[str]:
    import click

    ctx = click.Context(command, info_name=name, parent=parent)
    out = [
        f"{'#' * depth} `{ctx.command_path}`\n",
        f"```text\n{_help(command, name, parent)}\n```\n",
    ]
    if isinstance(command, click.Group):
        for sub in sorted(command.list_commands(ctx)):
            out += _walk(command.get_command(ctx, sub), sub, ctx, depth + 1 if depth < 3 else depth)
    return out


def markdown() -> str:
    from shardwise.cli import cli

    return "\n".join(_walk(cli, "shardwise"))
