"""Dask: ``LocalCluster`` of 2 single-threaded workers on 127.0.0.1; the cleaning pipeline."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

__all__ = ["pipeline"]


def _part(df: Any) -> Any:
    import pandas as pd
    import pyarrow as pa

    from adapters.text_chain import clean_and_hash, keep_words

    t = clean_and_hash(pa.Table.from_pandas(df, preserve_index=False))
    t = t.filter(keep_words(t.column("n_words"))).drop_columns(["n_words"])
    return t.to_pandas(
        types_mapper={
            pa.string(): pd.StringDtype("pyarrow"),
            pa.large_string(): pd.StringDtype("pyarrow"),
        }.get
    )


def pipeline(data: Path, out: Path) -> dict[str, Any]:
    """``read_parquet -> map_partitions -> drop_duplicates(subset=hash) -> to_parquet``."""
    import dask
    import dask.dataframe as dd
    import distributed
    import pandas as pd
    from distributed import Client, LocalCluster

    from adapters.text_chain import CORES, input_files

    info: dict[str, Any] = {
        "versions": {"dask": dask.__version__, "distributed": distributed.__version__}
    }
    t0 = time.perf_counter()
    cluster = LocalCluster(
        n_workers=CORES,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    client = Client(cluster)
    try:
        client.submit(abs, -1).result()
        info["startup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        meta = pd.DataFrame(
            {
                "id": pd.Series([], dtype="int64"),
                "text": pd.Series([], dtype=pd.StringDtype("pyarrow")),
                "h1": pd.Series([], dtype="uint64"),
                "h2": pd.Series([], dtype="uint64"),
            }
        )
        ddf = dd.read_parquet(input_files(data)).map_partitions(_part, meta=meta)
        ddf = ddf.drop_duplicates(subset=["h1", "h2"], keep="first").drop(columns=["h1", "h2"])
        ddf.to_parquet(str(out), compression="zstd", write_index=False)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        client.close()
        cluster.close()
    return info
