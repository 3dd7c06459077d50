"""Backends on the session's real engines (fixtures in conftest.py start the engines)."""

from __future__ import annotations

from typing import Any

import pytest

BACKENDS = ["sequential", "thread", "local", "joblib", "ray", "spark", "dask"]
PROCESS_BACKENDS = ["local", "joblib", "ray", "spark", "dask"]


def make_backend(name: str, request: pytest.FixtureRequest) -> Any:
    """A backend instance on the session's real engine."""
    from shardwise.parallel import get_backend

    if name == "ray":
        request.getfixturevalue("ray_engine")
        return get_backend("ray")
    if name == "spark":
        return get_backend("spark", spark=request.getfixturevalue("spark_engine"))
    if name == "dask":
        return get_backend("dask", client=request.getfixturevalue("dask_engine"))
    return get_backend(name, 2 if name in ("local", "joblib") else None)
