"""Run the test pipeline from one URL to another in its own process, with endpoint and
credentials from the usual AWS variables (the S3 pipeline tests kill it mid-run).

Usage: python _s3_pipeline_run.py SRC OUT BACKEND [slow]; BACKEND ``ray://ADDRESS``
connects to a running Ray cluster with ``ray.init(address=ADDRESS)``.
"""

from __future__ import annotations

import os
import sys

from _pipeline_common import build

if __name__ == "__main__":
    src, out, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    slow = len(sys.argv) > 4
    if backend.startswith("ray://"):
        import ray

        ray.init(address=backend.removeprefix("ray://"), log_to_driver=False)
        backend = "ray"
    notes = os.environ.get("SHARDWISE_TEST_NOTES_DIR")  # where tasks note the Ray node they ran on
    result = build(src, out, slow=slow, notes_dir=notes).run(backend=backend, progress=False)
    print(f"rows_out={result.rows_out} skipped={result.skipped_tasks}")
