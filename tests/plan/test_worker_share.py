"""What one (rank, worker) yields (plan/worker_share.py): windows and the round-robin order."""

from __future__ import annotations

from shardwise.plan import EpochPlan, Topology


def test_worker_mixes_at_most_interleave_units_at_a_time() -> None:
    counts = [50] * 40
    plan = EpochPlan(counts, Topology(1, 1, 10, interleave=3), seed=1)
    for units, unit_ids, _ in plan.worker(0, 0).iter_windows():
        assert len(units) <= 3
        assert set(unit_ids.tolist()) == set(units)
    flat = plan.worker(0, 0).pairs()[:, 0]
    # the first window's samples come first, drawn from exactly its units
    first = next(iter(plan.worker(0, 0).iter_windows()))[0]
    assert set(flat[: 50 * len(first)].tolist()) == set(first)
    # 40 units in windows of at most 3: 14 windows of 2 or 3 units, not 13 of 3 and one of 1
    assert sorted(len(w) for w in plan.worker(0, 0).windows()) == [2] * 2 + [3] * 12


def test_round_robin_matches_dataloader_order() -> None:
    counts = [7, 13, 2, 30, 11, 9]
    t = Topology(2, 3, 4)
    plan = EpochPlan(counts, t, seed=3)
    for rank in range(2):
        workers = [plan.worker(rank, w).pairs().reshape(-1, 4, 2) for w in range(3)]
        expected = [workers[j % 3][j // 3] for j in range(plan.batches_per_rank)]
        assert all((a == b).all() for a, b in zip(plan.rank_batches(rank), expected))
