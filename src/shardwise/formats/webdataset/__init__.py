"""WebDataset tar shards: the format (:mod:`.format`) and the safe walk over tar members
grouped into samples (:mod:`._tarsafe`).

May import: ``shardwise.formats``' core, ``shardwise.storage`` and ``shardwise.errors``.
"""

from shardwise.formats.webdataset.format import WebDatasetFormat, WebDatasetShardWriter

__all__ = ["WebDatasetFormat", "WebDatasetShardWriter"]
