"""Framework adapters on top of the loader: what a framework's own data loading needs.

``shardwise.integrations.dali``: one rank's NVIDIA DALI parallel external sources, one
per DALI Python worker, each over its own (rank, worker) shards (extra ``dali``).
Nothing here is imported by ``import shardwise``; import the submodule you use.

May import: ``shardwise.errors``, ``shardwise._optional``, ``shardwise.storage``,
``shardwise.formats``, ``shardwise.parallel``, ``shardwise.index``, ``shardwise.plan``
and ``shardwise.loader`` (see ``docs/layers.toml``).
"""

from __future__ import annotations

__all__: list[str] = []
