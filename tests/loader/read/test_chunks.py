"""Where a row group's cache entries end next to the footer's (``chunks.until``)."""

from __future__ import annotations

from shardwise.loader.read.chunks import OVERLAP_SHARE, until

STOP = 10_000_000  # the footer's entries start here


def test_a_range_before_the_footer_entries_keeps_its_end() -> None:
    assert until(0, STOP, STOP) == STOP
    assert until(5, 9, STOP) == 9


def test_a_large_range_crossing_into_them_keeps_its_end() -> None:
    start = STOP - 9_000_000
    end = STOP + int((STOP + 1 - start) * OVERLAP_SHARE) - 1  # a few bytes held twice
    assert until(start, end, STOP) == end


def test_a_small_range_crossing_into_them_ends_where_they_start() -> None:
    # a small file's last chunk: its bytes past STOP come from the footer's entries,
    # so a cold read fetches each byte once
    assert until(STOP - 1_000, STOP + 500, STOP) == STOP
    assert until(STOP - 9_000_000, STOP + 200_000, STOP) == STOP


def test_a_range_inside_them_is_empty() -> None:
    assert until(STOP + 10, STOP + 20, STOP) <= STOP + 10
