"""The one batch builder, shared by the in-process and the DataLoader-worker paths.

:class:`~shardwise.loader.batches.reading.Reading` says how units are read and what they
become; :mod:`~shardwise.loader.batches.windows` builds each window of a worker's plan
(one way for both paths); :mod:`~shardwise.loader.batches.pieces` cuts the windows into
pieces of whole batches (one piece size); gathers, window columns and texts take the
rows in plan order; :mod:`~shardwise.loader.batches.piece_maker` converts each piece once
and cuts it into batches (one conversion, with :mod:`~shardwise.loader.batches.convert`
and :mod:`~shardwise.loader.batches.package`: one packaging); and
:mod:`~shardwise.loader.batches.serial` runs all of it on one thread (the worker path).
The paths differ only in where this runs and how batches travel.

May import: :mod:`shardwise.loader.read`, plus formats, index, storage and plan; no other
room of the loader (not ``inprocess`` nor ``workers``).
"""
