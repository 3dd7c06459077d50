"""Run the test pipeline in its own process (test_pipeline.py kills it mid-run)."""

from __future__ import annotations

import sys

from _pipeline_common import build

if __name__ == "__main__":
    src, out, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    slow = len(sys.argv) > 4
    build(src, out, slow=slow).run(backend=backend, progress=False)
