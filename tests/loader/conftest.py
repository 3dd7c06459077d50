"""Fixtures shared by the loader's tests."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

from shardwise.loader.read.units import UnitReader


@pytest.fixture
def whole_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Units read whole, by unit id (the fallback that reads a unit again for its rest)."""
    seen: Counter[int] = Counter()
    read = UnitReader._read

    def counted(self: UnitReader, unit_id: int, quarantine: Any) -> pa.Table:
        seen[unit_id] += 1
        return read(self, unit_id, quarantine)

    monkeypatch.setattr(UnitReader, "_read", counted)
    return seen
