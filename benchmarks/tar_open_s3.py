#!/usr/bin/env python
"""How long indexing WebDataset tars on S3 takes: every header of every shard read by
``WebDatasetFormat.list_units`` (what ``open_dataset`` does per tar), on a SeaweedFS server
on 127.0.0.1, with the server's own count of GET requests and bytes sent.

Run from the repository root (serialize with other benchmarks)::

    flock /tmp/shardwise-bench.lock .venv/bin/python benchmarks/tar_open_s3.py DIR \\
        --src src [--src OTHER/src ...] [--rounds 3]

``DIR`` holds the tars (uploaded once per run); each ``--src`` is a shardwise source tree
measured in a fresh process per round, rounds alternated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
BUCKET = "tars"


def child(s3: dict[str, Any]) -> None:
    """In a fresh process: index every tar of the bucket; print wall s, CPU s, samples."""
    from adapters.s3_epochs import Server

    if s3.get("block"):  # a variant of the read-ahead's block size and depth
        try:
            from shardwise.storage import readahead
        except ImportError:  # a tree from before it: nothing to vary
            print(json.dumps({"skipped": True}))
            return
        readahead.BLOCK, readahead.AHEAD = s3["block"], s3["ahead"]

    from shardwise.formats.webdataset import WebDatasetFormat
    from shardwise.storage import expand, info

    opts = {"key": s3["key"], "secret": s3["secret"]}
    opts["client_kwargs"] = {"endpoint_url": s3["endpoint"]}
    server = Server(s3, BUCKET)
    before = server.counts()
    t, c = time.perf_counter(), time.process_time()
    fmt = WebDatasetFormat(storage_options=opts)
    urls = expand(f"s3://{BUCKET}/", extensions=(".tar",), **opts)
    n = sum(u.num_samples for url in urls for u in fmt.list_units(url, info(url, **opts).size))
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    after = server.counts()
    gets = after["get_requests"] - before["get_requests"]
    sent = after["sent_bytes"] - before["sent_bytes"]
    print(
        json.dumps(
            {
                "files": len(urls),
                "samples": n,
                "wall_s": wall,
                "cpu_s": cpu,
                "gets": gets,
                "sent_bytes": sent,
            }
        )
    )


def main() -> None:
    """Start the server, upload, measure each source tree ``--rounds`` times, alternated."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--src", action="append", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--block", type=int, nargs="*", default=[0], help="read-ahead block bytes")
    ap.add_argument("--ahead", type=int, default=4, help="read-ahead blocks in flight")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    import s3fs
    from _s3server import free_ports, remove_weed_files, start_weed, stop_weed, wait_ready

    work = tempfile.mkdtemp(prefix="tar-open-s3-", dir="/tmp")
    key, secret = "bench-key", "bench-" + uuid.uuid4().hex[:8]
    metrics = free_ports(1, set())[0]
    extra = (f"-metricsPort={metrics}", "-metricsIp=127.0.0.1")
    proc, ports, log = start_weed(work, key, secret, extra_args=extra)
    try:
        wait_ready(proc, work, ports, key, secret)
        s3 = {
            "endpoint": f"http://127.0.0.1:{ports['s3']}",
            "key": key,
            "secret": secret,
            "metrics": f"http://127.0.0.1:{metrics}/metrics",
            "pid": proc.pid,
        }
        fs = s3fs.S3FileSystem(
            key=key, secret=secret, client_kwargs={"endpoint_url": s3["endpoint"]}
        )
        fs.mkdir(BUCKET)
        for f in sorted(Path(args.dir).glob("*.tar")):
            fs.put_file(str(f), f"{BUCKET}/{f.name}")
        for r in range(args.rounds):
            for src, block in [(s, b) for s in args.src for b in args.block]:
                env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
                arg = json.dumps(dict(s3, block=block, ahead=args.ahead))
                out = subprocess.run(
                    [sys.executable, __file__, "--child", arg],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                res = json.loads(out.strip().splitlines()[-1])
                if res.get("skipped"):
                    continue
                print(
                    f"round {r} {src}: {res['files']} tars, {res['samples']} samples, "
                    f"wall {res['wall_s']:.2f} s, CPU {res['cpu_s']:.2f} s, "
                    f"{res['gets']:.0f} GETs, {res['sent_bytes'] / 1e9:.2f} GB sent, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    finally:
        stop_weed(proc)
        log.close()
        remove_weed_files(work, ports)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(json.loads(sys.argv[2]))
    else:
        main()
