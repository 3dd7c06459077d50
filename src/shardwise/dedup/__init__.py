"""Near-duplicate detection: vectorised shingles and MinHash signatures, LSH banding,
connected components (in memory or distributed), used by the ``minhash_dedup`` operator.

May import: ``shardwise.errors``, ``shardwise._optional`` and ``shardwise.ops`` (see
``docs/layers.toml``).
"""
