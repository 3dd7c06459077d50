"""Memory-mapped members of an uncompressed ``.npz`` on local disk.

``np.savez`` stores each array as an uncompressed ``.npy`` member of a zip file, so
a member's data is a contiguous run of the file. Mapping it instead of reading it lets
a reader that needs a few rows of a large array (the verification of dedup candidates
reads the signatures and shingles of the documents it meets, from every task) touch
only the pages holding them.
"""

from __future__ import annotations

import io
import mmap
import struct
import zipfile
from collections.abc import Sequence

import numpy as np

from shardwise.pipeline._npyload import HEADERS

__all__ = ["map_npz"]

_HEADER_MAX = 1 << 17  # bytes: a .npy header is far shorter
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length


def map_npz(path: str, names: Sequence[str] | None = None) -> dict[str, np.ndarray] | None:
    """Read-only arrays of the members ``names`` (all by default; absent ones left out)
    of the ``.npz`` at local ``path``, backed by one shared map of the file; None when a
    wanted member is compressed or not a plain ``.npy`` array (the caller reads the file
    instead)."""
    with open(path, "rb") as f:
        with zipfile.ZipFile(f) as z:
            infos = {i.filename.removesuffix(".npy"): i for i in z.infolist()}
        wanted = list(infos) if names is None else [n for n in names if n in infos]
        if any(infos[n].compress_type != zipfile.ZIP_STORED for n in wanted):
            return None
        if not wanted:
            return {}
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    out: dict[str, np.ndarray] = {}
    for n in wanted:
        arr = _member(buf, infos[n])
        if arr is None:
            return None
        out[n] = arr
    return out


def _member(buf: mmap.mmap, info: zipfile.ZipInfo) -> np.ndarray | None:
    """The array of one stored member (its local header, then the ``.npy`` header)."""
    sig, name_len, extra_len = _LOCAL_HEADER.unpack_from(buf, info.header_offset)
    if sig != b"PK\x03\x04":
        return None
    start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
    view = memoryview(buf)[start : start + info.file_size]
    header = _NpyHeader(view)
    if header.dtype is None:
        return None
    return np.ndarray(
        header.shape,
        header.dtype,
        buffer=view,
        offset=header.end,
        order="F" if header.fortran else "C",
    )


class _NpyHeader:
    """Shape, dtype and order of a ``.npy`` image, and where its data starts (``dtype``
    None for object arrays, which are pickled and cannot be mapped, and for format
    versions other than 1.0 and 2.0)."""

    def __init__(self, view: memoryview) -> None:
        f = io.BytesIO(view[:_HEADER_MAX].tobytes())
        version = np.lib.format.read_magic(f)
        self.shape: tuple[int, ...] = ()
        self.fortran, self.dtype = False, None
        read = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }.get(version)
        if read is not None:
            with HEADERS:
                self.shape, self.fortran, dtype = read(f)
            self.dtype = None if dtype.hasobject else dtype
        self.end = f.tell()
