"""Operators on Arrow record batches, registered by name for configs and the Python API."""

from shardwise.ops.base import Op, get_op, known_ops, make_op, register_op

__all__ = ["Op", "get_op", "known_ops", "make_op", "register_op"]
