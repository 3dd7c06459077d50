"""The engines ``parallel_map`` runs on, one module per engine.

``local`` (shardwise's own process pool, with its worker loop in :mod:`.local_worker`,
its process start in :mod:`.local_procs` and the caller's slot in :mod:`.local_caller`),
``thread`` and ``sequential`` (:mod:`.threads`), and the optional engines :mod:`.joblib`,
:mod:`.ray`, :mod:`.spark` and :mod:`.dask` (each imports its engine lazily).

May import: the core of ``shardwise.parallel`` (the backend interface, what runs in a
worker, counters, CPUs, malloc) and ``shardwise.errors``/``shardwise._optional``. The
core never imports a backend: the registry names them as strings, loaded on first use.
"""
