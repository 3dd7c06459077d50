"""``input_ids``-only ``concat`` batches (``plan.concat_ids``): a batch of consecutive rows
of one unit is one block copy, any other one ``concatenate``; both give exactly the
``input_ids`` of the general window path (``take_window`` + ``window_batches``), batch by
batch, for every (rank, worker) of a token plan, shuffled or in file order, after resumes
on the same or another topology."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.concat_ids import batch_runs, gather, ids_batches
from shardwise.plan.concat_rows import UnitRows, take_window, unit_rows, window_batches
from shardwise.plan.tokens import TokenPlan

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# empty, single-token, around seq_len and much longer documents
UNIT = st.lists(
    st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 40), st.integers(30, 200)),
    max_size=12,
)
TOPOLOGY = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5))


def _laid(units: list[list[int]], seq_len: int, seed: int) -> dict[int, UnitRows]:
    rng = np.random.default_rng(seed)
    laid = {}
    for u, lengths in enumerate(units):
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = rng.integers(1, 60_000, int(offsets[-1])).astype(np.uint16)
        laid[u] = unit_rows(tokens, offsets, seq_len, pad_id=7)
    return laid


def _general(pairs: np.ndarray, laid: dict[int, UnitRows], seq_len: int, b: int) -> list:
    if len(pairs) < b:
        return []
    window, starts = take_window(pairs[:, 0], pairs[:, 1], laid, seq_len)
    return [x["input_ids"] for x in window_batches(window, starts, b)]


def _fast(pairs: np.ndarray, laid: dict[int, UnitRows], b: int, windows: int) -> list:
    """``ids_batches`` over ``pairs`` cut into windows of ``windows`` batches."""
    size = windows * b
    return [
        ids
        for lo in range(0, len(pairs), size)
        for ids in ids_batches(pairs[lo : lo + size, 0], pairs[lo : lo + size, 1], laid, b)
    ]


def _same(fast: list, general: list) -> None:
    assert len(fast) == len(general)
    for a, e in zip(fast, general):
        assert a.dtype == np.int64 and a.flags.c_contiguous and a.flags.owndata
        assert a.shape == e.shape and np.array_equal(a, e)


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=1, max_size=6),
    seq_len=st.integers(1, 33),
    topo=TOPOLOGY,
    after=TOPOLOGY,
    shuffle=st.booleans(),
    frac=st.floats(0, 1),
    windows=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_fast_batches_equal_the_general_path(
    units: list[list[int]],
    seq_len: int,
    topo: tuple[int, int, int],
    after: tuple[int, int, int],
    shuffle: bool,
    frac: float,
    windows: int,
    seed: int,
) -> None:
    lengths = np.array([n for u in units for n in u], dtype=np.int64)
    docs = np.array([len(u) for u in units])
    try:
        plan = TokenPlan(lengths, docs, seq_len, Topology(*topo), seed=seed, shuffle=shuffle)
        consumed = int(frac * plan.batches_per_rank)
        plans = [plan, plan.resume(consumed), plan.resume(consumed, Topology(*after))]
    except PlanError:  # fewer sequences than one global batch
        return
    laid = _laid(units, seq_len, seed)
    for p in plans:
        t = p.topology
        for rank in range(t.world_size):
            for worker in range(t.num_workers):
                pairs = p.worker(rank, worker).pairs()
                b = t.batch_size
                _same(_fast(pairs, laid, b, windows), _general(pairs, laid, seq_len, b))


def test_file_order_batches_are_blocks_but_at_unit_ends() -> None:
    units = [[100, 37, 400], [5], [250, 250]]  # 537, 5 and 500 tokens
    seq_len, b = 16, 4
    plan = TokenPlan(
        np.array([n for u in units for n in u]),
        np.array([len(u) for u in units]),
        seq_len,
        Topology(1, 1, b),
        shuffle=False,
    )
    pairs = plan.worker(0, 0).pairs()
    firsts, starts, runs = batch_runs(pairs[:, 0], pairs[:, 1], b)
    laid = _laid(units, seq_len, 0)
    blocks = [r and k + b <= laid[u].full for u, k, r in zip(firsts, starts, runs)]
    # unit 0: 33 full rows and a tail; unit 1: a tail; unit 2: 31 full rows and a tail
    assert sum(blocks) == 8 + 7 and len(blocks) == (34 + 1 + 32) // b
    _same(_fast(pairs, laid, b, 100), _general(pairs, laid, seq_len, b))


def test_gather_pads_tails_and_casts() -> None:
    laid = _laid([[5, 3], [20]], 8, 1)
    got = gather([1, 0, 1], [2, 0, 0], laid)
    assert got.dtype == np.int64 and got.shape == (3, 8)
    assert np.array_equal(got[0], np.r_[laid[1].tail[0, :4], [7] * 4])
    assert np.array_equal(got[1], laid[0].rows[0]) and np.array_equal(got[2], laid[1].rows[0])
