"""An owned Dask cluster closes without a traceback: its workers' heartbeat may race the
scheduler's shutdown, so Dask's loggers are quiet on the workers and, only while the
cluster closes, in this process (their levels come back after)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from shardwise.parallel.backends.dask import _quiet_shutdown


def _worker_level() -> int:
    return logging.getLogger("distributed.worker").getEffectiveLevel()


@pytest.mark.engine
def test_quiet_shutdown_silences_workers_and_restores_this_process(dask_engine: Any) -> None:
    here = logging.getLogger("distributed.worker")
    before = here.getEffectiveLevel()
    assert before < logging.CRITICAL
    with _quiet_shutdown(dask_engine):
        levels = dask_engine.run(_worker_level)
        assert len(levels) == 2
        assert set(levels.values()) == {logging.CRITICAL}
        assert here.getEffectiveLevel() == logging.CRITICAL
    assert here.getEffectiveLevel() == before
