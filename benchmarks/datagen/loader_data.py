"""The loader benchmark's data: label-sorted rows as Parquet files and WebDataset shards.

Two shapes, both sorted by label, in Parquet files whose row groups have random sizes
of 5k-40k rows:

* ``text``: ``id`` int64, ``label`` int64 (10 labels), ``text`` (random ASCII, 150-450
  bytes) and ``emb`` ``fixed_size_list<float32>[64]`` in 16 files; the same rows as 16
  tar shards (``<key>.json`` with id and label, ``<key>.txt``, ``<key>.npy``);
* ``emb``: ``id``, ``label`` and ``emb`` ``fixed_size_list<float32>[128]`` in 6 files,
  no text and no tar shards;
* ``tokens``: ``id``, ``label`` and ``tokens`` ``list<int32>`` of 512-4,096 token ids
  (uniform in a 50,000 vocabulary) in 4 files, a twentieth of the rows (row groups of
  250-2,000 rows);
* ``images``: ``id``, ``label`` and ``image`` binary values of 50-150 KB of random
  (incompressible) bytes in 4 files, a hundredth of the rows (row groups of 50-400 rows);
* ``image_structs``: the same images as ``{bytes, path}`` structs, the layout of Hugging
  Face's ``Image`` feature;
* ``heldout``: the shape issue 35 measured the first epoch on: id, label, text of 300-500
  bytes and ``emb`` ``fixed_size_list<float32>[32]`` in 5 files, one and a half times the
  rows, in row groups of 20k-90k rows (no tar shards).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.loader_common import EMB_DIM, NUM_LABELS

from datagen import DATA_ROOT
from datagen.reuse import fresh_dir, reusable

__all__ = ["DATA_VERSION", "SHAPES", "Shape", "generate"]

DATA_VERSION = 1  # bump when the generated data changes


@dataclass(frozen=True)
class Shape:
    """One shape of the loader data: its files, embedding width (0: none), its variable-size
    column (``text``, ``tokens``, ``image`` or none) and its rows per ``--rows`` row."""

    name: str
    files: int
    emb_dim: int
    text: bool
    payload: str | None = None
    row_div: int = 1
    struct: bool = False  # the payload as {bytes, path} structs
    row_mul: int = 1  # rows per --rows row: row_mul / row_div
    groups: tuple[int, int] | None = None  # row group sizes (None: 5k-40k / row_div)
    text_len: tuple[int, int] = (150, 450)
    tars: bool | None = None  # WebDataset shards too (default: the text shapes)

    def group_size(self, rng: Any) -> int:
        """A row group's rows, drawn from ``rng`` (the last of a file may have fewer)."""
        if self.groups is None:  # drawn as ever, so that the older shapes stay the same
            return int(rng.integers(5_000, 40_001)) // self.row_div
        return int(rng.integers(self.groups[0], self.groups[1] + 1))

    @property
    def writes_tars(self) -> bool:
        """Whether the shape's rows are also written as tar shards."""
        return self.text if self.tars is None else self.tars

    @property
    def columns(self) -> list[str]:
        """The columns every loader reads."""
        if self.text:
            return ["id", "label", "text", "emb"]
        return ["id", "label", *([self.payload] if self.payload else [])] + (
            ["emb"] if self.emb_dim else []
        )

    def rows_for(self, rows: int) -> int:
        """The shape's rows for a ``--rows`` of ``rows``."""
        return max(rows * self.row_mul // self.row_div, 1000)

    def directory(self, rows: int) -> Path:
        """Where data of ``rows`` rows of this shape lives."""
        return DATA_ROOT / (
            f"loader-{rows}" if self.name == "text" else f"loader-{self.name}-{rows}"
        )


SHAPES = {
    s.name: s
    for s in (
        Shape("text", 16, EMB_DIM, True, "text"),
        Shape("emb", 6, 128, False),
        Shape("tokens", 4, 0, False, "tokens", 20),
        Shape("images", 4, 0, False, "image", 100),
        Shape("image_structs", 4, 0, False, "image", 100, struct=True),
        Shape(
            "heldout",
            5,
            32,
            True,
            "text",
            2,
            row_mul=3,
            groups=(20_000, 90_000),
            text_len=(300, 500),
            tars=False,
        ),
    )
}


def generate(rows: int, seed: int = 0, shape: str = "text") -> Path:
    """Create (or reuse) the Parquet files (and WebDataset shards) of ``rows`` rows."""
    import numpy as np

    sh = SHAPES[shape]
    rows = sh.rows_for(rows)
    out = sh.directory(rows)
    if reusable(out, DATA_VERSION, rows=rows):
        return out
    fresh_dir(out, "parquet", *(["wds"] if sh.writes_tars else []))
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, sh.files + 1).astype(np.int64)
    plans = []
    for i in range(sh.files):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        sizes: list[int] = []
        left = hi - lo
        while left > 0:
            s = min(left, sh.group_size(rng))
            sizes.append(s)
            left -= s
        plans.append((i, lo, hi, sizes, seed * 1000 + i, rows, str(out), sh))
    # two processes: the files are independent
    import multiprocessing as mp

    with mp.get_context("fork").Pool(2) as pool:
        groups = pool.map(_write_file, plans)
    labels_hist = np.bincount(
        np.arange(rows, dtype=np.int64) * NUM_LABELS // rows, minlength=NUM_LABELS
    )
    meta = {
        "version": DATA_VERSION,
        "rows": rows,
        "shape": sh.name,
        "files": sh.files,
        "columns": sh.columns,
        "emb_dim": sh.emb_dim,
        "payload": sh.payload,
        "row_groups": int(sum(groups)),
        "label_hist": labels_hist.tolist(),
        "parquet_bytes": sum(p.stat().st_size for p in (out / "parquet").glob("*.parquet")),
        "wds_bytes": sum(p.stat().st_size for p in (out / "wds").glob("*.tar"))
        if sh.writes_tars
        else 0,
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(
        f"data: wrote {rows:,} rows to {out} in {meta['generate_s']:.1f} s "
        f"({meta['parquet_bytes'] / 2**20:.0f} MB parquet, {meta['row_groups']} row groups; "
        f"{meta['wds_bytes'] / 2**20:.0f} MB tar)",
        flush=True,
    )
    return out


def _rows(lo: int, hi: int, total: int, rng: Any, sh: Shape) -> Any:
    """The rows ``[lo, hi)`` of the data set as an Arrow table (label sorted)."""
    import numpy as np
    import pyarrow as pa

    n = hi - lo
    ids = np.arange(lo, hi, dtype=np.int64)
    labels = ids * NUM_LABELS // total  # sorted by label, equal label counts
    if sh.payload in ("tokens", "image"):
        values = _payload(n, rng, sh)
        if sh.struct:  # Hugging Face's Image layout: {bytes, path}
            paths = pa.array([f"{i}.jpg" for i in ids.tolist()])
            values = pa.StructArray.from_arrays([values, paths], names=["bytes", "path"])
        return pa.table({"id": ids, "label": labels, sh.payload: values}), None
    if not sh.text:
        emb = rng.standard_normal((n, sh.emb_dim), dtype=np.float32)
        return pa.table({"id": ids, "label": labels, "emb": _fixed(emb)}), emb
    lengths = rng.integers(sh.text_len[0], sh.text_len[1] + 1, n)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    alphabet = np.frombuffer(
        b"abcdefghijklmnopqrstuvwxyz      ABCDEFGHIJ0123456789.,", dtype=np.uint8
    )
    chars = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    text = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))
    emb = rng.standard_normal((n, sh.emb_dim), dtype=np.float32)  # drawn after the text, as ever
    return pa.table({"id": ids, "label": labels, "text": text, "emb": _fixed(emb)}), emb


def _payload(n: int, rng: Any, sh: Shape) -> Any:
    """``n`` token lists (512-4,096 int32 ids) or images (50-150 KB of random bytes)."""
    import numpy as np
    import pyarrow as pa

    token = sh.payload == "tokens"
    lengths = rng.integers(512, 4097, n) if token else rng.integers(50_000, 150_001, n)
    offsets = np.zeros(n + 1, dtype=np.int32 if token else np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if token:
        values = pa.array(rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32))
        return pa.ListArray.from_arrays(pa.array(offsets), values)
    data = rng.bytes(int(offsets[-1]))
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    ).cast(pa.binary())


def _fixed(emb: Any) -> Any:
    """A (rows, dim) float32 matrix as a fixed-size-list column."""
    import pyarrow as pa

    return pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), emb.shape[1])


def _write_file(plan: tuple[Any, ...]) -> int:
    import io
    import tarfile

    import numpy as np
    import pyarrow.parquet as pq

    i, lo, hi, sizes, seed, total, out, sh = plan
    rng = np.random.default_rng(seed)
    table, emb = _rows(lo, hi, total, rng, sh)
    with pq.ParquetWriter(os.path.join(out, "parquet", f"part-{i:02d}.parquet"), table.schema) as w:
        start = 0
        for s in sizes:
            w.write_table(table.slice(start, s), row_group_size=s)
            start += s
    if not sh.writes_tars:
        return len(sizes)
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
