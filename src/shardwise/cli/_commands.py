"""The processing commands: ``prepare``, ``run`` and ``resplit``, and ``report`` (a run's
report rebuilt from its manifests)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from shardwise.cli._app import check_backend, check_num_proc, cli, format_option, human_bytes

if TYPE_CHECKING:
    from shardwise.pipeline import RunResult


@cli.command()
@click.argument("run_dir")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "json"]),
    default="html",
    show_default=True,
    help="html: write _report.html; json: print the report's numbers.",
)
@click.option(
    "--out", "-o", default=None, help="Where to write the HTML (default: RUN_DIR/_report.html)."
)
def report(run_dir: str, fmt: str, out: str | None) -> None:
    """Rebuild the report of the run published in RUN_DIR from its manifests."""
    from shardwise.report import load_run, render_run, write_run_report

    if fmt == "json":
        click.echo(json.dumps(load_run(run_dir).to_json(), indent=1, sort_keys=True))
        return
    if out is None:
        click.echo(f"report: {write_run_report(run_dir)}")
        return
    with open(out, "w", encoding="utf-8") as f:
        f.write(render_run(load_run(run_dir)))
    click.echo(f"report: {out}")


@cli.command()
@click.argument("sources", nargs=-1, required=True)
@click.option(
    "--out", "-o", required=True, help="Output directory (raw/ downloads, data/ Parquet shards)."
)
@click.option(
    "--steps",
    default="download,convert,index",
    show_default=True,
    help="Comma-separated steps to run.",
)
@click.option(
    "--backend",
    default=None,
    callback=check_backend,
    help="Parallel backend for the steps (local, thread, ray, dask, spark, joblib).",
)
@format_option
@click.option(
    "--shard-mb",
    type=click.FloatRange(min=0.001),
    default=128.0,
    show_default=True,
    help="Target Parquet shard size in MB.",
)
@click.option(
    "--checksum", multiple=True, metavar="URL=ALGO:HEX", help="Verify a download (repeatable)."
)
@click.option(
    "--skip-bad-records", is_flag=True, help="Quarantine and count bad records instead of failing."
)
def prepare(
    sources: tuple[str, ...],
    out: str,
    steps: str,
    backend: str | None,
    fmt: str | None,
    shard_mb: float,
    checksum: tuple[str, ...],
    skip_bad_records: bool,
) -> None:
    """Download SOURCES (URLs, paths, globs) in parallel, resuming partial downloads, and
    convert them to indexed Parquet shards in OUT/data."""
    from shardwise.errors import ConfigError
    from shardwise.preparing import prepare as run_prepare

    sums = {}
    for item in checksum:
        url, sep, value = item.rpartition("=")
        if not sep:
            raise ConfigError(f"--checksum must be URL=ALGO:HEX, got {item!r}")
        sums[url] = value
    result = run_prepare(
        list(sources),
        out,
        steps=[s.strip() for s in steps.split(",") if s.strip()],
        backend=backend,
        format=fmt,
        target_shard_bytes=int(shard_mb * 2**20),
        checksums=sums,
        on_error="skip" if skip_bad_records else "raise",
    )
    click.echo(
        f"downloaded {len(result.downloaded)} files ({human_bytes(result.resumed_bytes)} resumed)"
    )
    click.echo(
        f"{len(result.shards)} Parquet shards, {result.num_rows:,} rows; index: "
        f"{result.index_location or '-'}"
    )


@cli.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--backend",
    default=None,
    callback=check_backend,
    help="Override executor.backend (local, thread, ray, spark, dask, joblib).",
)
@click.option(
    "--num-proc",
    type=int,
    default=None,
    callback=check_num_proc,
    help="Override executor.num_proc (-1: all cores/slots).",
)
@click.option(
    "--accounting",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also save the accounting as JSON here (it is always in OUT/_manifest.json).",
)
def run(config: str, backend: str | None, num_proc: int | None, accounting: str | None) -> None:
    """Run the pipeline described by the YAML file CONFIG and print its accounting."""
    from shardwise.pipeline.config import pipeline_from_config

    with open(config, encoding="utf-8") as f:
        pipeline, executor = pipeline_from_config(f.read(), config)
    result = pipeline.run(
        backend or executor.get("backend"),
        num_proc=num_proc if num_proc is not None else executor.get("num_proc"),
    )
    click.echo(result.table())
    if result.skipped_tasks:
        click.echo(_skipped_text(result.skipped_tasks, result.tasks, result.stages))
    click.echo(f"manifest: {result.manifest}")
    click.echo(f"report: {result.manifest.rsplit('/', 1)[0]}/_report.html")
    if accounting:
        with open(accounting, "w", encoding="utf-8") as f:
            json.dump(_accounting(result), f, indent=1)


@cli.command()
@click.argument("source", nargs=-1, required=True)
@click.option("--out", "-o", required=True, help="Output directory.")
@click.option(
    "--target-mb",
    type=click.FloatRange(min=0.001),
    default=128.0,
    show_default=True,
    help="Target file size in MB.",
)
@format_option
@click.option("--backend", default=None, callback=check_backend, help="Parallel backend.")
@click.option(
    "--on-error",
    type=click.Choice(["raise", "skip"]),
    default="raise",
    show_default=True,
    help="skip: quarantine and count bad records instead of failing.",
)
def resplit(
    source: tuple[str, ...],
    out: str,
    target_mb: float,
    fmt: str | None,
    backend: str | None,
    on_error: str,
) -> None:
    """Rewrite SOURCE as balanced Parquet files of about --target-mb (at least 2 per core).
    OUT appears whole or not at all."""
    from shardwise.pipeline.api import resplit as run_resplit

    result = run_resplit(
        list(source),
        out,
        target_file_bytes=int(target_mb * 2**20),
        format=fmt,
        backend=backend,
        on_error="skip" if on_error == "skip" else "raise",
    )
    sizes = [f["bytes"] for f in result.files] or [0]
    click.echo(
        f"{len(result.files)} files, {result.rows_out:,} rows, "
        f"{human_bytes(min(sizes))} to {human_bytes(max(sizes))} each; manifest: {result.manifest}"
    )
    if result.quarantined:
        click.echo(f"quarantined {result.quarantined:,} bad records (examples in the manifest)")


def _accounting(result: RunResult) -> dict[str, Any]:
    """What ``run --accounting`` saves: the run's totals and files, and its token counts
    when it made tokens."""
    out: dict[str, Any] = {
        "rows_in": result.rows_in,
        "rows_out": result.rows_out,
        "dropped": result.dropped,
        "quarantined": result.quarantined,
        "files": result.files,
    }
    if result.tokens_in or result.tokens_out:
        out.update(tokens_in=result.tokens_in, tokens_out=result.tokens_out)
    return out


def _skipped_text(skipped: int, tasks: int, stages: int) -> str:
    if stages == 1:
        return f"({skipped} of {tasks} tasks were already committed and skipped)"
    return (
        f"({skipped} of {tasks * stages} task runs, {tasks} tasks in each of {stages} stages, "
        "were already committed and skipped)"
    )
