"""What processes fetched through a node cache: one process's counts (:class:`CacheStats`)
and every process's, from the node's journal (:func:`fetched`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CacheStats", "fetched"]


@dataclass
class CacheStats:
    """What one process did with the cache (downloads are also journaled per node).

    Attributes:
        bytes_fetched: every byte this process read from remote objects for the units it
            read: its downloads plus what it read outside entries (``uncached_bytes``).
        bytes_per_column: bytes downloaded per Parquet column (``"(footer)"``: files'
            footers; ``"(unit)"``: whole units or row groups read as one range).
    """

    hits: int = 0
    downloads: int = 0
    bytes_downloaded: int = 0
    read_through: int = 0
    evictions: int = 0
    bad_entries: int = 0
    uncached_bytes: int = 0
    bytes_fetched: int = 0
    bytes_per_column: dict[str, int] = field(default_factory=dict)

    def downloaded(self, column: str, nbytes: int) -> str:
        """Count one download of ``nbytes`` of ``column`` (empty: a whole unit); returns
        the name it is counted under."""
        name = column or "(unit)"
        self.downloads += 1
        self.bytes_downloaded += nbytes
        self.bytes_fetched += nbytes
        self.bytes_per_column[name] = self.bytes_per_column.get(name, 0) + nbytes
        return name


def fetched(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What journal ``records`` say was fetched: ``bytes_fetched`` (downloads and reads
    outside entries) and ``bytes_per_column`` (downloads by column, as in ``CacheStats``)."""
    per: dict[str, int] = {}
    for r in records:
        if r.get("kind") == "download":
            column = r.get("column") or "(unit)"
            per[column] = per.get(column, 0) + int(r["bytes"])
    total = sum(int(r["bytes"]) for r in records if r.get("kind") in ("download", "uncached"))
    return {"bytes_fetched": total, "bytes_per_column": per}
