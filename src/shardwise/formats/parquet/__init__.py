"""Parquet: the format (:mod:`.format`) and the page reader that decodes fixed-size lists
of numbers straight from their pages (:mod:`._fixedlist`, over the page headers in
:mod:`._pages` and the RLE / bit-packed hybrid runs in :mod:`._rle_bitpacked`).

May import: ``shardwise.formats``' core (:mod:`shardwise.formats.contract`, the shared
shard writer), ``shardwise.storage`` and ``shardwise.errors``. The page reader imports
none of that: only numpy, pyarrow and its own modules.
"""

from shardwise.formats.parquet.format import ParquetFormat, ParquetShardWriter

__all__ = ["ParquetFormat", "ParquetShardWriter"]
