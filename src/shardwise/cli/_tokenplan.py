"""``shardwise plan --seq-len N``: the token plan of token shards (what ``TokenStream``
streams): steps, sequences left out, and per source tokens, sequences, padding and split
documents. Reads the per-document token counts, not the tokens."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

__all__ = ["echo_token_report", "show_token_plan", "token_options", "token_report"]


def token_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """``--seq-len`` and ``--packing`` for ``shardwise plan``."""
    command = click.option(
        "--packing",
        type=click.Choice(["concat", "best_fit", "pad"]),
        default=None,
        help="With --seq-len: how documents become sequences (default: concat).",
    )(command)
    return click.option(
        "--seq-len",
        type=click.IntRange(min=1),
        default=None,
        help="Token shards: plan sequences of this many tokens (TokenStream); --batch-size "
        "counts sequences and --epoch-size tokens.",
    )(command)


def show_token_plan(
    index: Any,
    names: list[str],
    topology: Any,
    seq_len: int,
    packing: str,
    as_json: bool,
    seed: int,
    epoch: int,
    mixing: Any,
    canonical_workers: int | None,
) -> None:
    """Print the token plan's report (JSON or lines)."""
    report = token_report(
        index,
        names,
        topology,
        seq_len=seq_len,
        packing=packing,
        seed=seed,
        epoch=epoch,
        mixing=mixing,
        canonical_workers=canonical_workers,
    )
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        echo_token_report(report)


def token_report(
    index: Any,
    names: list[str],
    topology: Any,
    *,
    seq_len: int,
    packing: str,
    seed: int,
    epoch: int,
    mixing: Any,
    canonical_workers: int | None,
) -> dict[str, Any]:
    """The token plan's report as plain JSON."""
    from shardwise.loader.tokens.units import TokenUnits
    from shardwise.plan.tokens import TokenPlan
    from shardwise.plan.tokenstats import token_stats

    lengths, docs = TokenUnits(index).lengths()
    plan = TokenPlan(
        lengths,
        docs,
        seq_len,
        topology,
        packing=packing,
        seed=seed,
        epoch=epoch,
        mixing=mixing,
        canonical_workers=canonical_workers,
    )
    stats = token_stats(plan)
    names = names or (["all"] if len(stats) == 1 else [f"source {i}" for i in range(len(stats))])
    return {
        "seq_len": seq_len,
        "packing": packing,
        "steps_per_rank": plan.batches_per_rank,
        "sequences_per_rank": plan.batches_per_rank * topology.batch_size,
        "tokens_per_step": topology.world_size * topology.batch_size * seq_len,
        "sequences_left_out": plan.num_left_out,
        "sequences_padded": plan.num_padded,
        "sources": [{"source": n, **s} for n, s in zip(names, stats)],
    }


def echo_token_report(report: dict[str, Any]) -> None:
    """The report as aligned lines."""
    lines = [
        ("sequences", f"{report['seq_len']:,} tokens, packing {report['packing']}"),
        ("steps per rank", f"{report['steps_per_rank']:,} (equal on every rank)"),
        ("tokens per step", f"{report['tokens_per_step']:,} (all ranks)"),
        ("sequences left out", f"{report['sequences_left_out']:,} (the tail)"),
    ]
    if report["sequences_padded"]:
        padded = f"{report['sequences_padded']:,} (repeated, --keep-last)"
        lines.append(("sequences padded", padded))
    for s in report["sources"]:
        lines.append(
            (
                f"source {s['source']}",
                f"{s['documents']:,} documents, {s['tokens']:,} tokens in {s['sequences']:,} "
                f"sequences; padding {s['padding_tokens']:,} ({100 * s['padding_share']:.2f}%), "
                f"split documents {s['split_documents']:,} ({100 * s['split_share']:.2f}%); "
                f"this epoch {s['epoch_sequences']:,} sequences = {s['epoch_tokens']:,} tokens",
            )
        )
    width = max(len(k) for k, _ in lines)
    for key, value in lines:
        click.echo(f"{key:<{width}}  {value}")
