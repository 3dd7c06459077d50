"""The ``inspect`` command: index a dataset's files and print what they hold (format,
files, units, samples, bytes, columns, the smallest and largest unit)."""

from __future__ import annotations

import json
from typing import Any

import click

from shardwise.cli._app import check_format, cli, human_bytes


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    default=None,
    callback=check_format,
    help="parquet, jsonl or webdataset (default: by suffix).",
)
@click.option("--refresh", is_flag=True, help="Ignore a saved index and re-read every file.")
@click.option(
    "--on-error",
    type=click.Choice(["raise", "skip"]),
    default="raise",
    show_default=True,
    help="A bad sample found while indexing (WebDataset): refuse the shard, or leave it "
    "out of the counts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def inspect(
    paths: tuple[str, ...], fmt: str | None, refresh: bool, on_error: str, as_json: bool
) -> None:
    """Index PATHS (files, directories, globs or URLs) and print a summary."""
    from shardwise.formats import check_on_error
    from shardwise.index import index_dataset

    index = index_dataset(
        list(paths), format=fmt, refresh=refresh, on_error=check_on_error(on_error)
    )
    summary = index.summary()
    summary["index_location"] = index.location
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    _print_summary(summary)


def _print_summary(s: dict[str, Any]) -> None:
    """The summary as aligned ``key  value`` lines."""
    rows = [
        ("format", s["format"]),
        ("files", f"{s['files']:,}"),
        ("units", f"{s['units']:,}"),
        ("samples", f"{s['samples']:,}"),
    ]
    if s.get("skipped"):
        rows.append(("skipped", f"{s['skipped']:,} bad samples left out (--on-error skip)"))
    rows.append(("bytes", f"{s['bytes']:,} ({human_bytes(s['bytes'])})"))
    rows.append(("columns", ", ".join(s["columns"])))
    if "smallest_unit" in s:
        for key in ("smallest_unit", "largest_unit"):
            u = s[key]
            rows.append(
                (
                    key.replace("_", " "),
                    f"{u['samples']:,} samples, {human_bytes(u['bytes'])} ({u['path']} "
                    f"#{u['unit']})",
                )
            )
        rows.append(("mean samples/unit", f"{s['mean_samples_per_unit']:,.1f}"))
    rows.append(("index", s.get("index_location") or "(not saved)"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
