"""The ``shardwise`` command group, its entry point and the shared helpers.

Conventions: ``--help`` on every command; errors go to stderr as one line
(``error: ...``) without a traceback unless ``--debug``; exit codes are 0 for
success, 1 for a shardwise error (bad input, storage, config), 2 for bad usage,
and 130 when interrupted.
"""

from __future__ import annotations

import sys
import traceback

import click

from shardwise.errors import ShardwiseError

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def check_backend(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--backend`` option's value: a known backend (else bad usage, exit 2)."""
    from shardwise.parallel._registry import known_backends

    if value is not None and value not in known_backends():
        raise click.BadParameter(f"{value!r} is not one of {', '.join(known_backends())}")
    return value


def check_format(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--format`` option's value: a known format (else bad usage, exit 2)."""
    from shardwise.formats import known_formats

    if value is not None and value not in known_formats():
        raise click.BadParameter(f"{value!r} is not one of {', '.join(known_formats())}")
    return value


#: ``--format`` of the commands that read an input of any format
format_option = click.option(
    "--format",
    "fmt",
    default=None,
    callback=check_format,
    help="Input format (default: by suffix).",
)


def check_num_proc(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """A ``--num-proc`` option's value: -1 or at least 1 (else bad usage, exit 2)."""
    if value is not None and value != -1 and value < 1:
        raise click.BadParameter(f"must be -1 (every core or slot) or at least 1, got {value}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="shardwise")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """shardwise: process large datasets on any backend; stream exact shards to training."""
    ctx.obj = {"debug": debug}


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (used by the console script)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        code = cli.main(args=argv, prog_name="shardwise", standalone_mode=False)
        if (
            isinstance(code, int) and not isinstance(code, bool) and code
        ):  # a command's own exit code
            return code
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except ShardwiseError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        return EXIT_ERROR
    except Exception as exc:  # noqa: BLE001 - last-resort handler for a CLI
        if debug:
            traceback.print_exc()
        click.echo(
            f"error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True
        )
        return EXIT_ERROR
    return 0
