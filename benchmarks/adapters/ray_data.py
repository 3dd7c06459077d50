"""Ray Data: ``iter_torch_batches`` as a loader, ``map_batches`` as the cleaning pipeline."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from adapters.loader_common import BATCH, BUFFER, WORKERS, Consumer, dict_batches, parquet_files

__all__ = ["loader", "pipeline"]


@contextmanager
def _ray(prefix: str) -> Iterator[Any]:
    """``ray.init`` on 127.0.0.1 with a temporary directory; shut down afterwards."""
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    tmp = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # Ray's socket paths must stay short
    try:
        ray.init(
            num_cpus=WORKERS,
            include_dashboard=False,
            _temp_dir=tmp,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
            logging_level=40,
        )  # logging.ERROR
        import ray.data

        ray.data.DataContext.get_current().enable_progress_bars = False
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def loader(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """``read_parquet(files).iter_torch_batches(batch_size=256,
    local_shuffle_buffer_size=10_000)``."""
    import torch

    cm = _ray("rb")
    t0 = time.perf_counter()
    ray = cm.__enter__()
    info["setup_s"], info["setup_what"] = time.perf_counter() - t0, "ray.init"
    info["versions"] = {"ray": ray.__version__}
    from ray.data.collate_fn import NumpyBatchCollateFn

    class Collate(NumpyBatchCollateFn):
        """Numeric columns become tensors; text stays a numpy array of str."""

        def __call__(self, batch: dict[str, Any]) -> Any:
            return {k: v if v.dtype.kind in "OUS" else torch.as_tensor(v) for k, v in batch.items()}

    def go() -> None:
        try:
            ds = ray.data.read_parquet(parquet_files(data))
            dict_batches(
                ds.iter_torch_batches(
                    batch_size=BATCH, local_shuffle_buffer_size=BUFFER, collate_fn=Collate()
                ),
                consume,
            )
        finally:
            cm.__exit__(None, None, None)

    return go


def _clean(batch: Any) -> Any:
    from adapters.text_chain import clean_and_hash, keep_words

    t = clean_and_hash(batch)
    return t.filter(keep_words(t.column("n_words")))


def pipeline(data: Path, out: Path) -> dict[str, Any]:
    """``read_parquet -> map_batches -> filter``; hashes to the driver; first of each kept."""
    import numpy as np
    import pyarrow as pa

    from adapters.text_chain import first_of_each, input_files

    with _ray("rp") as ray:
        info: dict[str, Any] = {"versions": {"ray": ray.__version__}}
        t0 = time.perf_counter()
        ray.data.range(8, override_num_blocks=2).map_batches(lambda b: b).materialize()  # warm-up
        info["startup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        ds = (
            ray.data.read_parquet(input_files(data))
            .map_batches(_clean, batch_format="pyarrow")
            .materialize()
        )
        keys = pa.concat_tables(
            ray.get(ds.select_columns(["id", "h1", "h2"]).to_arrow_refs())
        ).sort_by("id")
        ids = keys.column("id").to_numpy()
        keep_ids = np.sort(
            ids[first_of_each(keys.column("h1").to_numpy(), keys.column("h2").to_numpy())]
        )

        def keep_first(batch: Any) -> Any:
            m = np.isin(batch.column("id").to_numpy(), keep_ids, assume_unique=True)
            return batch.filter(pa.array(m)).drop_columns(["n_words", "h1", "h2"])

        ds.map_batches(keep_first, batch_format="pyarrow").write_parquet(
            str(out), compression="zstd"
        )
        info["wall_s"] = time.perf_counter() - t0
    return info
