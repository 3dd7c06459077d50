"""The DataLoader-worker path: what a worker process sets up (Arrow's allocator) and
how its batches travel to the training process (one shared-memory ring per worker;
:mod:`~shardwise.loader.workers.transport` on the worker's side for numpy and torch
batches, :mod:`~shardwise.loader.workers.carriers` for the strings and binary values of
every format, :mod:`~shardwise.loader.workers.receive` on the training process's). The
batches themselves are the batch builder's (:mod:`shardwise.loader.batches.serial`).

May import: :mod:`shardwise.loader.batches` and :mod:`shardwise.loader.read`; never
:mod:`shardwise.loader.inprocess`.
"""
