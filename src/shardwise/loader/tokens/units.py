"""Reading token shards (:mod:`shardwise._tokens`) one unit at a time: every unit's
document lengths when a stream opens, and a unit's flat token array when a worker needs it.

Lengths come from the ``num_tokens`` column the ``tokenize`` operator writes (4 bytes per
document), read on a few threads; without it, from the token column's offsets (a read of
the tokens themselves). A unit's tokens are the token column's value buffer viewed as
numpy (:func:`~shardwise._tokens.flat_tokens`): Arrow decodes binary values, never lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise._tokens import check_vocab, flat_tokens
from shardwise.errors import ConfigError, FormatError
from shardwise.formats import OnError
from shardwise.loader.read.mixed import unit_reader
from shardwise.loader.tokens.checks import token_info
from shardwise.loader.tokens.flatmap import FlatTokens
from shardwise.loader.tokens.mapped import (
    OpenFiles,
    file_lengths,
    mapped_local,
    mapped_tokens,
    unit_path,
)

__all__ = ["TokenUnits", "UnitFeed"]

LENGTH_THREADS = 8


class TokenUnits:
    """The token column of a dataset's units (picklable: it travels to DataLoader workers).

    Args:
        index: a ``DatasetIndex`` or the ``MixedIndex`` of several sources.
        column: the token column.
        count_column: the per-document token count column, if the data has it.
        on_error: ``"raise"`` or ``"skip"``.
        cache: a node cache for remote units, or None.
    """

    def __init__(
        self,
        index: Any,
        column: str = "tokens",
        count_column: str | None = "num_tokens",
        on_error: OnError = "raise",
        cache: Any = None,
    ) -> None:
        if column not in index.schema.names:
            raise ConfigError(f"no token column {column!r}; the dataset has {index.schema.names}")
        self.info, self.column, self.index = token_info(index, column), column, index
        self.cache = cache
        self.count_column = count_column if count_column in index.schema.names else None
        self.reader = unit_reader(index, [column], None, on_error, cache)
        self._here: dict[str | None, bool] = {}  # file path: mapped on this machine
        self._counts = (
            unit_reader(index, [self.count_column], None, on_error, cache)
            if self.count_column
            else None
        )
        #: every unit's token run, where the index has it for local files (no node cache)
        self.flat = (
            FlatTokens.of(index, column, self.count_column, self.info.dtype, self.info.vocab_size)
            if cache is None
            else None
        )

    def totals(self) -> np.ndarray | None:
        """Tokens per unit as the index gives them (no file read), or None."""
        return None if self.flat is None else self.flat.totals

    def read(
        self, unit: int, lengths: np.ndarray | None = None, files: OpenFiles | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unit ``unit``'s tokens, flat, and its ``documents + 1`` offsets: a view of the
        file mapped once where the index locates them (:mod:`.flatmap`; with ``lengths``),
        else where the shard is laid out for it and read without the node cache
        (:func:`~shardwise.loader.tokens.mapped.mapped_tokens`; ``lengths``, the unit's
        document lengths as :meth:`lengths` gave them, spare reading them again, ``files``
        keeps the last files open for the next units), else Arrow's read."""
        if self.flat is not None and lengths is not None:
            tokens = self.flat.view(unit)  # its ids checked (FlatTokens.vocab_size)
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            if offsets[-1] == len(tokens):
                return tokens, offsets
        got = self._read(unit, lengths, files)
        check_vocab(got[0], self.info.vocab_size, unit_path(self.index, unit), unit, got[1])
        return got

    def _read(
        self, unit: int, lengths: np.ndarray | None, files: OpenFiles | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`read` where the index does not locate the unit's tokens."""
        got = None
        if self.cache is None and self.count_column is not None:
            info, column, counts = self.info, self.column, self.count_column
            got = mapped_tokens(self.index, unit, column, counts, info, lengths, files)
        if got is None:
            got = self._named(unit, self._arrow_tokens, unit)
        if lengths is not None:
            self._check_counts(unit, lengths, got[1])
        return got

    def _arrow_tokens(self, unit: int) -> tuple[np.ndarray, np.ndarray]:
        return flat_tokens(self.reader.read(unit).column(self.column), self.info.dtype)

    def _named(self, unit: int, read: Callable[[int], Any], *args: Any) -> Any:
        """``read(*args)``, a damage it finds without saying where named by the unit's file
        and the unit."""
        try:
            return read(*args)
        except FormatError as exc:
            if exc.path is not None:
                raise
            raise FormatError(exc.reason, unit_path(self.index, unit), f"unit {unit}") from exc

    def _check_counts(self, unit: int, lengths: np.ndarray, offsets: np.ndarray) -> None:
        """Refuse documents whose tokens are not as many as the count column says (the
        plan packs by the counts: another length would repeat or lose tokens)."""
        real = np.diff(offsets)
        if len(real) == len(lengths) and np.array_equal(real, lengths):
            return
        if len(real) != len(lengths):
            said = f"{len(lengths)} documents where the unit holds {len(real)}"
        else:
            doc = int(np.flatnonzero(real != lengths)[0])
            said = f"{lengths[doc]} tokens for document {doc} of the unit, which holds {real[doc]}"
        raise FormatError(
            f"the count column {self.count_column!r} says {said}",
            unit_path(self.index, unit),
            f"unit {unit}",
        )

    def mapped_here(self, unit: int) -> bool:
        """Whether unit ``unit`` is read as a view of a file on a disk or memory filesystem
        of this machine (nothing to wait for but page faults)."""
        if self.flat is not None:
            return True
        if self.cache is not None or self.count_column is None:
            return False
        path = unit_path(self.index, unit)
        if path not in self._here:
            self._here[path] = path is not None and mapped_local(path)
        return self._here[path]

    def _lengths(self, unit: int) -> np.ndarray:
        if self._counts is None:
            return np.diff(self.read(unit)[1])
        col = self._counts.read(unit).column(self.count_column)
        parts = [self._named(unit, _int64s, c) for c in col.chunks]
        return np.concatenate(parts or [np.zeros(0, np.int64)])

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Token lengths of every document (units in order) and documents per unit."""
        parts = None
        if self.cache is None and self.count_column is not None:  # each file opened once
            parts = file_lengths(self.index, self.count_column, LENGTH_THREADS)
        if parts is None:
            with ThreadPoolExecutor(LENGTH_THREADS) as pool:
                parts = list(pool.map(self._lengths, range(len(self.index.units))))
        docs = np.array([len(p) for p in parts], dtype=np.int64)
        flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        self._check_signs(flat, docs)
        return flat.astype(np.int64, copy=False), docs

    def _check_signs(self, lengths: np.ndarray, docs: np.ndarray) -> None:
        """Refuse a negative count, naming its unit's file and the unit."""
        if not (lengths < 0).any():
            return
        doc = int(np.flatnonzero(lengths < 0)[0])
        ends = np.cumsum(docs)
        unit = int(np.searchsorted(ends, doc, side="right"))
        raise FormatError(
            f"the count column {self.count_column!r} says {lengths[doc]} tokens for document "
            f"{doc - int(ends[unit] - docs[unit])} of the unit",
            unit_path(self.index, unit),
            f"unit {unit}",
        )


def _int64s(chunk: pa.Array) -> np.ndarray:
    """An integer array's values as int64 numpy (Arrow's ``to_numpy`` imports pandas,
    half a second or more at the first call)."""
    if chunk.null_count:
        raise FormatError("a token count column holds nulls")
    c = chunk.cast(pa.int64())
    return np.frombuffer(c.buffers()[1], np.int64, len(c), c.offset * 8)


class UnitFeed:
    """Units read ahead on threads, in the order a worker's sequences first need them, each
    dropped after its last sequence.

    Args:
        units: the unit of each sequence, in the order they are taken.
        read: reads one unit.
        ahead: units read beyond the one being consumed.
        inline: the units read on the calling thread instead (when it reaches them): a view
            of a file on this machine has no I/O to wait for, and its few Python steps on
            another thread would only wait on the GIL and hold the loop up.
    """

    def __init__(
        self,
        units: np.ndarray,
        read: Callable[[int], Any],
        ahead: int = 2,
        inline: Callable[[int], bool] | None = None,
    ) -> None:
        self.units = np.asarray(units, dtype=np.int64)
        uniq, first = np.unique(self.units, return_index=True)
        self.order = uniq[np.argsort(first)].tolist()
        self.rank = {u: i for i, u in enumerate(self.order)}
        last = len(self.units) - 1 - np.unique(self.units[::-1], return_index=True)[1]
        self.last = dict(zip(uniq.tolist(), last.tolist()))
        self.read, self.ahead, self.inline = read, max(0, int(ahead)), inline
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="shardwise-tokens")
        self._futures: dict[int, Future[Any]] = {}
        self._submitted = 0

    def _submit_through(self, unit: int) -> None:
        target = min(self.rank[unit] + self.ahead + 1, len(self.order))
        while self._submitted < target:
            u = self.order[self._submitted]
            if self.inline is not None and self.inline(u):
                self._futures[u] = _done(self.read, u)
            else:
                self._futures[u] = self._pool.submit(self.read, u)
            self._submitted += 1

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        """``(unit, what read gave)`` for every sequence, in order."""
        try:
            for i, unit in enumerate(self.units.tolist()):
                self._submit_through(unit)
                yield unit, self._futures[unit].result()
                if self.last[unit] == i:
                    del self._futures[unit]
        finally:
            self._stop()

    def windows(self, size: int) -> Iterator[tuple[slice, dict[int, Any]]]:
        """``(sequences, {unit: what read gave})`` for windows of ``size`` sequences, in
        order: every unit the window's sequences need, each dropped after its last window."""
        try:
            for lo in range(0, len(self.units), size):
                hi = min(lo + size, len(self.units))
                need = sorted(set(self.units[lo:hi].tolist()))
                self._submit_through(max(need, key=self.rank.__getitem__))
                yield slice(lo, hi), {u: self._futures[u].result() for u in need}
                for u in need:
                    if self.last[u] < hi:
                        del self._futures[u]
        finally:
            self._stop()

    def _stop(self) -> None:
        """Cancel the reads not started and wait for the running ones: a stream that
        failed or was left must not go on reading its files (a changed file could then
        end the process from a thread nobody waits for)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _done(read: Callable[[int], Any], unit: int) -> Future[Any]:
    """``read(unit)`` run here, as a finished future (its error raised at ``result()``)."""
    done: Future[Any] = Future()
    try:
        done.set_result(read(unit))
    except Exception as exc:  # noqa: BLE001  (raised where the unit is used, as a thread's)
        done.set_exception(exc)
    return done
