"""The ``shardwise`` command line.

Conventions: ``--help`` on every command; errors go to stderr as one line
(``error: ...``) without a traceback unless ``--debug``; exit codes are 0 for
success, 1 for a shardwise error (bad input, storage, config), 2 for bad usage,
and 130 when interrupted.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import click

from shardwise.errors import ShardwiseError

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130


def _human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.version_option(package_name="shardwise")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """shardwise: process large datasets on any backend; stream exact shards to training."""
    ctx.obj = {"debug": debug}


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", default=None, help="parquet, jsonl or webdataset (default: by suffix).")
@click.option("--refresh", is_flag=True, help="Ignore a saved index and re-read every file.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def inspect(paths: tuple[str, ...], fmt: str | None, refresh: bool, as_json: bool) -> None:
    """Index PATHS (files, directories, globs or URLs) and print a summary."""
    from shardwise.index import open_dataset

    index = open_dataset(list(paths), format=fmt, refresh=refresh)
    summary = index.summary()
    summary["index_location"] = index.location
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    _print_summary(summary)


def _print_summary(s: dict[str, Any]) -> None:
    rows = [
        ("format", s["format"]),
        ("files", f"{s['files']:,}"),
        ("units", f"{s['units']:,}"),
        ("samples", f"{s['samples']:,}"),
        ("bytes", f"{s['bytes']:,} ({_human_bytes(s['bytes'])})"),
        ("columns", ", ".join(s["columns"])),
    ]
    if "smallest_unit" in s:
        for key in ("smallest_unit", "largest_unit"):
            u = s[key]
            rows.append((key.replace("_", " "), f"{u['samples']:,} samples, {_human_bytes(u['bytes'])} ({u['path']} #{u['unit']})"))
        rows.append(("mean samples/unit", f"{s['mean_samples_per_unit']:,.1f}"))
    rows.append(("index", s.get("index_location") or "(not saved)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (used by the console script)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        cli.main(args=argv, prog_name="shardwise", standalone_mode=False)
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
        click.echo(f"error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
