"""Operators on Arrow record batches, registered by name for configs and the Python API.

May import: ``shardwise.errors`` and ``shardwise._optional`` (see ``docs/layers.toml``).
"""

from shardwise.ops.operators import Op, get_op, known_ops, make_op, register_op

__all__ = ["Op", "get_op", "known_ops", "make_op", "register_op"]
