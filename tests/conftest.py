"""Shared test setup. Engine fixtures live beside the tests that use them;
the S3 server (SeaweedFS on 127.0.0.1) is shared and defined in ``_s3server.py``."""

from __future__ import annotations

import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TQDM_MININTERVAL", "5")
