"""The window pool hands an array out again only when nothing refers to it."""

from __future__ import annotations

import numpy as np

from shardwise.plan.buffers import Buffers


def test_an_array_is_reused_only_once_no_view_of_it_is_alive() -> None:
    pool = Buffers()
    a = pool.empty((4, 8), np.int64)
    view = a[1:3]
    del a
    b = pool.empty((4, 8), np.int64)
    assert view.base is not b  # the view keeps the first array busy
    first = id(view.base)
    del view  # b is still held: the first array is the one free
    assert id(pool.empty((4, 8), np.int64)) == first
    assert pool.empty((4, 8), np.int32).dtype == np.int32  # kept per shape and dtype


def test_the_pool_keeps_at_most_keep_arrays() -> None:
    pool = Buffers(keep=2)
    held = [pool.empty((3,), np.int64) for _ in range(4)]
    assert len({id(x) for x in held}) == 4
    assert sum(len(v) for v in pool._kept.values()) == 2
