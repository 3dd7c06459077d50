"""A dataset's mixing and what an epoch takes from each source (``ds.stats()``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.index import DatasetIndex
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.window_layout import with_blocks
from shardwise.plan import Mixing, Plan, Rule, Topology, batch_shares, source_counts
from shardwise.plan.deal import DEAL_VERSION
from shardwise.plan.strata import strata_layout

__all__ = ["epoch_stats", "mixing_for", "mixing_key"]


def mixing_for(
    index: DatasetIndex | MixedIndex, epoch_size: int | None, batching: str
) -> Mixing | None:
    """The dataset's :class:`~shardwise.plan.Mixing`: its sources' rules, or one source
    when only ``epoch_size`` or ``batching`` is given; None (today's plain plan) otherwise."""
    if epoch_size is not None and (
        isinstance(epoch_size, bool) or not isinstance(epoch_size, (int, np.integer))
    ):
        raise ConfigError(f"epoch_size must be a whole number of samples, got {epoch_size!r}")
    if isinstance(index, MixedIndex):
        return index.mixing(epoch_size, batching)
    if epoch_size is None and batching == "random":
        return None
    return Mixing((0, index.num_units), (Rule(),), epoch_size, batching)


def _layout(mixing: Mixing | None, canonical_workers: int | None) -> int:
    if mixing is None:
        return 1
    return DEAL_VERSION if mixing.batching == "random" else strata_layout(canonical_workers)


def mixing_key(
    index: DatasetIndex | MixedIndex,
    mixing: Mixing | None,
    canonical_workers: int | None,
    blocks: int = 1,
) -> dict[str, Any] | None:
    """What a saved state must agree on besides the counts: the sources and their rules,
    and the ``layout`` of the plan (random mixed plans: how sources are dealt to workers,
    :data:`~shardwise.plan.deal.DEAL_VERSION`; stratified plans: how batches carry their
    rounding, :func:`~shardwise.plan.strata.strata_layout`; 1 otherwise, and in states
    saved before there was one); with head windows (``blocks`` > 1) their ``k`` and
    layout (:func:`~shardwise.loader.window_layout.with_blocks`). None without mixing,
    canonical workers or head windows: the state is today's."""
    if mixing is None and canonical_workers is None:
        return with_blocks(None, blocks)
    names = [s.name for s in index.sources] if isinstance(index, MixedIndex) else []
    key = {
        "sources": names,
        "bounds": list(mixing.bounds) if mixing else [],
        "rules": [[r.weight, r.repeat, r.choose] for r in mixing.rules] if mixing else [],
        "epoch_size": mixing.epoch_size if mixing else None,
        "batching": mixing.batching if mixing else "random",
        "canonical_workers": canonical_workers,
        "layout": _layout(mixing, canonical_workers),
    }
    return with_blocks(key, blocks)


def epoch_stats(
    index: DatasetIndex | MixedIndex,
    mixing: Mixing | None,
    counts: np.ndarray,
    plan: Plan,
    start: Topology,
    canonical_workers: int | None,
) -> dict[str, Any]:
    """``ds.stats()``: the epoch's steps and samples, and per source its rule, its stored
    samples and the exact samples the epoch (started on ``start``) takes from it."""
    whole = mixing or Mixing((0, len(counts)), (Rule(),))
    taken = source_counts(whole, counts, start, canonical_workers)
    sizes = whole.sizes(counts).tolist()
    quotas = whole.quotas(counts).tolist()
    sources = index.sources if isinstance(index, MixedIndex) else []
    total = max(sum(taken), 1)
    per_source = []
    shares = batch_shares(plan)
    for s, rule in enumerate(whole.rules):
        per_source.append(
            {
                "source": sources[s].name if sources else _name(index),
                "weight": rule.weight,
                "repeat": rule.repeat,
                "choose": rule.choose,
                "samples_stored": int(sizes[s]),
                "quota": int(quotas[s]),
                "samples": int(taken[s]),
                "share": taken[s] / total,
                **_shares_of(shares, s),
            }
        )
    return {
        "steps_per_rank": plan.batches_per_rank,
        "samples_per_rank": plan.samples_per_rank,
        "samples_left_out": plan.num_left_out,
        "samples_padded": plan.num_padded,
        "epoch_size": whole.epoch_size,
        "batching": whole.batching,
        "canonical_workers": canonical_workers,
        "per_source": per_source,
    }


def _shares_of(shares: dict[str, list[float]] | None, source: int) -> dict[str, float]:
    """A stratified epoch's distance of batches from a source's share (worst and mean
    ``|count - share|`` over global batches and ranks' batches, from this plan's start)."""
    if shares is None:
        return {}
    return {
        f"batch_share_{k}": float(shares[k][source])
        for k in ("global_worst", "global_mean", "rank_worst", "rank_mean")
    }


def _name(index: DatasetIndex | MixedIndex) -> str:
    files = index.files
    return (
        files[0].path + (f" (+{len(files) - 1} files)" if len(files) > 1 else "")
        if files
        else "dataset"
    )
