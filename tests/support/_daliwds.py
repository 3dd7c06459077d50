"""WebDataset tar shards of small JPEG images with labels, and a DALI pipeline that
reads them through ``shardwise.integrations.dali`` (for the DALI tests and the example).

Sample ``i`` holds an 8x8 JPEG whose colour encodes ``i`` and ``cls`` = ``str(i)``.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import numpy as np


def jpeg(i: int) -> bytes:
    from PIL import Image

    colour = (i * 37 % 256, i * 11 % 256, i % 256)
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def make_shards(root: Path, sizes: list[int]) -> int:
    """Write one tar per entry of ``sizes`` (samples in it); returns the total."""
    root.mkdir(parents=True, exist_ok=True)
    i = 0
    for s, n in enumerate(sizes):
        with tarfile.open(root / f"shard-{s:04d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for _ in range(n):
                for ext, data in (("jpg", jpeg(i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"s{i:06d}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
                i += 1
    return i


def build_pipeline(src: Any) -> Any:
    """A CPU-only DALI pipeline: ``K`` parallel sources, images decoded, labels passed through.

    Outputs per source: the decoded image and the label bytes."""
    from nvidia.dali import fn, pipeline_def

    @pipeline_def(
        batch_size=src.per_worker,
        num_threads=1,
        device_id=None,
        py_num_workers=src.num_workers,
        py_start_method="spawn",
        prefetch_queue_depth=2,
    )
    def pipe() -> tuple[Any, ...]:
        outs: list[Any] = []
        for jpg, cls in src.external_sources():
            outs += [fn.decoders.image(jpg, device="cpu"), cls]
        return tuple(outs)

    p = pipe()
    p.build()
    return p


def label(sample: Any) -> int:
    return int(bytes(np.asarray(sample)).decode())


def run_epoch(pipe: Any, src: Any) -> dict[str, Any]:
    """One epoch: labels per source per iteration, merged batches, iteration count."""
    per_source: list[list[list[int]]] = [[] for _ in range(src.num_workers)]
    merged: list[int] = []
    iterations = 0
    try:
        while True:
            out = pipe.run()
            for k in range(src.num_workers):
                images, labels = out[2 * k], out[2 * k + 1]
                per_source[k].append([label(t) for t in labels])
                assert all(np.asarray(img).shape == (8, 8, 3) for img in images)
            _, merged_labels = src.merge(out)
            merged.extend(label(t) for t in merged_labels)
            iterations += 1
    except StopIteration:
        pipe.reset()
    return {"per_source": per_source, "merged": merged, "iterations": iterations}


def source_epoch(source: Any) -> list[list[int]]:
    """One ``iter()`` of a worker source (as DALI's worker runs it): batches of labels.

    Expects the columns ``["cls", "jpg"]``."""
    return [[label(x) for x in cls] for cls, _ in source]
