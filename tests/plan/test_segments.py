"""Streams of segments (plan/segments.py): slicing with wrap-around, and a stream of parts
built only when a slice reaches them (what an elastic resume makes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import EpochPlan, Topology
from shardwise.plan.segments import PartedStream, Segment, Stream


def _rows(segments: list[Segment]) -> list[tuple[int, int]]:
    return [(s.unit, int(p)) for s in segments for p in s.positions()]


@settings(max_examples=80, deadline=None)
@given(
    parts=st.lists(st.lists(st.integers(0, 7), max_size=4), min_size=1, max_size=6),
    start=st.integers(0, 60),
    length=st.integers(0, 60),
)
def test_a_parted_stream_slices_as_the_whole_stream_and_builds_only_what_it_reaches(
    parts: list[list[int]], start: int, length: int
) -> None:
    # part i: segments of units 10*i + j with the given sizes
    segs = [[Segment(10 * i + j, 1, 1 + n) for j, n in enumerate(p)] for i, p in enumerate(parts)]
    built: list[int] = []

    def build(i: int) -> list[Segment]:
        built.append(i)
        return segs[i]

    parted = PartedStream(np.array([sum(p) for p in parts]), build)
    whole = Stream([s for p in segs for s in p])
    assert parted.size == whole.size
    if whole.size == 0:
        if length:
            with pytest.raises(PlanError, match="empty"):
                parted.slice(start, start + length)
        return
    got = parted.slice(start, start + length)
    assert _rows(got) == _rows(whole.slice(start, start + length))
    reached = {i for i, p in enumerate(segs) for s in p if s.unit in {g.unit for g in got}}
    assert set(built) == reached and len(built) == len(set(built)) == parted.parts_built
    parted.slice(start, start + length)
    assert len(built) == parted.parts_built  # each part built once


def test_a_part_of_the_wrong_size_is_an_error() -> None:
    parted = PartedStream(np.array([3]), lambda i: [Segment(0, 0, 2)])
    with pytest.raises(PlanError, match="holds 2 samples, not 3"):
        parted.slice(0, 1)


def test_an_elastic_resume_orders_only_the_windows_a_worker_takes() -> None:
    counts = np.random.default_rng(3).integers(50, 150, size=400)
    plan = EpochPlan(counts, Topology(16, 4, 8, True, 4), seed=1)
    resumed = plan.resume(plan.batches_per_rank // 2 + 1, Topology(8, 2, 16, True, 4))
    assert isinstance(resumed.stream, PartedStream) and resumed.stream.parts_built == 0
    resumed.worker(3, 1).pairs()
    # 64 workers before, 16 now: a new worker's piece is what about 4 old workers had left
    assert 0 < resumed.stream.parts_built <= 6
    n = sum(len(resumed.worker(r, w).pairs()) for r in range(8) for w in range(2))
    assert n == resumed.samples_per_rank * 8 and resumed.stream.parts_built == 64
