"""JSON Lines: the format (:mod:`.format`), line-aligned reading of byte ranges and
compressed files (:mod:`._lines`), records parsed and checked (:mod:`._records`) and the
rules for nesting depth and mixed-type fields (:mod:`._rules`).

May import: ``shardwise.formats``' core, ``shardwise.storage`` and ``shardwise.errors``.
"""

from shardwise.formats.jsonl.format import JsonlFormat, JsonlShardWriter

__all__ = ["JsonlFormat", "JsonlShardWriter"]
