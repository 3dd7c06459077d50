"""Reading units: one unit of a dataset (or of several sources as one) as an Arrow table.

Holds the unit readers (projection, filter, counts of matching rows), the node-cache
adapter that serves remote units' bytes (:mod:`~shardwise.loader.read.cached`) and the
training process's head start filling it, the read-ahead of units under a byte budget
(:mod:`~shardwise.loader.read.prefetch`), the opening of what ``StreamingDataset`` is
given and the checks a unit's values pass as it is read.

May import: storage, formats, index, parallel, plan, and of the loader only the user's
:mod:`~shardwise.loader.source`, :mod:`~shardwise.loader.placement` and the argument
checks; no other room of the loader.
"""
