"""The 2 GB S3 benchmark's data, made once into a cache directory outside the repository.

Two data sets, both label-keyed and incompressible:

* ``tars/``: WebDataset shards of ``<key>.jpg`` (a real JPEG of 192x192 noise, about
  34 KB, padded after its end-of-image marker with random bytes to 90-110 KB: JPEG-sized,
  and it still decodes) and ``<key>.cls`` (the label as text), about 64 MB per shard;
* ``parquet/``: ``id`` int64, ``label`` int64 and ``emb`` ``fixed_size_list<float32>[768]``
  (random normal), about 64 MB per file, row groups of 4,096 rows.

A directory is reused while its ``meta.json`` names the same version and sizes, and its
files still add up to the recorded bytes (a half-deleted cache is made again). The peers'
conversions are kept beside the files, under ``conv/``.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import time
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_SUFFIXES",
    "DATA_VERSION",
    "EMB_DIM",
    "IMAGE_SIDE",
    "NUM_LABELS",
    "data_files",
    "generate",
    "tree_bytes",
]

DATA_VERSION = 1
NUM_LABELS = 1000
IMAGE_SIDE = 192
EMB_DIM = 768
SHARD_BYTES = 64 * 2**20
ROW_GROUP = 4096
DATA_SUFFIXES = (".tar", ".parquet")


def data_files(files: Path) -> list[Path]:
    """The data set's files in ``files`` (not an index a reader left there), sorted."""
    return sorted(f for f in files.iterdir() if f.is_file() and f.name.endswith(DATA_SUFFIXES))


def tree_bytes(files: Path) -> int:
    """Bytes of the data set's files in ``files``."""
    return sum(f.stat().st_size for f in data_files(files))


def _reusable(out: Path, **expected: Any) -> bool:
    meta_path = out / "meta.json"
    if not meta_path.exists():
        return False
    meta = json.loads(meta_path.read_text())
    if meta.get("version") != DATA_VERSION or any(meta.get(k) != v for k, v in expected.items()):
        return False
    return bool(tree_bytes(out / "files") == meta.get("bytes"))


def _jpeg(rng: Any, size: int) -> bytes:
    """A decodable JPEG of noise, padded with random bytes to ``size``."""
    from PIL import Image

    pixels = rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype="uint8")
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=90)
    pad = max(0, size - buf.tell())
    return buf.getvalue() + rng.bytes(pad)


def _add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    tf.addfile(info, io.BytesIO(data))


def _write_tars(out: Path, total_bytes: int, seed: int) -> int:
    """Shards of about ``SHARD_BYTES`` until ``total_bytes``; returns the samples."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True)
    key, written, shard = 0, 0, 0
    while written < total_bytes:
        path = out / f"shard-{shard:05d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
            while tf.fileobj is not None and tf.fileobj.tell() < SHARD_BYTES:
                _add(tf, f"{key:08d}.jpg", _jpeg(rng, int(rng.integers(90_000, 110_001))))
                _add(tf, f"{key:08d}.cls", str(int(rng.integers(NUM_LABELS))).encode())
                key += 1
        written += path.stat().st_size
        shard += 1
    return key


def _write_parquet(out: Path, total_bytes: int, seed: int) -> int:
    """Files of about ``SHARD_BYTES`` until ``total_bytes``; returns the rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    out.mkdir(parents=True)
    per_file = max(ROW_GROUP, SHARD_BYTES // (EMB_DIM * 4) // ROW_GROUP * ROW_GROUP)
    rows, written, i = 0, 0, 0
    while written < total_bytes:
        emb = rng.standard_normal((per_file, EMB_DIM), dtype=np.float32)
        table = pa.table(
            {
                "id": np.arange(rows, rows + per_file, dtype=np.int64),
                "label": rng.integers(0, NUM_LABELS, per_file, dtype=np.int64),
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), EMB_DIM),
            }
        )
        path = out / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=ROW_GROUP, compression="none")
        rows, written, i = rows + per_file, written + path.stat().st_size, i + 1
    return rows


def generate(root: Path, name: str, total_bytes: int, seed: int = 0) -> Path:
    """``root/name`` (``tars`` or ``parquet``) holding about ``total_bytes``, made if needed."""
    out = root / f"{name}-{total_bytes}"
    if _reusable(out, total_target=total_bytes):
        print(f"data: reusing {out}", flush=True)
        return out
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    print(f"data: writing {out} ({total_bytes / 2**30:.1f} GiB)", flush=True)
    write = _write_tars if name == "tars" else _write_parquet
    count = write(out / "files", total_bytes, seed)
    meta = {
        "version": DATA_VERSION,
        "total_target": total_bytes,
        "bytes": tree_bytes(out / "files"),
        "rows": count,
        "files": len(list((out / "files").iterdir())),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out
