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
@click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise", show_default=True,
              help="A bad sample found while indexing (WebDataset): refuse the shard, or leave it "
                   "out of the counts.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def inspect(paths: tuple[str, ...], fmt: str | None, refresh: bool, on_error: str, as_json: bool) -> None:
    """Index PATHS (files, directories, globs or URLs) and print a summary."""
    from shardwise.formats import check_on_error
    from shardwise.index import open_dataset

    index = open_dataset(list(paths), format=fmt, refresh=refresh, on_error=check_on_error(on_error))
    summary = index.summary()
    summary["index_location"] = index.location
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    _print_summary(summary)


@cli.command()
@click.argument("paths", nargs=-1)
@click.option("--source", "-s", "sources", multiple=True, metavar="PATH[:KEY=VALUE,...]",
              help="Mix sources instead of PATHS (repeat it): PATH, then after ':' weight=W, repeat=R or "
                   "choose=N, and name=, format= (e.g. -s data/web:weight=0.7 -s data/code:weight=0.3).")
@click.option("--epoch-size", type=click.IntRange(min=1), default=None,
              help="Samples per epoch split among the sources by their rules (StreamingDataset's epoch_size=).")
@click.option("--batching", type=click.Choice(["random", "stratified"]), default="random", show_default=True,
              help="random: sources mixed across the epoch; stratified: every batch holds each source's share.")
@click.option("--canonical-workers", type=click.IntRange(min=1), default=None,
              help="Plan on C canonical workers: the same global batches on every topology whose "
                   "ranks x workers divide C (StreamingDataset's canonical_workers=).")
@click.option("--world-size", "-w", type=click.IntRange(min=1), default=1, show_default=True, help="Ranks.")
@click.option("--workers", "-k", type=click.IntRange(min=1), default=1, show_default=True,
              help="DataLoader workers per rank (use 1 for num_workers=0).")
@click.option("--batch-size", "-b", type=click.IntRange(min=1), default=1, show_default=True, help="Per-rank batch size.")
@click.option("--keep-last", is_flag=True, help="Pad instead of dropping the remainder (drop_last=False).")
@click.option("--replication", "-r", type=click.IntRange(min=1), default=1, show_default=True,
              help="Ranks per model-parallel group reading identical batches (StreamingDataset's "
                   "replication=); must divide --world-size.")
@click.option("--interleave", type=click.IntRange(min=1), default=None,
              help="Units mixed per worker (default: as StreamingDataset picks it from --shuffle-mb).")
@click.option("--shuffle-mb", type=click.IntRange(min=1), default=512, show_default=True,
              help="Per-worker memory for mixing units (StreamingDataset's shuffle_bytes).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--epoch", type=int, default=0, show_default=True)
@click.option("--format", "fmt", default=None, help="parquet, jsonl or webdataset (default: by suffix).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None,
              help="Also draw the plan view (steps per rank and worker, reads, memory) into this HTML file.")
def plan(paths: tuple[str, ...], sources: tuple[str, ...], epoch_size: int | None, batching: str,
         canonical_workers: int | None, world_size: int, workers: int, batch_size: int, keep_last: bool,
         replication: int, interleave: int | None, shuffle_mb: int, seed: int, epoch: int, fmt: str | None,
         as_json: bool, html_out: str | None) -> None:
    """Show the loader plan for PATHS (or the mixed --source's) without reading data: steps
    per rank, samples left out or padded, read amplification, peak buffered bytes, and each
    source's exact samples this epoch. With --replication R the plan is cut for world-size /
    R groups (data-parallel ranks) whose R ranks read the same batches."""
    import numpy as np

    from shardwise.loader.sources import open_source
    from shardwise.loader.spec import parse_source
    from shardwise.loader.stats import mixing_for
    from shardwise.plan import Topology, auto_interleave, make_plan
    from shardwise.plan.report import plan_report
    from shardwise.report import source_rows

    if world_size % replication:
        raise click.BadParameter(f"{replication} does not divide --world-size {world_size}", param_hint="--replication")
    if bool(paths) == bool(sources):
        raise click.UsageError("give PATHS or --source options (one or more), not both")
    groups = world_size // replication
    given: list[Any] = [parse_source(s, fmt) for s in sources] or list(paths)
    index = open_source(given, "raise", {"format": fmt} if fmt and paths else {}, [])
    mixing = mixing_for(index, epoch_size, batching)
    unit_bytes = np.array([u.num_bytes for u in index.units])
    interleave = interleave or auto_interleave(unit_bytes, shuffle_mb * 2**20)
    topo = Topology(groups, workers, batch_size, not keep_last, interleave)
    p = make_plan(index.counts(), topo, seed=seed, epoch=epoch, mixing=mixing, canonical_workers=canonical_workers)
    names = [s.name for s in given] if sources else []
    rows = source_rows(mixing, index.counts(), topo, names=names, canonical_workers=canonical_workers) if mixing else []
    report = plan_report(p, unit_bytes)
    report["sources"] = rows
    report["samples_total"] = index.num_samples
    report["interleave"] = interleave
    report.update(world_size=world_size, replication=replication, groups=groups)
    if html_out:
        _write_plan_view(p, unit_bytes, index.num_samples, html_out, " ".join(paths or sources), replication, rows)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    ranks = f"{world_size} ranks" if replication == 1 else (
        f"{world_size} ranks in {groups} groups of {replication} (data-parallel ranks; "
        "a group's ranks read the same batches)")
    lines = [
        ("samples", f"{index.num_samples:,} in {index.num_units:,} units"),
        ("topology", f"{ranks} x {workers} workers, batch {batch_size}, interleave {interleave}"),
        ("steps per rank", f"{report['steps_per_rank']:,} (equal on every rank)"),
        ("samples per rank", f"{report['samples_per_rank']:,}"
                             + (f" (per group: {groups} groups share the epoch)" if replication > 1 else "")),
        ("left out", f"{report['samples_left_out']:,}"),
        ("padded", f"{report['samples_padded']:,}"),
        ("read amplification", f"{report['read_amplification']:.3f}x (bytes read by all workers / "
                               "bytes of the units used; 1.000x = each unit read once)"
                               + (f", per group: each of a group's {replication} ranks reads the "
                                  "same units" if replication > 1 else "")),
        ("peak buffered", _human_bytes(report["peak_buffered_bytes"]) + " per worker (on-storage size)"),
    ]
    lines += [(f"source {r['source']}", f"{r['samples this epoch']:,} samples this epoch ({r['share']}; "
                                        f"{r['rule']}; {r['samples stored']:,} stored)") for r in rows]
    if canonical_workers:
        lines.append(("canonical workers", f"{canonical_workers} (the same global batches on every topology "
                                           "whose ranks x workers divide it)"))
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key:<{width}}  {value}")
    if html_out:
        click.echo(f"plan view: {html_out}")


def _write_plan_view(p: Any, unit_bytes: Any, samples: int, out: str, what: str, replication: int = 1,
                     sources: Any = ()) -> None:
    from shardwise.report import plan_view, render_plan

    view = plan_view(p, unit_bytes, samples_total=samples, replication=replication, sources=sources)
    html = render_plan(view, title=f"shardwise plan view: {what}")
    with open(out, "w", encoding="utf-8") as f:
        f.write(html)


@cli.command()
@click.argument("run_dir")
@click.option("--format", "fmt", type=click.Choice(["html", "json"]), default="html", show_default=True,
              help="html: write _report.html; json: print the report's numbers.")
@click.option("--out", "-o", default=None, help="Where to write the HTML (default: RUN_DIR/_report.html).")
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
@click.option("--out", "-o", required=True, help="Output directory (raw/ downloads, data/ Parquet shards).")
@click.option("--steps", default="download,convert,index", show_default=True,
              help="Comma-separated steps to run.")
@click.option("--backend", default=None, help="Parallel backend for the steps (local, thread, ray, dask, spark, joblib).")
@click.option("--format", "fmt", default=None, help="Input format (default: by suffix).")
@click.option("--shard-mb", type=click.FloatRange(min=0.001), default=128.0, show_default=True,
              help="Target Parquet shard size in MB.")
@click.option("--checksum", multiple=True, metavar="URL=ALGO:HEX", help="Verify a download (repeatable).")
@click.option("--skip-bad-records", is_flag=True, help="Quarantine and count bad records instead of failing.")
def prepare(sources: tuple[str, ...], out: str, steps: str, backend: str | None, fmt: str | None,
            shard_mb: float, checksum: tuple[str, ...], skip_bad_records: bool) -> None:
    """Download SOURCES (URLs, paths, globs) in parallel, resuming partial downloads, and
    convert them to indexed Parquet shards in OUT/data."""
    from shardwise.errors import ConfigError
    from shardwise.prepare import prepare as run_prepare

    sums = {}
    for item in checksum:
        url, sep, value = item.rpartition("=")
        if not sep:
            raise ConfigError(f"--checksum must be URL=ALGO:HEX, got {item!r}")
        sums[url] = value
    result = run_prepare(list(sources), out, steps=[s.strip() for s in steps.split(",") if s.strip()],
                         backend=backend, format=fmt, target_shard_bytes=int(shard_mb * 2**20),
                         checksums=sums, on_error="skip" if skip_bad_records else "raise")
    click.echo(f"downloaded {len(result.downloaded)} files ({_human_bytes(result.resumed_bytes)} resumed)")
    click.echo(f"{len(result.shards)} Parquet shards, {result.num_rows:,} rows; index: {result.index_location or '-'}")


@cli.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--backend", default=None, help="Override executor.backend (local, thread, ray, spark, dask, joblib).")
@click.option("--num-proc", type=int, default=None, help="Override executor.num_proc (-1: all cores/slots).")
@click.option("--accounting", type=click.Path(dir_okay=False), default=None,
              help="Also save the accounting as JSON here (it is always in OUT/_manifest.json).")
def run(config: str, backend: str | None, num_proc: int | None, accounting: str | None) -> None:
    """Run the pipeline described by the YAML file CONFIG and print its accounting."""
    from shardwise.pipeline.config import pipeline_from_config

    with open(config, encoding="utf-8") as f:
        pipeline, executor = pipeline_from_config(f.read(), config)
    result = pipeline.run(backend or executor.get("backend"), num_proc=num_proc or executor.get("num_proc"))
    click.echo(result.table())
    if result.skipped_tasks:
        click.echo(f"({result.skipped_tasks} of {result.tasks} tasks were already committed and skipped)")
    click.echo(f"manifest: {result.manifest}")
    click.echo(f"report: {result.manifest.rsplit('/', 1)[0]}/_report.html")
    if accounting:
        with open(accounting, "w", encoding="utf-8") as f:
            json.dump({"rows_in": result.rows_in, "rows_out": result.rows_out, "dropped": result.dropped,
                       "quarantined": result.quarantined, "files": result.files}, f, indent=1)


@cli.command()
@click.argument("source", nargs=-1, required=True)
@click.option("--out", "-o", required=True, help="Output directory.")
@click.option("--target-mb", type=click.FloatRange(min=0.001), default=128.0, show_default=True,
              help="Target file size in MB.")
@click.option("--format", "fmt", default=None, help="Input format (default: by suffix).")
@click.option("--backend", default=None, help="Parallel backend.")
@click.option("--on-error", type=click.Choice(["raise", "skip"]), default="raise", show_default=True,
              help="skip: quarantine and count bad records instead of failing.")
def resplit(source: tuple[str, ...], out: str, target_mb: float, fmt: str | None, backend: str | None,
            on_error: str) -> None:
    """Rewrite SOURCE as balanced Parquet files of about --target-mb (at least 2 per core).
    OUT appears whole or not at all."""
    from shardwise.pipeline.api import resplit as run_resplit

    result = run_resplit(list(source), out, target_file_bytes=int(target_mb * 2**20), format=fmt,
                         backend=backend, on_error="skip" if on_error == "skip" else "raise")
    sizes = [f["bytes"] for f in result.files] or [0]
    click.echo(f"{len(result.files)} files, {result.rows_out:,} rows, "
               f"{_human_bytes(min(sizes))} to {_human_bytes(max(sizes))} each; manifest: {result.manifest}")
    if result.quarantined:
        click.echo(f"quarantined {result.quarantined:,} bad records (examples in the manifest)")


@cli.group()
def cache() -> None:
    """Check or empty a node-local unit cache (the cache_dir given to StreamingDataset)."""


@cache.command("verify")
@click.argument("directory")
@click.option("--keep", is_flag=True, help="Only report bad entries; do not delete them.")
def cache_verify(directory: str, keep: bool) -> None:
    """Check every entry of DIRECTORY (record, length, checksum); delete bad ones. Exits 1
    when a bad entry was found."""
    from shardwise.storage.cache_admin import verify_cache

    report = verify_cache(directory, remove=not keep)
    for path, reason in report.bad:
        click.echo(f"bad: {path}: {reason}")
    click.echo(f"{report.checked} entries checked, {len(report.bad)} bad, {report.removed} removed, "
               f"{report.stale} leftovers of dead processes removed")
    if report.bad:
        raise click.exceptions.Exit(EXIT_ERROR)


@cache.command("clear")
@click.argument("directory")
@click.option("--all", "everything", is_flag=True,
              help="Also remove entries a running process leases (it keeps what it already read).")
def cache_clear(directory: str, everything: bool) -> None:
    """Remove the entries of DIRECTORY that no running process reads."""
    from shardwise.storage.cache_admin import clear_cache

    report = clear_cache(directory, all=everything)
    click.echo(f"removed {report.removed} entries ({_human_bytes(report.removed_bytes)}); "
               f"kept {report.kept_leased} in use")


def _print_summary(s: dict[str, Any]) -> None:
    rows = [
        ("format", s["format"]),
        ("files", f"{s['files']:,}"),
        ("units", f"{s['units']:,}"),
        ("samples", f"{s['samples']:,}"),
        *([("skipped", f"{s['skipped']:,} bad samples left out (--on-error skip)")] if s.get("skipped") else []),
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
        code = cli.main(args=argv, prog_name="shardwise", standalone_mode=False)
        if isinstance(code, int) and not isinstance(code, bool) and code:  # a command's own exit code
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
        click.echo(f"error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)", err=True)
        return EXIT_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
