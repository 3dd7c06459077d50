"""The in-process path: batches made on a pool of threads of the training process
(``for batch in ds``, ``DataLoader(ds, batch_size=None, num_workers=0)``), handed to the
loop as views of pieces; nothing crosses a process. Windows, pieces and their conversion
are the batch builder's (:mod:`shardwise.loader.batches`); this room only runs them on a
pool of threads, a few pieces ahead of the loop.

May import: :mod:`shardwise.loader.batches` and :mod:`shardwise.loader.read`; never
:mod:`shardwise.loader.workers`.
"""
