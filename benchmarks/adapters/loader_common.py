"""What every loader of the loader benchmark shares: constants, the consumer, the epoch.

A loader adapter is ``setup(data, consume, info) -> go``: it builds its loader (set-up
time goes in ``info["setup_s"]``) and returns ``go()``, which iterates one epoch and hands
every batch to ``consume(labels, emb, payload)`` (``emb`` None on shapes without it; the
payload is the shape's variable-size column: text, token lists or image bytes).
:func:`epoch` times ``go()`` and measures.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.monitor import TreeMonitor

__all__ = [
    "BATCH",
    "BUFFER",
    "EMB_DIM",
    "NUM_LABELS",
    "PREFETCH",
    "WORKERS",
    "Consumer",
    "columns",
    "dict_batches",
    "emb_dim",
    "epoch",
    "parquet_files",
    "payload",
    "tar_files",
]

NUM_LABELS = 10
EMB_DIM = 64
BATCH = 256
# RSS sampled this often (s): an epoch of the first-epoch rows lasts 0.05-1 s, and a
# coarser sampling missed its peak
MONITOR_S = 0.02
BUFFER = 10_000
WORKERS = 2
PREFETCH = 32  # every DataLoader's prefetch_factor (batches requested ahead per worker)

Setup = Callable[[Path, "Consumer", dict[str, Any]], Callable[[], None]]


def to_numpy(x: Any) -> Any:
    """A torch tensor, numpy array or sequence as a numpy array."""
    import numpy as np

    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # torch tensor
        return x.numpy()
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def emb_matrix(x: Any, dim: int = EMB_DIM) -> Any:
    """``emb`` of a batch as a (rows, dim) float32 matrix, whatever the loader gave."""
    import numpy as np

    if isinstance(x, (list, tuple)):
        if (
            len(x)
            and hasattr(x[0], "numpy")
            and len(x) == dim
            and x[0].ndim == 1
            and len(x[0]) != dim
        ):
            import torch  # default_collate of per-sample lists: a list of 64 column tensors

            return torch.stack(list(x), dim=1).numpy()
        return np.stack([to_numpy(v) for v in x])
    a = to_numpy(x)
    return np.stack(a) if a.dtype == object else a


def describe(x: Any) -> str:
    """A short type description of what a loader delivered."""
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__}[{len(x)}] of {describe(x[0]) if len(x) else '?'}"
    shape, dtype = getattr(x, "shape", None), getattr(x, "dtype", None)
    return (
        f"{type(x).__module__.split('.')[0]}.{type(x).__name__}"
        f"{tuple(shape) if shape is not None else ''}"
        f"{'/' + str(dtype) if dtype is not None else ''}"
    )


class Consumer:
    """The common per-batch work and the statistics: rows, shuffle TVD, output types."""

    def __init__(self, global_hist: Any, dim: int = EMB_DIM) -> None:
        self.p = global_hist
        self.dim = dim
        self.rows = self.batches = self.tvd_n = self.text_bytes = 0
        self.tvd_sum = self.emb_sum = 0.0
        self.types: dict[str, str] = {}
        self.deadline = float("inf")  # stop consuming after this perf_counter() time
        self.last = 0.0  # perf_counter() when the last batch was consumed
        self.first: float | None = None  # perf_counter() when the first batch was consumed

    @property
    def done(self) -> bool:
        """Whether the time cap has passed."""
        return self.last > self.deadline

    def __call__(self, labels: Any, emb: Any, text: Any) -> None:
        import numpy as np

        if not self.types:
            self.types = {"label": describe(labels), "emb": describe(emb), "text": describe(text)}
        lab = to_numpy(labels).astype(np.int64, copy=False).reshape(-1)
        if self.dim:
            m = emb_matrix(emb, self.dim)
            if m.shape != (len(lab), self.dim):
                raise RuntimeError(f"emb has shape {m.shape}, expected {(len(lab), self.dim)}")
            self.emb_sum += float(m[:, 0].sum())
        if text is not None:  # the data has a variable-size column: touch it
            self.text_bytes += len(text[0]) + len(text[-1])
        n = len(lab)
        self.rows += n
        self.batches += 1
        # TVD over full chunks of BATCH rows (bigger batches, like the raw scan's, are
        # judged on consecutive chunks of BATCH rows); partial batches are skipped
        for s in range(0, n - BATCH + 1, BATCH):
            q = np.bincount(lab[s : s + BATCH], minlength=NUM_LABELS)[:NUM_LABELS] / BATCH
            self.tvd_sum += 0.5 * float(np.abs(q - self.p).sum())
            self.tvd_n += 1
        self.last = time.perf_counter()
        if self.first is None:
            self.first = self.last

    @property
    def tvd(self) -> float | None:
        """Mean TVD between each batch's label histogram and the global one."""
        return self.tvd_sum / self.tvd_n if self.tvd_n else None


def _meta(data: Path) -> dict[str, Any]:
    return json.loads((data / "meta.json").read_text())  # type: ignore[no-any-return]


def columns(data: Path) -> list[str]:
    """The columns every loader reads from this data set (its shape's)."""
    return list(_meta(data).get("columns", ["id", "label", "text", "emb"]))


def emb_dim(data: Path) -> int:
    """The width of the data set's ``emb`` column (0: it has none)."""
    return int(_meta(data).get("emb_dim", EMB_DIM))


def payload(data: Path) -> str | None:
    """The data set's variable-size column (``text``, ``tokens``, ``image``) or None."""
    meta = _meta(data)
    return meta.get("payload", "text" if "text" in meta.get("columns", ["text"]) else None)


def parquet_files(data: Path) -> list[str]:
    """The data set's Parquet files."""
    return sorted(str(p) for p in (data / "parquet").glob("*.parquet"))


def tar_files(data: Path) -> list[str]:
    """The data set's WebDataset shards."""
    return sorted(str(p) for p in (data / "wds").glob("*.tar"))


def dict_batches(it: Any, consume: Consumer) -> None:
    """Consume batches that are dicts of columns, until the end or the time cap."""
    for b in it:
        more = next((b[k] for k in ("text", "tokens", "image") if k in b), None)
        consume(b["label"], b.get("emb"), more)
        if consume.done:
            break


def epoch(data: str, tmp: str, setup: str, time_cap: float = float("inf")) -> dict[str, Any]:
    """Worker side: one epoch of the loader ``setup`` (``"module:function"``), measured."""
    import numpy as np

    module, _, func = setup.partition(":")
    make: Setup = getattr(importlib.import_module(module), func)
    root = Path(data)
    hist = np.asarray(_meta(root)["label_hist"], dtype=np.float64)
    consume = Consumer(hist / hist.sum(), emb_dim(root))
    info: dict[str, Any] = {}
    monitor = TreeMonitor(MONITOR_S).start()
    go = make(root, consume, info)
    monitor.sample()  # what the process holds before the timed work (imports, a built dataset)
    info["rss_start_mb"] = monitor.last_rss / 2**20
    t0 = time.perf_counter()
    consume.deadline = t0 + time_cap
    cpu0 = monitor.cpu_seconds
    go()
    seconds = (consume.last or time.perf_counter()) - t0  # worker shutdown is not throughput
    info["first_batch_s"] = consume.first - t0 if consume.first is not None else None
    monitor.stop()
    info.update(
        capped=consume.done,
        rows=consume.rows,
        batches=consume.batches,
        seconds=seconds,
        rows_per_s=consume.rows / seconds if seconds > 0 else None,
        tvd=consume.tvd,
        peak_rss_mb=monitor.peak_rss_mb,
        max_procs=monitor.max_procs,
        cpu_s=monitor.cpu_seconds - cpu0,
        types=consume.types,
    )
    versions = info.setdefault("versions", {})
    versions.update(
        {
            m: getattr(sys.modules[m], "__version__", None)
            for m in ("torch", "pyarrow", "numpy")
            if m in sys.modules
        }
    )
    return info
