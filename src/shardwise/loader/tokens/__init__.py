"""Token streams: fixed-length packed sequences for language-model training.

Holds ``TokenStream`` (:mod:`~shardwise.loader.tokens.stream`: the token plan of an
epoch, placed like the dataset, its batches, state and stats) and the reading of token
shards (:mod:`~shardwise.loader.tokens.units`: document lengths, a unit's flat tokens,
units read ahead on threads; :mod:`~shardwise.loader.tokens.flatmap`: token files mapped
once, units as views where the dataset index locates them). ``TokenStream`` is created
on first access: with torch installed it is also a ``torch.utils.data.IterableDataset``
(use ``DataLoader(ds, batch_size=None)``).

May import: storage, formats, index, plan, the token layout (``shardwise._tokens``), and
of the loader the readers (:mod:`~shardwise.loader.read`), the placement, the
topology channel, the passes, the state version, the argument checks and the mixing key
(:mod:`~shardwise.loader.stats`, which a saved state records as ``StreamingDataset``'s
does: :mod:`.saved`).
"""

from __future__ import annotations

from typing import Any

from shardwise.loader.tokens.stream import TokenStreamBase

__all__ = ["TokenStream", "TokenStreamBase"]

_cls: type | None = None


def _build() -> type:
    global _cls
    if _cls is None:
        bases: tuple[type, ...] = (TokenStreamBase,)
        try:
            from torch.utils.data import IterableDataset
        except ImportError:
            pass
        else:
            bases = (TokenStreamBase, IterableDataset)
        _cls = type(
            "TokenStream",
            bases,
            {
                "__module__": __name__,
                "__doc__": TokenStreamBase.__doc__,
                "__iter__": TokenStreamBase.__iter__,
                "__len__": TokenStreamBase.__len__,
            },
        )
    return _cls


def __getattr__(name: str) -> Any:
    if name == "TokenStream":
        return _build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
