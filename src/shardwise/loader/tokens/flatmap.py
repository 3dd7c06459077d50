"""Token units as views of their files mapped once, where the index says where they lie.

When every unit of a token dataset has its token run in the dataset index
(:mod:`shardwise.index.token_layout`: byte offset and token count per row group, saved
when the dataset was indexed), :class:`FlatTokens` gives a stream what opening needs, each
unit's token count, with no file read, and a unit's tokens as a view of its file: each file
is mapped once per process (``mmap``, no read-ahead advice; the latest
:data:`KEEP_MAPS` maps kept, as each holds a file descriptor) and checked against the size
and modification time the index recorded, so a file truncated, grown or rewritten since it
was indexed raises :class:`~shardwise.errors.FormatError` naming it, never gives other
tokens. Datasets without the layout (indexed by an older shardwise, remote, on a network
or FUSE filesystem, or written by other tools) are read as before (:mod:`.mapped`, Arrow).
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from shardwise._tokens import check_vocab
from shardwise.errors import FormatError
from shardwise.index.token_layout import layout_units
from shardwise.plan.concat_ids import token_rows
from shardwise.plan.concat_rows import UnitRows
from shardwise.storage.localfs import mappable

__all__ = ["KEEP_MAPS", "KEEP_UNITS", "FlatTokens", "MappedRows"]

KEEP_MAPS = 64  # files kept mapped (a map holds a descriptor until no view refers to it)
KEEP_UNITS = 256  # units whose rows a stream keeps laid out


def _local_path(path: str) -> str | None:
    if "://" in path and not path.startswith("file://"):
        return None
    return path.removeprefix("file://")


class FlatTokens:
    """Every unit's token run of one token column (picklable: the maps are not carried).

    Args:
        spans: ``[offset, tokens]`` per unit (int64 ``(units, 2)``).
        paths: each unit's local file.
        files: ``{path: (size, fingerprint)}`` as the index recorded them.
        dtype: one token id.
        vocab_size: the ids of a unit are checked to be below it when it is first viewed
            (:func:`~shardwise._tokens.check_vocab`); None: not checked.
    """

    def __init__(
        self,
        spans: np.ndarray,
        paths: list[str],
        files: dict[str, tuple[int, str]],
        dtype: np.dtype,
        vocab_size: int | None = None,
    ) -> None:
        self.spans, self.paths, self.files, self.dtype = spans, paths, files, np.dtype(dtype)
        self.vocab_size, self._checked = vocab_size, np.zeros(len(spans), bool)
        self.totals = spans[:, 1].copy()
        self._maps: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of(
        cls,
        index: Any,
        column: str,
        count_column: str | None,
        dtype: str | np.dtype,
        vocab_size: int | None = None,
    ) -> FlatTokens | None:
        """The token runs of ``index`` (a ``DatasetIndex`` or ``MixedIndex``), or None
        when a unit has none or a file is not on a disk or memory filesystem of this
        machine."""
        parts: list[np.ndarray] = []
        paths: list[str] = []
        files: dict[str, tuple[int, str]] = {}
        renames = getattr(index, "renames", None)
        for s, ix in enumerate(getattr(index, "indexes", [index])):
            names = renames[s] if renames else {}
            counts = names.get(count_column, count_column) if count_column else None
            spans = layout_units(ix, names.get(column, column), counts)
            local = [_local_path(u.path) for u in ix.units]
            if spans is None or any(p is None for p in local):
                return None
            if not all(mappable(p) for p in {p for p in local if p is not None}):
                return None
            parts.append(spans)
            paths.extend(p for p in local if p is not None)
            files.update(
                {f.path.removeprefix("file://"): (f.size, f.fingerprint) for f in ix.files}
            )
        spans = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
        return cls(spans, paths, files, np.dtype(dtype), vocab_size)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_maps"], state["_lock"] = OrderedDict(), None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def view(self, unit: int) -> np.ndarray:
        """Unit ``unit``'s tokens, a view of its mapped file."""
        path = self.paths[unit]
        data = self._maps.get(path)
        if data is None:
            data = self._map(path)
        offset, count = self.spans[unit].tolist()
        end = offset + count * self.dtype.itemsize
        size = _size(data)
        if end > size:
            raise FormatError(
                f"tokens at bytes {offset}-{end} past the file's end ({size} bytes): the "
                "file was truncated since the dataset was indexed",
                path,
            )
        tokens = np.frombuffer(data, self.dtype, count, offset)
        if self.vocab_size is not None and not self._checked[unit]:
            check_vocab(tokens, self.vocab_size, path, unit)
            self._checked[unit] = True  # once per process: a unit is viewed again and again
        return tokens

    def _map(self, path: str) -> np.ndarray:
        """``path`` mapped, once, after checking it is the file the index describes."""
        with self._lock:
            data = self._maps.get(path)
            if data is not None:
                return data
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                self._check(path, st)
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if st.st_size else b""
            data = np.frombuffer(mapped, np.uint8)
            self._maps[path] = data
            while len(self._maps) > KEEP_MAPS:
                self._maps.popitem(last=False)
            return data

    def _check(self, path: str, st: os.stat_result) -> None:
        size, fingerprint = self.files.get(path, (-1, ""))
        changed = st.st_size != size
        try:
            changed = changed or float(fingerprint) != st.st_mtime
        except ValueError:
            pass  # a fingerprint that is no modification time: the size alone is checked
        if changed:
            raise FormatError(
                f"the file changed since the dataset was indexed (size {st.st_size}, "
                f"indexed {size}); open the dataset again to index it anew",
                path,
            )


def _size(data: np.ndarray) -> int:
    """The size its file has now, of a mapped file's bytes (a map's own length otherwise):
    a file truncated in place after it was mapped is refused before a unit of it is laid
    out, rather than ending the process when its lost pages are touched."""
    base = data.base
    mapped = base.obj if isinstance(base, memoryview) else base
    return int(mapped.size()) if isinstance(mapped, mmap.mmap) else len(data)


class MappedRows(dict[int, UnitRows]):
    """Units' ``input_ids`` rows (:func:`~shardwise.plan.concat_ids.token_rows`), laid out
    when first looked up, as views of their mapped files: nothing to read ahead, so the
    batches of a whole pass take their units from here directly (the latest
    :data:`KEEP_UNITS` kept; one evicted and needed again is laid out again)."""

    def __init__(self, flat: FlatTokens, seq_len: int, pad_id: int) -> None:
        super().__init__()
        self.flat, self.seq_len, self.pad_id = flat, seq_len, pad_id

    def __missing__(self, unit: int) -> UnitRows:
        rows = token_rows(self.flat.view(unit), self.seq_len, self.pad_id)
        if len(self) >= KEEP_UNITS:
            del self[next(iter(self))]
        self[unit] = rows
        return rows
