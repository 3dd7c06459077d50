#!/usr/bin/env python
"""Benchmark shardwise's ``StreamingDataset`` against other training data loaders.

Run from the repository root::

    .venv/bin/python benchmarks/bench_loader.py [--quick] [--only NAME,NAME] [--repeats R]

or as ``python benchmarks/run.py loader [--quick]``.

Data (generated once into ``benchmarks/.data/loader-<rows>/`` and reused): about
2,000,000 rows (``--quick``: 200,000) of ``id`` int64, ``label`` int64 (10 labels),
``text`` (random ASCII, 150-450 bytes) and ``emb`` ``fixed_size_list<float32>[64]``,
**sorted by label**, in 16 Parquet files whose row groups have random sizes of
5k-40k rows; the same rows as 16 WebDataset tar shards (``<key>.json`` with id and
label, ``<key>.txt``, ``<key>.npy``).

Loaders (each runs one full epoch in its own subprocess, 2 DataLoader workers and
batches of 256 unless said otherwise; every DataLoader, shardwise's and the peers', gets
``prefetch_factor=32``: with the default of 2, each batch waits for a request-and-reply
round trip between processes, which on 2 busy cores caps a fast loader at about half
its speed; peers run with ``benchmarks/.venv-peers``, created by this script when
missing):

* ``raw_scan``: single-process ``pyarrow.parquet.ParquetFile.iter_batches`` over the
  files, converted to numpy -- an upper bound with no shuffling at all;
* ``raw_scan_256``: the same scan in batches of 256 rows (the consumer's per-batch work
  256 times as often);
* ``dataloader_ceiling``: a DataLoader whose 2 workers read nothing and send the same
  pre-built batches of real rows (through shardwise's shared-memory transport), as many
  as the data has: the cost of the DataLoader, the transport and the consumer alone, a
  ceiling for any DataLoader-based loader at this batch size on this machine;
* ``shardwise_batched``: ``StreamingDataset(batch_format="numpy")``,
  ``DataLoader(batch_size=None)``;
* ``shardwise_per_sample``: ``StreamingDataset()`` (dicts), ``DataLoader(batch_size=256)``;
* ``shardwise_batched_wide``: the batched path with ``interleave=64``, so each worker mixes
  all of its row groups at once: the memory-for-shuffle-quality end of the trade-off (by
  default ``interleave`` is sized so the mixed row groups take about ``shuffle_bytes`` =
  512 MiB per worker: 21 of these row groups);
* ``hf_streaming``: ``load_dataset("parquet", streaming=True).shuffle(buffer_size=10_000)
  .with_format("torch")`` in a DataLoader (per sample);
* ``hf_map_batched``: ``Dataset.from_parquet`` (its one-time Arrow conversion is timed
  separately as ``setup_s``) ``.with_format("numpy")``, whole batches fetched by a
  DataLoader with a ``BatchSampler(RandomSampler)`` (a full shuffle);
* ``hf_map_per_sample``: the same Dataset, ``DataLoader(batch_size=256, shuffle=True)``;
* ``webdataset``: ``wds.WebDataset(urls, shardshuffle=True).shuffle(10_000).decode()``
  in a DataLoader (per sample);
* ``ray_data``: ``ray.data.read_parquet(files).iter_torch_batches(batch_size=256,
  local_shuffle_buffer_size=10_000)`` on ``ray.init(num_cpus=2)``.

Every loader's batches go through the same light consumer: labels as an integer array,
``emb`` as a ``(batch, 64)`` float matrix (stacked if the loader delivers something else
-- that cost is the user's, so it is counted), and the text touched. Measured per
loader: rows/s over the epoch (worker start-up included, one-time set-up excluded and
reported), peak RSS summed over the process tree (psutil, sampled in a background
thread; shared pages of forked workers count once per process), CPU seconds of the
tree, and shuffle quality: the mean over full batches of the total-variation distance
between the batch's label histogram and the global one (0 = perfect; sorted data read
in order gives 0.9; an i.i.d. sample of 256 rows gives about 0.075, printed as ``ideal``;
a stratified shuffle can go below it).

Each loader runs one epoch, or stops after ``--time-cap`` seconds (default 150): rows/s,
TVD and memory are then over the batches consumed by then, and the table marks the loader
``(capped)``; only the slowest per-sample peers reach the cap on 2 million rows. Worker
shut-down after the last batch is not timed.

Prints a markdown table and target check lines; writes ``benchmarks/results/loader.json``
(``loader-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import TreeMonitor, ensure_venv, reusable, run_worker, wait_idle  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA_ROOT = HERE / ".data"
PEER_VENV = HERE / ".venv-peers"
RESULTS = HERE / "results"

NUM_FILES = 16
NUM_LABELS = 10
EMB_DIM = 64
BATCH = 256
BUFFER = 10_000
WORKERS = 2
PREFETCH = 32  # every DataLoader's prefetch_factor (batches requested ahead per worker)
WIDE_INTERLEAVE = 64  # shardwise_batched_wide: every row group of a worker (~48 of 97) mixed at once
DATA_VERSION = 1  # bump when the generated data changes
# torch is pinned: an unpinned install may pull the CUDA build (gigabytes). aiohttp: Ray
# Data's read_parquet imports fsspec's HTTP filesystem, which needs it (ray[data] does not
# require it, and without it read_parquet fails with an ImportError). pydantic:
# iter_torch_batches imports ray.train, which needs it.
PEER_PACKAGES = ["torch==2.13.0", "datasets", "webdataset", "ray[data]", "pyarrow", "numpy", "psutil", "aiohttp",
                 "pydantic"]
PEER_MODULES = ["torch", "datasets", "webdataset", "ray", "pyarrow", "numpy", "psutil", "aiohttp", "pydantic"]

# name -> (environment, kind); kind: "bound", "batched" or "per_sample"
LOADERS: dict[str, tuple[str, str]] = {
    "raw_scan": ("main", "bound"),
    "raw_scan_256": ("main", "bound"),
    "dataloader_ceiling": ("main", "bound"),
    "shardwise_batched": ("main", "batched"),
    "shardwise_per_sample": ("main", "per_sample"),
    "shardwise_batched_wide": ("main", "batched"),
    "hf_streaming": ("peers", "per_sample"),
    "hf_map_batched": ("peers", "batched"),
    "hf_map_per_sample": ("peers", "per_sample"),
    "webdataset": ("peers", "per_sample"),
    "ray_data": ("peers", "batched"),
}


# ======================================================================================
# measuring (used inside the worker subprocesses; needs numpy and psutil only)
# ======================================================================================
def to_numpy(x: Any) -> Any:
    import numpy as np

    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # torch tensor
        return x.numpy()
    if isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def emb_matrix(x: Any) -> Any:
    """``emb`` of a batch as a (rows, 64) float32 matrix, whatever the loader gave."""
    import numpy as np

    if isinstance(x, (list, tuple)):
        if len(x) and hasattr(x[0], "numpy") and len(x) == EMB_DIM and x[0].ndim == 1 and len(x[0]) != EMB_DIM:
            # default_collate of per-sample Python lists: a list of 64 column tensors
            import torch

            return torch.stack(list(x), dim=1).numpy()
        return np.stack([to_numpy(v) for v in x])
    a = to_numpy(x)
    if a.dtype == object:
        a = np.stack(a)
    return a


def describe(x: Any) -> str:
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__}[{len(x)}] of {describe(x[0]) if len(x) else '?'}"
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    return f"{type(x).__module__.split('.')[0]}.{type(x).__name__}{tuple(shape) if shape is not None else ''}{'/' + str(dtype) if dtype is not None else ''}"


class Consumer:
    """The common per-batch work and the statistics: rows, shuffle TVD, output types."""

    def __init__(self, global_hist: Any) -> None:
        self.p = global_hist
        self.rows = 0
        self.batches = 0
        self.tvd_sum = 0.0
        self.tvd_n = 0
        self.text_bytes = 0
        self.emb_sum = 0.0
        self.types: dict[str, str] = {}
        self.deadline = float("inf")  # stop consuming after this perf_counter() time
        self.last = 0.0  # perf_counter() when the last batch was consumed

    @property
    def done(self) -> bool:
        return self.last > self.deadline

    def __call__(self, labels: Any, emb: Any, text: Any) -> None:
        import numpy as np

        if not self.types:
            self.types = {"label": describe(labels), "emb": describe(emb), "text": describe(text)}
        lab = to_numpy(labels).astype(np.int64, copy=False).reshape(-1)
        m = emb_matrix(emb)
        if m.shape != (len(lab), EMB_DIM):
            raise AssertionError(f"emb has shape {m.shape}, expected {(len(lab), EMB_DIM)}")
        self.emb_sum += float(m[:, 0].sum())
        self.text_bytes += len(text[0]) + len(text[-1])  # touch the text column
        n = len(lab)
        self.rows += n
        self.batches += 1
        # TVD over full chunks of BATCH rows (a loader with bigger batches, like the raw
        # scan, is judged on consecutive chunks of BATCH rows); partial batches are skipped
        for s in range(0, n - BATCH + 1, BATCH):
            q = np.bincount(lab[s : s + BATCH], minlength=NUM_LABELS)[:NUM_LABELS] / BATCH
            self.tvd_sum += 0.5 * float(np.abs(q - self.p).sum())
            self.tvd_n += 1
        self.last = time.perf_counter()

    @property
    def tvd(self) -> float | None:
        return self.tvd_sum / self.tvd_n if self.tvd_n else None


# ======================================================================================
# the loaders (worker side)
# ======================================================================================
def _parquet_files(data: Path) -> list[str]:
    return sorted(str(p) for p in (data / "parquet").glob("*.parquet"))


def _tar_files(data: Path) -> list[str]:
    return sorted(str(p) for p in (data / "wds").glob("*.tar"))


def _dict_batches(it: Any, consume: Consumer) -> None:
    for b in it:
        consume(b["label"], b["emb"], b["text"])
        if consume.done:  # the time cap: rows/s over what was consumed so far
            break


def run_raw_scan(data: Path, consume: Consumer, info: dict, batch_size: int = 65536) -> Any:
    import pyarrow.parquet as pq

    info["batch_rows"] = batch_size

    def go() -> None:
        for f in _parquet_files(data):
            pf = pq.ParquetFile(f)
            for rb in pf.iter_batches(batch_size=batch_size, columns=["id", "label", "text", "emb"]):
                emb = rb.column("emb")
                mat = emb.values.to_numpy().reshape(len(emb), EMB_DIM)  # no nulls: zero-copy
                rb.column("id").to_numpy()
                text = rb.column("text").to_numpy(zero_copy_only=False)
                consume(rb.column("label").to_numpy(), mat, text)

    return go


def run_raw_scan_256(data: Path, consume: Consumer, info: dict) -> Any:
    return run_raw_scan(data, consume, info, BATCH)


def run_dataloader_ceiling(data: Path, consume: Consumer, info: dict) -> Any:
    """The DataLoader alone: 2 workers that read nothing and send the same pre-built batches
    of real rows (shardwise's batches of one row group, through its shared-memory transport)
    as many times as the data set has batches. No loader in a DataLoader at this batch size
    can be faster on this machine."""
    import pyarrow.parquet as pq
    from torch.utils.data import DataLoader, IterableDataset

    from shardwise.loader import transport
    from shardwise.loader.dataset import _split

    files = _parquet_files(data)
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    table = pq.ParquetFile(files[0]).read_row_group(0, columns=["id", "label", "text", "emb"])
    table = table.slice(0, table.num_rows - table.num_rows % BATCH)

    class Prebuilt(IterableDataset):
        def __iter__(self) -> Any:
            transport.setup_worker("numpy")  # what shardwise does in a DataLoader worker
            batches = list(_split(table, BATCH, "numpy"))
            for j in range(total // BATCH // WORKERS):
                yield batches[j % len(batches)]

    info["prebuilt_rows"] = table.num_rows

    def go() -> None:
        _dict_batches(DataLoader(Prebuilt(), batch_size=None, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def _shardwise_ds(data: Path, batch_format: str | None, info: dict, interleave: int | None = None) -> Any:
    import shardwise
    from shardwise.loader import StreamingDataset

    info["versions"] = {"shardwise": getattr(shardwise, "__version__", "dev")}
    t0 = time.perf_counter()
    ds = StreamingDataset(str(data / "parquet"), batch_size=BATCH, shuffle=True, seed=0, drop_last=True,
                          columns=["id", "label", "text", "emb"], batch_format=batch_format,
                          num_workers=WORKERS, progress=False, interleave=interleave)
    info["interleave"] = ds.interleave  # as resolved (by default sized by shuffle_bytes)
    info["setup_s"] = time.perf_counter() - t0
    info["units"] = ds.index.num_units
    return ds


def run_shardwise_batched(data: Path, consume: Consumer, info: dict) -> Any:
    from torch.utils.data import DataLoader

    ds = _shardwise_ds(data, "numpy", info)

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=None, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def run_shardwise_batched_wide(data: Path, consume: Consumer, info: dict) -> Any:
    from torch.utils.data import DataLoader

    ds = _shardwise_ds(data, "numpy", info, interleave=WIDE_INTERLEAVE)

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=None, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def run_shardwise_per_sample(data: Path, consume: Consumer, info: dict) -> Any:
    from torch.utils.data import DataLoader

    ds = _shardwise_ds(data, None, info)

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def _hf_env(data: Path, info: dict) -> None:
    import datasets

    datasets.disable_progress_bars()
    info["versions"] = {"datasets": datasets.__version__}


def run_hf_streaming(data: Path, consume: Consumer, info: dict) -> Any:
    from datasets import load_dataset
    from torch.utils.data import DataLoader

    _hf_env(data, info)
    t0 = time.perf_counter()
    ds = load_dataset("parquet", data_files=_parquet_files(data), split="train", streaming=True)
    ds = ds.shuffle(buffer_size=BUFFER, seed=0).with_format("torch")
    info["setup_s"] = time.perf_counter() - t0
    info["n_shards"] = ds.num_shards

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def _hf_map(data: Path, info: dict) -> Any:
    from datasets import Dataset

    _hf_env(data, info)
    cache = Path(os.environ["BENCH_TMP"]) / "hf-cache"
    t0 = time.perf_counter()
    ds = Dataset.from_parquet(_parquet_files(data), cache_dir=str(cache), keep_in_memory=False)
    info["setup_s"] = time.perf_counter() - t0
    info["setup_what"] = "Dataset.from_parquet Arrow conversion (one-time, cached by HF afterwards)"
    return ds.with_format("numpy")


def run_hf_map_batched(data: Path, consume: Consumer, info: dict) -> Any:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    ds = _hf_map(data, info)
    torch.manual_seed(0)
    sampler = BatchSampler(RandomSampler(ds), batch_size=BATCH, drop_last=False)

    def go() -> None:
        # batch_size=None + a batch sampler: every fetch is ds[list_of_256_indices]
        _dict_batches(DataLoader(ds, batch_size=None, sampler=sampler, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def run_hf_map_per_sample(data: Path, consume: Consumer, info: dict) -> Any:
    import torch
    from torch.utils.data import DataLoader

    ds = _hf_map(data, info)
    torch.manual_seed(0)

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def run_webdataset(data: Path, consume: Consumer, info: dict) -> Any:
    import webdataset as wds
    from torch.utils.data import DataLoader

    info["versions"] = {"webdataset": getattr(wds, "__version__", None) or _dist_version("webdataset")}
    urls = _tar_files(data)

    def sample(s: dict) -> dict:
        meta = s["json"]
        return {"id": meta["id"], "label": meta["label"], "text": s["txt"], "emb": s["npy"]}

    ds = (wds.WebDataset(urls, shardshuffle=True, seed=0, empty_check=False)
          .shuffle(BUFFER).decode().map(sample))

    def go() -> None:
        _dict_batches(DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def run_ray_data(data: Path, consume: Consumer, info: dict) -> Any:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    info["versions"] = {"ray": ray.__version__}
    tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    t0 = time.perf_counter()
    ray.init(num_cpus=WORKERS, include_dashboard=False, _temp_dir=tmp, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level="ERROR")
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    info["setup_s"] = time.perf_counter() - t0
    info["setup_what"] = "ray.init"
    files = _parquet_files(data)
    import torch
    from ray.data.collate_fn import NumpyBatchCollateFn

    class Collate(NumpyBatchCollateFn):
        """Ray's default collate cannot make a tensor of the text column: numeric
        columns become tensors, text stays a numpy array of str."""

        def __call__(self, batch: dict) -> dict:
            return {k: v if v.dtype.kind in "OUS" else torch.as_tensor(v) for k, v in batch.items()}

    def go() -> None:
        try:
            ds = ray.data.read_parquet(files)
            it = ds.iter_torch_batches(batch_size=BATCH, local_shuffle_buffer_size=BUFFER, collate_fn=Collate())
            _dict_batches(it, consume)
        finally:
            ray.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)

    return go


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001
        return None


RUNNERS = {
    "raw_scan": run_raw_scan,
    "raw_scan_256": run_raw_scan_256,
    "dataloader_ceiling": run_dataloader_ceiling,
    "shardwise_batched": run_shardwise_batched,
    "shardwise_per_sample": run_shardwise_per_sample,
    "shardwise_batched_wide": run_shardwise_batched_wide,
    "hf_streaming": run_hf_streaming,
    "hf_map_batched": run_hf_map_batched,
    "hf_map_per_sample": run_hf_map_per_sample,
    "webdataset": run_webdataset,
    "ray_data": run_ray_data,
}


def worker_main(name: str, data: Path) -> int:
    import numpy as np

    meta = json.loads((data / "meta.json").read_text())
    p = np.asarray(meta["label_hist"], dtype=np.float64)
    p = p / p.sum()
    consume = Consumer(p)
    info: dict[str, Any] = {"name": name, "python": sys.executable}
    monitor = TreeMonitor().start()
    go = RUNNERS[name](data, consume, info)
    cap = float(os.environ.get("BENCH_TIME_CAP", "inf"))
    t0 = time.perf_counter()
    consume.deadline = t0 + cap
    cpu0 = monitor.cpu_seconds
    go()
    seconds = (consume.last or time.perf_counter()) - t0  # worker shutdown is not throughput
    monitor.stop()
    info["capped"] = consume.done
    info.update(
        rows=consume.rows,
        batches=consume.batches,
        seconds=seconds,
        rows_per_s=consume.rows / seconds if seconds > 0 else None,
        tvd=consume.tvd,
        peak_rss_mb=monitor.peak_rss / 2**20,
        max_procs=monitor.max_procs,
        cpu_s=monitor.cpu_seconds - cpu0,
        types=consume.types,
    )
    info.setdefault("versions", {})
    for mod in ("torch", "pyarrow", "numpy"):
        if mod in sys.modules:
            info["versions"][mod] = getattr(sys.modules[mod], "__version__", None)
    print("RESULT " + json.dumps(info), flush=True)
    return 0


# ======================================================================================
# data generation (main venv)
# ======================================================================================
def data_dir(rows: int) -> Path:
    return DATA_ROOT / f"loader-{rows}"


def generate(rows: int, seed: int = 0) -> Path:
    """Create (or reuse) the Parquet files and WebDataset shards of ``rows`` rows."""
    import numpy as np

    out = data_dir(rows)
    if reusable(out, DATA_VERSION, rows=rows):
        return out
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    (DATA_ROOT / ".gitignore").write_text("*\n")
    if out.exists():
        shutil.rmtree(out)
    (out / "parquet").mkdir(parents=True)
    (out / "wds").mkdir(parents=True)
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, NUM_FILES + 1).astype(np.int64)
    plans = []
    for i in range(NUM_FILES):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        sizes: list[int] = []
        left = hi - lo
        while left > 0:
            s = min(left, int(rng.integers(5_000, 40_001)))
            sizes.append(s)
            left -= s
        plans.append((i, lo, hi, sizes, seed * 1000 + i, rows, str(out)))
    # two processes: the files are independent
    import multiprocessing as mp

    with mp.get_context("fork").Pool(2) as pool:
        groups = pool.map(_write_file, plans)
    labels_hist = np.bincount(np.arange(rows, dtype=np.int64) * NUM_LABELS // rows, minlength=NUM_LABELS)
    meta = {
        "version": DATA_VERSION,
        "rows": rows,
        "files": NUM_FILES,
        "row_groups": int(sum(groups)),
        "label_hist": labels_hist.tolist(),
        "parquet_bytes": sum(p.stat().st_size for p in (out / "parquet").glob("*.parquet")),
        "wds_bytes": sum(p.stat().st_size for p in (out / "wds").glob("*.tar")),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(f"data: wrote {rows:,} rows to {out} in {meta['generate_s']:.1f} s "
          f"({meta['parquet_bytes'] / 2**20:.0f} MB parquet, {meta['row_groups']} row groups; "
          f"{meta['wds_bytes'] / 2**20:.0f} MB tar)", flush=True)
    return out


def _rows(lo: int, hi: int, total: int, rng: Any) -> Any:
    """The rows ``[lo, hi)`` of the data set as an Arrow table (label sorted)."""
    import numpy as np
    import pyarrow as pa

    n = hi - lo
    ids = np.arange(lo, hi, dtype=np.int64)
    labels = ids * NUM_LABELS // total  # sorted by label, equal label counts
    lengths = rng.integers(150, 451, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      ABCDEFGHIJ0123456789.,", dtype=np.uint8)
    chars = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))
    emb = rng.standard_normal((n, EMB_DIM), dtype=np.float32)
    emb_arr = pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), EMB_DIM)
    return pa.table({"id": ids, "label": labels, "text": text, "emb": emb_arr}), emb


def _write_file(plan: tuple) -> int:
    import io
    import tarfile

    import numpy as np
    import pyarrow.parquet as pq

    i, lo, hi, sizes, seed, total, out = plan
    rng = np.random.default_rng(seed)
    table, emb = _rows(lo, hi, total, rng)
    with pq.ParquetWriter(os.path.join(out, "parquet", f"part-{i:02d}.parquet"), table.schema) as w:
        start = 0
        for s in sizes:
            w.write_table(table.slice(start, s), row_group_size=s)
            start += s
    # WebDataset: one tar per parquet file, <key>.json / <key>.txt / <key>.npy
    buf = io.BytesIO()
    np.save(buf, emb[0])
    npy_header = buf.getvalue()[: -emb[0].nbytes]
    ids = table.column("id").to_numpy()
    labels = table.column("label").to_numpy()
    texts = table.column("text").to_pylist()
    mtime = time.time()

    def add(tf: tarfile.TarFile, name: str, payload: bytes) -> None:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime, ti.mode = len(payload), mtime, 0o644
        tf.addfile(ti, io.BytesIO(payload))

    path = os.path.join(out, "wds", f"shard-{i:02d}.tar")
    with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tf:
        for j in range(len(ids)):
            key = f"{ids[j]:09d}"
            add(tf, key + ".json", b'{"id": %d, "label": %d}' % (ids[j], labels[j]))
            add(tf, key + ".txt", texts[j].encode())
            add(tf, key + ".npy", npy_header + emb[j].tobytes())
    os.replace(path + ".tmp", path)
    return len(sizes)


# ======================================================================================
# the peer environment
# ======================================================================================
def peer_python() -> Path:
    return PEER_VENV / "bin" / "python"


def ensure_peers() -> dict[str, str]:
    """Create ``PEER_VENV`` with the peers if needed; return their versions."""
    return ensure_venv(PEER_VENV, PEER_PACKAGES, PEER_MODULES)


# ======================================================================================
# orchestration
# ======================================================================================
def ideal_tvd(hist: list[int], trials: int = 2000, seed: int = 0) -> float:
    """Mean TVD of i.i.d. batches of BATCH rows drawn from the global label mix."""
    import numpy as np

    p = np.asarray(hist, dtype=np.float64)
    p /= p.sum()
    rng = np.random.default_rng(seed)
    q = rng.multinomial(BATCH, p, size=trials) / BATCH
    return float(0.5 * np.abs(q - p).sum(axis=1).mean())


def run_one(name: str, data: Path, timeout: float, logdir: Path, idle_wait: float = 0.0,
            time_cap: float = float("inf")) -> dict[str, Any]:
    env_kind = LOADERS[name][0]
    py = sys.executable if env_kind == "main" else str(peer_python())
    env = dict(os.environ)
    env.update(
        RAY_AUTH_MODE="disabled",
        HF_DATASETS_OFFLINE="1",
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        RAY_DEDUP_LOGS="0",
    )
    tmp = Path(tempfile.mkdtemp(prefix=f"loader-{name}-", dir=str(DATA_ROOT)))
    env["BENCH_TMP"] = str(tmp)
    env["BENCH_TIME_CAP"] = str(time_cap)
    env["HF_HOME"] = str(tmp / "hf-home")
    env["SHARDWISE_CACHE_DIR"] = str(tmp / "sw-cache")
    if env_kind == "peers":  # the peers must not see the repo's package
        env.pop("PYTHONPATH", None)
    waited = wait_idle(idle_wait)
    load_before = os.getloadavg()[0]
    log = logdir / f"{name}.log"
    cmd = [py, str(Path(__file__).resolve()), "--worker", name, "--data", str(data)]
    print(f"--- {name} ...", end="", flush=True)
    t0 = time.perf_counter()
    try:
        res, error = run_worker(cmd, env, ROOT, log, timeout, name)
        if res is None:
            return error or {"name": name, "error": "no result"}
        res["wall_s"] = time.perf_counter() - t0
        res["loadavg_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        res["idle_wait_s"] = round(waited, 1)
        print(f" {res['rows']:,} rows in {res['seconds']:.1f} s = {res['rows_per_s']:,.0f} rows/s, "
              f"TVD {res['tvd']:.3f}, peak RSS {res['peak_rss_mb']:,.0f} MB", flush=True)
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fmt_ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "n/a"


def summarize(results: dict[str, dict], ideal: float) -> tuple[str, list[str], dict]:
    ok = {k: v for k, v in results.items() if "error" not in v}
    raw = ok.get("raw_scan", {}).get("rows_per_s")
    peers = {k: v for k, v in ok.items() if LOADERS[k][0] == "peers"}
    fastest = max(peers.values(), key=lambda v: v["rows_per_s"], default=None)
    fastest_rps = fastest["rows_per_s"] if fastest else None
    per_sample_peers = {k: v for k, v in peers.items() if LOADERS[k][1] == "per_sample"}
    fastest_ps = max(per_sample_peers.values(), key=lambda v: v["rows_per_s"], default=None)
    lines = ["| loader | kind | rows/s | vs raw scan | vs fastest peer | shuffle TVD | peak RSS MB | CPU s | set-up s "
             "| load 1m |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in results.items():
        kind = LOADERS[name][1]
        if "error" in r:
            lines.append(f"| {name} | {kind} | failed: {r['error'][:60]} | | | | | | | |")
            continue
        setup = r.get("setup_s")
        lines.append(
            f"| {name}{' (capped)' if r.get('capped') else ''} | {kind} | {r['rows_per_s']:,.0f} | {fmt_ratio(r['rows_per_s'], raw)} | "
            f"{fmt_ratio(r['rows_per_s'], fastest_rps)} | {r['tvd']:.3f} | {r['peak_rss_mb']:,.0f} | "
            f"{r['cpu_s']:.1f} | {'' if setup is None else f'{setup:.1f}'} | {r.get('loadavg_1m', ['?'])[0]} |"
        )
    lines.append(f"| ideal (i.i.d. batches of {BATCH}) | | | | | {ideal:.3f} | | | | |")
    table = "\n".join(lines)

    sb = ok.get("shardwise_batched", {}).get("rows_per_s")
    sp = ok.get("shardwise_per_sample", {}).get("rows_per_s")
    checks: dict[str, Any] = {}

    def check(label: str, value: float | None, target: float, peer: str | None) -> str:
        checks[label] = {"ratio": value, "target": target, "met": bool(value is not None and value >= target),
                         "peer": peer}
        v = f"{value:.2f}x" if value is not None else "n/a"
        verdict = "ok" if checks[label]["met"] else "MISSED"
        return f"{label}: {v} (target >= {target}x){f' [{peer}]' if peer else ''} {verdict}"

    check_lines = [
        check("shardwise batched vs fastest peer", sb / fastest_rps if sb and fastest_rps else None, 1.5,
              fastest["name"] if fastest else None),
        check("shardwise batched vs raw scan", sb / raw if sb and raw else None, 0.8, None),
        check("shardwise per-sample vs fastest peer per-sample",
              sp / fastest_ps["rows_per_s"] if sp and fastest_ps else None, 1.0,
              fastest_ps["name"] if fastest_ps else None),
    ]
    for bound in ("raw_scan_256", "dataloader_ceiling"):
        b = ok.get(bound, {}).get("rows_per_s")
        if sb and b:
            checks[f"shardwise batched vs {bound}"] = {"ratio": sb / b}
            check_lines.append(f"shardwise batched vs {bound}: {sb / b:.2f}x (for reference, no target)")
    best_peer_tvd = min(peers.values(), key=lambda v: v["tvd"], default=None)
    sw_tvd = {k: ok[k]["tvd"] for k in ("shardwise_batched", "shardwise_per_sample", "shardwise_batched_wide") if k in ok}
    sw_best = min(sw_tvd.values()) if sw_tvd else None
    shuffle_line = (
        f"shuffle: shardwise TVD {sw_best:.3f} vs best peer TVD {best_peer_tvd['tvd']:.3f} "
        f"[{best_peer_tvd['name']}] (ideal {ideal:.3f}, sorted order 0.900; lower is better)"
        if sw_best is not None and best_peer_tvd else "shuffle: n/a"
    )
    streaming_peers = [v for v in peers.values() if v["name"] not in ("hf_map_batched", "hf_map_per_sample")]
    if sw_best is not None and streaming_peers:
        best_stream = min(streaming_peers, key=lambda v: v["tvd"])
        shuffle_line += (f"; best streaming (buffer-shuffle) peer TVD {best_stream['tvd']:.3f} "
                         f"[{best_stream['name']}]")
    checks["shuffle"] = {"shardwise_tvd": sw_best, "best_peer_tvd": best_peer_tvd["tvd"] if best_peer_tvd else None,
                         "best_peer": best_peer_tvd["name"] if best_peer_tvd else None, "ideal": ideal}
    check_lines.append(shuffle_line)
    return table, check_lines, checks


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="200,000 rows instead of 2,000,000")
    ap.add_argument("--rows", type=int, help="rows of the generated data set (overrides --quick)")
    ap.add_argument("--only", help="comma-separated loaders to run (default: all)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per loader; the fastest counts")
    ap.add_argument("--timeout", type=float, help="seconds per loader run")
    ap.add_argument("--idle-wait", type=float,
                    help="before each loader, wait up to this many seconds for the machine to be "
                         "quiet (default: 0 with --quick, 60 otherwise)")
    ap.add_argument("--time-cap", type=float, default=150.0,
                    help="stop a loader after this many seconds of its epoch and count the rows "
                         "consumed by then (default 150; 'inf' for whole epochs)")
    ap.add_argument("--fresh", action="store_true",
                    help="with --only: do not merge into the results already saved for this size")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, Path(args.data))

    rows = args.rows or (200_000 if args.quick else 2_000_000)
    names = args.only.split(",") if args.only else list(LOADERS)
    unknown = [n for n in names if n not in LOADERS]
    if unknown:
        ap.error(f"unknown loaders {unknown}; known: {', '.join(LOADERS)}")
    timeout = args.timeout or (600.0 if rows <= 200_000 else 2400.0)
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if rows <= 200_000 else 60.0)

    data = generate(rows)
    peer_versions: dict[str, str] = {}
    if any(LOADERS[n][0] == "peers" for n in names):
        peer_versions = ensure_peers()
        print("peers:", ", ".join(f"{k} {v}" for k, v in peer_versions.items()), flush=True)
    # warm the page cache so no loader pays for the first read from disk
    for f in sorted((data / "parquet").glob("*.parquet")) + sorted((data / "wds").glob("*.tar")):
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    meta = json.loads((data / "meta.json").read_text())
    logdir = DATA_ROOT / "logs"
    logdir.mkdir(parents=True, exist_ok=True)

    results: dict[str, dict] = {}
    runs: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        for name in names:
            r = run_one(name, data, timeout, logdir, idle_wait, args.time_cap)
            runs.setdefault(name, []).append(r)
    for name in names:
        good = [r for r in runs[name] if "error" not in r]
        results[name] = max(good, key=lambda r: r["rows_per_s"]) if good else runs[name][-1]
        if len(good) > 1:
            results[name]["all_rows_per_s"] = [r["rows_per_s"] for r in good]

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("loader.json" if rows == 2_000_000 else
                     "loader-quick.json" if rows == 200_000 else f"loader-{rows}.json")
    merged_from = None
    if args.only and not args.fresh and out.exists():
        try:
            old = json.loads(out.read_text())
        except ValueError:
            old = {}
        if old.get("rows") == rows and old.get("data", {}).get("version") == DATA_VERSION:
            kept = {k: v for k, v in old.get("results", {}).items() if k in LOADERS and k not in results}
            if kept:
                merged_from = old.get("created")
                print(f"merging with the saved results of {', '.join(kept)} ({merged_from})")
                peer_versions = peer_versions or old.get("peer_versions", {})
            results.update(kept)
    results = {k: results[k] for k in LOADERS if k in results}

    ideal = ideal_tvd(meta["label_hist"])
    table, check_lines, checks = summarize(results, ideal)
    print()
    print(f"### loader benchmark: {rows:,} rows, batch {BATCH}, {WORKERS} workers, "
          f"shuffle buffer {BUFFER:,} ({os.cpu_count()} CPUs)")
    print()
    print(table)
    print()
    for line in check_lines:
        print(line)
    print()
    print("output types (label / emb / text):")
    for name, r in results.items():
        if "types" in r:
            t = r["types"]
            print(f"  {name}: {t.get('label')} / {t.get('emb')} / {t.get('text')}")

    payload = {
        "rows": rows,
        "batch_size": BATCH,
        "num_workers": WORKERS,
        "shuffle_buffer": BUFFER,
        "data": meta,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "peer_versions": peer_versions,
        "ideal_tvd": ideal,
        "results": results,
        "checks": checks,
        "table": table,
        "check_lines": check_lines,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "merged_with_results_of": merged_from,
    }
    out.write_text(json.dumps(payload, indent=1))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
