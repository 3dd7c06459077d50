"""The node cache: remote files copied once per machine and shared by its processes.

Holds the cache itself (:mod:`.node`), its entries on disk (:mod:`.entry`), the
directory's journal and scan (:mod:`.directory`), what processes fetched (:mod:`.stats`),
the leases that guard an entry being written (:mod:`.lease`) and the ``shardwise cache``
commands' work (:mod:`.admin`).

May import: ``shardwise.errors`` and storage's core (paths, retry, atomic, localfs,
overlay, refusals; see ``docs/layers.toml``). Nothing in ``storage`` outside this package
imports it.
"""

from shardwise.storage.cache.node import CacheStats, NodeCache

__all__ = ["CacheStats", "NodeCache"]
