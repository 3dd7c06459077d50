"""A Parquet file's units and schema from its last bytes: an index needs only the footer,
which one ranged read of the file's tail usually holds whole (a larger footer needs one
more read, of the bytes before the tail, which :func:`footer_start` names)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import FormatError
from shardwise.formats.contract import Unit
from shardwise.formats.parquet._footcheck import check_footer
from shardwise.storage.rawfile import SizedRawFile

__all__ = [
    "TAIL_BYTES",
    "footer_bytes",
    "footer_start",
    "row_group_units",
    "tail_start",
    "units_from_tail",
    "unreadable",
]

#: bytes read from the end of each file: small files' footers fit (Arrow reads as much)
TAIL_BYTES = 64 * 1024

_MAGIC = b"PAR1"


def tail_start(size: int, tail_bytes: int = TAIL_BYTES) -> int:
    """Where the first read of a file of ``size`` bytes starts."""
    return max(0, size - tail_bytes)


def footer_start(size: int, tail: bytes) -> int | None:
    """Where the footer starts when ``tail`` (the file's last bytes) holds only part of
    it; None when it is all there, or when the tail is not a footer (Arrow then reports
    the damage from the tail alone)."""
    if len(tail) < 8 or tail[-4:] != _MAGIC:
        return None
    start = size - 8 - int.from_bytes(tail[-8:-4], "little")
    return start if 0 <= start < size - len(tail) else None


def footer_bytes(tail: bytes) -> memoryview:
    """The Thrift footer at the end of ``tail`` (a file's last bytes, footer included)."""
    n = int.from_bytes(tail[-8:-4], "little")
    return memoryview(tail)[max(0, len(tail) - 8 - n) : max(0, len(tail) - 8)]


def row_group_units(
    md: pq.FileMetaData, path: str, size: int, sizes: list[tuple[int, int]] | None = None
) -> list[Unit]:
    """One unit per row group of the file's metadata (compressed bytes as its size), from
    ``sizes`` (each row group's rows and bytes, as :func:`check_footer` found them) when
    given, else from Arrow's accessors."""
    if sizes is not None and len(sizes) == md.num_row_groups:
        return [Unit(path, i, rows, nbytes, 0, size) for i, (rows, nbytes) in enumerate(sizes)]
    units = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        nbytes = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        units.append(Unit(path, i, rg.num_rows, nbytes, 0, size))
    return units


def unreadable(exc: BaseException) -> str:
    """Why a footer Arrow refused (or pyarrow could not name) is unreadable."""
    if isinstance(exc, UnicodeDecodeError):  # pyarrow decodes the schema's names
        return f"a name in its schema is not UTF-8: {exc}"
    return str(exc)


def units_from_tail(path: str, size: int, tail: bytes) -> tuple[list[Unit], pa.Schema]:
    """The units and Arrow schema of the Parquet file ``path`` of ``size`` bytes, from its
    last ``len(tail)`` bytes (which must hold the whole footer).

    Raises:
        FormatError: the tail is not a readable Parquet footer (Arrow's reason given).
    """
    footer = footer_bytes(tail)
    whole = len(tail) >= 8 and len(footer) + 8 == int.from_bytes(tail[-8:-4], "little") + 8
    # a tail that holds the whole footer is read from memory; else Arrow sees the true size
    source = pa.BufferReader(tail) if whole else pa.PythonFile(_Tail(size, tail), mode="r")
    try:
        pf = pq.ParquetFile(source)
        sizes = check_footer(footer, path)
        return row_group_units(pf.metadata, path, size, sizes), pf.schema_arrow
    except (pa.ArrowException, OSError, FormatError, UnicodeDecodeError) as exc:
        if isinstance(exc, FormatError) and exc.path == path:
            raise  # the footer check's own, which names the place
        raise FormatError(
            f"not a readable Parquet file ({unreadable(exc)})", path, "footer"
        ) from exc
    finally:
        source.close()


class _Tail(SizedRawFile):
    """A read-only file of ``size`` bytes of which only the last ``len(tail)`` are here;
    Arrow sees the file's true size and reads its footer from them."""

    def __init__(self, size: int, tail: bytes) -> None:
        super().__init__(size)
        self._tail, self._base = tail, size - len(tail)

    def read(self, size: int = -1) -> bytes:
        if self._pos < self._base:
            raise FormatError(
                f"the footer reaches byte {self._pos}, before the last {len(self._tail)} bytes"
            )
        end = self._size if size < 0 else min(self._size, self._pos + size)
        out = self._tail[self._pos - self._base : max(self._pos, end) - self._base]
        self._pos = max(self._pos, end)
        return out
