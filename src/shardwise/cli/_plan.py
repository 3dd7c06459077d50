"""``shardwise plan``: the loader plan of a dataset (or of mixed sources) without reading data."""

from __future__ import annotations

import json
from typing import Any

import click

from shardwise.cli._app import check_format, cli
from shardwise.cli._plan_text import echo_summary, summary_lines
from shardwise.cli._tokenplan import show_token_plan, token_options
from shardwise.errors import ConfigError


@cli.command()
@click.argument("paths", nargs=-1)
@click.option(
    "--source",
    "-s",
    "sources",
    multiple=True,
    metavar="PATH[:KEY=VALUE,...]",
    help="Mix sources instead of PATHS (repeat it): PATH, then after ':' weight=W, repeat=R or "
    "choose=N, and name=, format= (e.g. -s data/web:weight=0.7 -s data/code:weight=0.3).",
)
@click.option(
    "--epoch-size",
    type=click.IntRange(min=1),
    default=None,
    help="Samples per epoch split among the sources by their rules (StreamingDataset's "
    "epoch_size=).",
)
@click.option(
    "--batching",
    type=click.Choice(["random", "stratified"]),
    default="random",
    show_default=True,
    help="random: sources mixed across the epoch; stratified: every batch holds each source's "
    "share.",
)
@click.option(
    "--canonical-workers",
    type=click.IntRange(min=1),
    default=None,
    help="Plan on C canonical workers: the same global batches on every topology whose "
    "ranks x workers divide C (StreamingDataset's canonical_workers=).",
)
@click.option(
    "--world-size", "-w", type=click.IntRange(min=1), default=1, show_default=True, help="Ranks."
)
@click.option(
    "--workers",
    "-k",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="DataLoader workers per rank (use 1 for num_workers=0).",
)
@click.option(
    "--batch-size",
    "-b",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Per-rank batch size.",
)
@click.option(
    "--keep-last", is_flag=True, help="Pad instead of dropping the remainder (drop_last=False)."
)
@click.option(
    "--replication",
    "-r",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Ranks per model-parallel group reading identical batches (StreamingDataset's "
    "replication=); must divide --world-size.",
)
@click.option(
    "--interleave",
    type=click.IntRange(min=1),
    default=None,
    help="Units mixed per worker (default: as StreamingDataset picks it from --shuffle-mb).",
)
@click.option(
    "--shuffle-mb",
    type=click.IntRange(min=1),
    default=512,
    show_default=True,
    help="Per-worker memory for mixing units (StreamingDataset's shuffle_bytes).",
)
@click.option(
    "--first-window",
    type=click.Choice(["auto", "heads", "none"]),
    default="auto",
    show_default=True,
    help="StreamingDataset's first_window: head windows where auto gives them, always, or never.",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--epoch", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "--format",
    "fmt",
    default=None,
    callback=check_format,
    help="parquet, jsonl or webdataset (default: by suffix).",
)
@token_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also draw the plan view (steps per rank and worker, reads, memory) into this HTML file.",
)
def plan(
    paths: tuple[str, ...],
    sources: tuple[str, ...],
    epoch_size: int | None,
    batching: str,
    canonical_workers: int | None,
    world_size: int,
    workers: int,
    batch_size: int,
    keep_last: bool,
    replication: int,
    interleave: int | None,
    shuffle_mb: int,
    first_window: str,
    seed: int,
    epoch: int,
    fmt: str | None,
    seq_len: int | None,
    packing: str | None,
    as_json: bool,
    html_out: str | None,
) -> None:
    """Show the loader plan for PATHS (or the mixed --source's) without reading data: steps
    per rank, samples left out or padded, read amplification, peak buffered bytes, and each
    source's exact samples this epoch. With --replication R the plan is cut for world-size /
    R groups (data-parallel ranks) whose R ranks read the same batches."""
    import numpy as np

    from shardwise.cli.source_spec import parse_source
    from shardwise.loader.read.opening import check_not_empty, open_index
    from shardwise.loader.stats import mixing_for
    from shardwise.plan import Topology, auto_interleave
    from shardwise.plan.report import plan_report

    _check_args(paths, sources, world_size, replication, packing is None or seq_len is not None)
    groups = world_size // replication
    try:
        given: list[Any] = [parse_source(s, fmt) for s in sources] or list(paths)
    except ConfigError as exc:  # the option's text: bad usage
        raise click.BadParameter(str(exc), param_hint="'--source'") from exc
    wanted: list[str] | None = None if seq_len else []  # token plans: the token columns
    index = open_index(given, "raise", {"format": fmt} if fmt and paths else {}, wanted)
    check_not_empty(index, index.counts())
    mixing = mixing_for(index, epoch_size, batching)
    unit_bytes = np.array([u.num_bytes for u in index.units])
    interleave = interleave or auto_interleave(unit_bytes, shuffle_mb * 2**20)
    topo = Topology(groups, workers, batch_size, not keep_last, interleave)
    names = [s.name for s in given] if sources else []
    args = (seed, epoch, mixing, canonical_workers)
    if seq_len is not None:  # token shards: the plan of TokenStream's sequences
        return show_token_plan(index, names, topo, seq_len, packing or "concat", as_json, *args)
    blocks = _blocks(first_window, index, topo, mixing)
    p = _sample_plan(index.counts(), topo, *args, blocks=blocks)
    rows = _source_rows(mixing, index.counts(), topo, names, canonical_workers, p)
    report = plan_report(p, unit_bytes)
    report.update(sources=rows, samples_total=index.num_samples, interleave=interleave)
    report.update(first_window=first_window, blocks=blocks)
    report.update(world_size=world_size, replication=replication, groups=groups)
    if html_out:
        _write_plan_view(p, unit_bytes, report, html_out, " ".join(paths or sources))
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        echo_summary(summary_lines(report, index, workers, batch_size, canonical_workers))
        if html_out:
            click.echo(f"plan view: {html_out}")


def _sample_plan(
    counts: Any,
    topo: Any,
    seed: int,
    epoch: int,
    mixing: Any,
    canonical_workers: int | None,
    blocks: int = 1,
) -> Any:
    """The loader plan of a sample dataset (with head windows of ``1/blocks``)."""
    from shardwise.plan import make_plan

    return make_plan(
        counts,
        topo,
        seed=seed,
        epoch=epoch,
        mixing=mixing,
        canonical_workers=canonical_workers,
        blocks=blocks,
    )


def _blocks(first_window: str, index: Any, topo: Any, mixing: Any) -> int:
    """``k`` of the head windows a shuffled ``StreamingDataset`` of ``index`` with this
    ``first_window`` plans (1: whole units), as the loader works it out."""
    from shardwise.loader.parts import mean_unit_bytes, reads_in_parts
    from shardwise.loader.planner import blocks_for
    from shardwise.plan import Topology

    one = Topology(1, 1, topo.batch_size, topo.drop_last, topo.interleave)
    chosen = None if first_window == "none" else first_window
    in_parts = reads_in_parts(index, None)
    counts = index.counts()
    size = mean_unit_bytes(index, counts)
    return blocks_for(chosen, counts, one, mixing, parts=in_parts, shuffle=True, unit_bytes=size)


def _check_args(
    paths: tuple[str, ...],
    sources: tuple[str, ...],
    world_size: int,
    replication: int,
    packing_fits: bool = True,
) -> None:
    """Refuse a replication that does not divide the world size, PATHS with sources (or
    neither), and --packing without --seq-len (``packing_fits`` False)."""
    if world_size % replication:
        raise click.BadParameter(
            f"{replication} does not divide --world-size {world_size}", param_hint="--replication"
        )
    if paths and sources:
        raise click.UsageError("give PATHS or --source options, not both")
    if not paths and not sources:
        raise click.UsageError("give PATHS or --source options (one or more)")
    if not packing_fits:
        raise click.UsageError("--packing plans token sequences: give --seq-len too")


def _source_rows(
    mixing: Any,
    counts: Any,
    topo: Any,
    names: list[str],
    canonical_workers: int | None,
    plan: Any = None,
) -> list[dict[str, Any]]:
    """The mixed sources' rows of the report (none without mixing); with a stratified
    ``plan``, its realised counts and how far its batches are from each share."""
    if not mixing:
        return []
    from shardwise.report import source_rows

    return source_rows(
        mixing, counts, topo, names=names, canonical_workers=canonical_workers, plan=plan
    )


def _write_plan_view(p: Any, unit_bytes: Any, report: dict[str, Any], out: str, what: str) -> None:
    from shardwise.report import plan_view, render_plan

    view = plan_view(
        p,
        unit_bytes,
        samples_total=report["samples_total"],
        replication=report["replication"],
        sources=report["sources"],
    )
    html = render_plan(view, title=f"shardwise plan view: {what}")
    with open(out, "w", encoding="utf-8") as f:
        f.write(html)
