"""The 2 GB S3 benchmark's consumers and measured epochs, shared by every system.

Imported in the peers' virtualenvs too: numpy, Pillow and psutil only (and the harness).

A system hands :func:`epochs` a function making one epoch's batches and a function that
takes a batch apart into its payload (a list of JPEG bytes, or an array of embeddings) and
its row count. The consumer then runs in the training process, the same code for every
system:

* ``bytes`` (I/O bound): touch every 4 KiB page of each image (a strided sum), or every
  cache line of the embeddings;
* ``cpu`` (CPU bound): decode each JPEG with Pillow and resize it to 96x96.

Every epoch reports rows, seconds, the time to its first batch, the CPU seconds of the
whole process tree (the training process and its DataLoader workers), and, read from the
S3 server's own counters, the bytes it sent and the GET requests it answered for the
system's bucket during the epoch (and the server's CPU seconds).
"""

from __future__ import annotations

import io
import re
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["EPOCHS", "Server", "consume", "epochs"]

EPOCHS = ("cold", "warm")
PAGE = 4096
RESIZE = (96, 96)


def _touch(payload: Any) -> int:
    """Touch every 4 KiB page of each value (a sequence of bytes, or an object array of
    them), or every cache line of a numeric array (an object array is not summed: that
    would concatenate its bytes values)."""
    import numpy as np

    numeric = isinstance(payload, np.ndarray) and payload.dtype != object
    if numeric or hasattr(payload, "numpy"):
        arr = np.asarray(payload).reshape(len(payload), -1)
        return int(arr[:, :: 64 // arr.itemsize].sum() != 0.5)  # one value per cache line
    return sum(int(np.frombuffer(b, np.uint8)[::PAGE].sum()) & 1 for b in payload)


def _decode(payload: Sequence[bytes]) -> int:
    from PIL import Image

    n = 0
    for b in payload:
        with Image.open(io.BytesIO(b)) as im:
            n += im.convert("RGB").resize(RESIZE).size[0]
    return n


def consume(kind: str, payload: Any) -> int:
    """Run the ``kind`` consumer (``bytes`` or ``cpu``) over one batch's payload."""
    return _touch(payload) if kind == "bytes" else _decode(payload)


class Server:
    """The S3 server's Prometheus counters for one bucket, and its process's CPU time.

    Args:
        s3: the benchmark's server info (``metrics`` URL, ``pid`` of the server).
        bucket: the bucket whose traffic is counted.
    """

    def __init__(self, s3: dict[str, Any], bucket: str) -> None:
        self.url = s3.get("metrics")
        self.pid = s3.get("pid")
        self.bucket = bucket

    def counts(self) -> dict[str, float]:
        """``sent_bytes``, ``get_requests`` (all GETs of the bucket) and ``server_cpu_s``."""
        out = {"sent_bytes": 0.0, "get_requests": 0.0, "server_cpu_s": 0.0}
        if self.url:
            text = urllib.request.urlopen(self.url, timeout=10).read().decode()
            b = re.escape(self.bucket)
            for m in re.finditer(
                rf'^SeaweedFS_s3_bucket_traffic_sent_bytes_total\{{bucket="{b}"\}} (\S+)$',
                text,
                re.M,
            ):
                out["sent_bytes"] += float(m.group(1))
            for m in re.finditer(
                rf'^SeaweedFS_s3_request_total\{{bucket="{b}",code="\d+",type="GET"\}} (\S+)$',
                text,
                re.M,
            ):
                out["get_requests"] += float(m.group(1))
        out["server_cpu_s"] = _cpu_of(self.pid)
        return out


def _cpu_of(pid: int | None) -> float:
    if not pid:
        return 0.0
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(t.user + t.system + t.children_user + t.children_system)


def _one(
    batches: Iterable[Any], unpack: Callable[[Any], tuple[Any, int]], kind: str
) -> tuple[int, float, float]:
    """(rows, seconds, seconds to the first batch) of one pass, the consumer included."""
    t0 = time.perf_counter()
    first, rows = None, 0
    for batch in batches:
        if first is None:
            first = time.perf_counter() - t0
        payload, n = unpack(batch)
        consume(kind, payload)
        rows += n
    return rows, time.perf_counter() - t0, first if first is not None else float("nan")


def epochs(
    make: Callable[[int], Iterable[Any]],
    unpack: Callable[[Any], tuple[Any, int]],
    kind: str,
    server: Server,
    names: Sequence[str] = EPOCHS,
) -> dict[str, Any]:
    """Run ``make(0)``, ``make(1)``... as the epochs ``names``; their measures by name."""
    from harness.monitor import TreeMonitor

    out: dict[str, Any] = {"consumer": kind}
    for e, name in enumerate(names):
        before, paged = server.counts(), _paged_in()
        mon = TreeMonitor().start()
        rows, seconds, first = _one(make(e), unpack, kind)
        mon.stop()
        after, paged = server.counts(), _paged_in() - paged
        out[name] = {
            "rows": rows,
            "seconds": seconds,
            "rows_per_s": rows / seconds,
            "first_batch_s": first,
            "cpu_s": mon.cpu_seconds,
            "peak_rss_mb": mon.peak_rss_mb,
            "fetched_bytes": after["sent_bytes"] - before["sent_bytes"],
            "get_requests": after["get_requests"] - before["get_requests"],
            "server_cpu_s": after["server_cpu_s"] - before["server_cpu_s"],
            "disk_read_mb": paged / 1024,
        }
    return out


def _paged_in() -> float:
    """KiB the whole machine read from its disks so far (``pgpgin`` of ``/proc/vmstat``):
    in a warm epoch, where the server sends nothing, what the page cache no longer held."""
    try:
        with open("/proc/vmstat", encoding="ascii") as f:
            for line in f:
                if line.startswith("pgpgin "):
                    return float(line.split()[1])
    except OSError:
        pass
    return float("nan")
