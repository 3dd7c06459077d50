"""The one batch builder, shared by the in-process and the DataLoader-worker paths.

:class:`~shardwise.loader.batches.reading.Reading` says how units are read and what they
become; :mod:`~shardwise.loader.batches.windows` builds each window of a worker's plan
(one way for both paths); :mod:`~shardwise.loader.batches.pieces` cuts the windows into
pieces of whole batches (one piece size); gathers, window columns and texts take the
rows in plan order; :mod:`~shardwise.loader.batches.convert` and
:mod:`~shardwise.loader.batches.package` (one packaging) turn columns into the batch
format; :mod:`~shardwise.loader.batches.serial` makes batches on one thread (the worker
path). The paths differ only in where this runs and how batches travel.

May import: :mod:`shardwise.loader.read`, plus formats, index, storage and plan; no other
room of the loader (not ``inprocess`` nor ``workers``).
"""
