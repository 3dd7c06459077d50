"""WebDataset tar shards into NVIDIA DALI's parallel external source, split by (rank, worker).

For one rank, ``DaliInput`` gives one external source per DALI Python worker; each reads
its own shards and adds exactly ``per_worker`` samples to every batch, all of them stop
on the same iteration, and every rank runs the same number of iterations. ``merge`` joins
the workers' outputs into the rank's batch.

Run: ``python examples/dali_webdataset.py [PATH_OR_URL]`` (needs ``pip install
"shardwise[dali]"``; CPU only). Without a path it writes small shards of PNG images into a
temporary directory. In training each rank is its own process (``RANK``/``WORLD_SIZE``
from the launcher); here the ranks of a 2-rank job run one after the other to show that
together they see every sample exactly once per epoch.
"""

from __future__ import annotations

import argparse
import io
import struct
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from nvidia.dali import fn, pipeline_def

from shardwise.integrations.dali import DaliInput


def png(i: int, size: int = 16) -> bytes:
    """A small RGB PNG whose colour depends on ``i`` (no imaging library needed)."""
    pixel = bytes((i * 37 % 256, i * 11 % 256, i % 256))
    raw = b"".join(b"\x00" + pixel * size for _ in range(size))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def write_shards(root: Path, sizes: tuple[int, ...] = (40, 13, 57, 26, 31, 9)) -> int:
    """WebDataset shards of uneven sizes: ``<key>.png`` and ``<key>.cls`` per sample."""
    i = 0
    for s, n in enumerate(sizes):
        with tarfile.open(root / f"shard-{s:04d}.tar", "w") as tar:
            for _ in range(n):
                for ext, data in (("png", png(i)), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                i += 1
    return i


def make_pipeline(src: DaliInput) -> Any:
    """One rank's pipeline: a parallel source per DALI worker, images decoded on the CPU."""

    @pipeline_def(
        batch_size=src.per_worker,
        num_threads=2,
        device_id=None,
        py_num_workers=src.num_workers,
        py_start_method="spawn",
    )
    def pipe() -> tuple[Any, ...]:
        outputs: list[Any] = []
        for image, label in src.external_sources():
            outputs += [fn.resize(fn.decoders.image(image, device="cpu"), size=(8, 8)), label]
        return tuple(outputs)

    p = pipe()
    p.build()
    return p


def run_rank(path: str, rank: int, args: argparse.Namespace) -> tuple[list[list[int]], int]:
    """Labels this rank saw, per epoch, and the dataset's number of samples."""
    src = DaliInput(
        path,
        rank=rank,
        world_size=args.ranks,
        num_workers=args.workers,
        per_worker=args.per_worker,
        columns=[args.image, "cls"],
        seed=0,
    )
    pipe = make_pipeline(src)
    seen = []
    for epoch in range(args.epochs):
        labels, iterations = [], 0
        while True:
            try:
                outputs = pipe.run()
            except StopIteration:
                pipe.reset()  # the next iteration starts the next epoch
                break
            images, label_bytes = src.merge(outputs)
            assert len(label_bytes) == src.batch_size  # num_workers x per_worker, every batch
            labels += [int(bytes(np.asarray(x))) for x in label_bytes]
            iterations += 1
        print(
            f"rank {rank} epoch {epoch}: {iterations} iterations of {src.batch_size} "
            f"({args.workers} workers x {args.per_worker}), images {images.shape[1:]}"
        )
        seen.append(labels)
    return seen, int(src.dataset.counts.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("path", nargs="?", help="WebDataset shards: directory, glob or s3:// URL")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="DALI py_num_workers per rank")
    parser.add_argument("--per-worker", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--image", default="png", help="the image field of the shards")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.path
        if path is None:
            path = tmp
            print(f"wrote {write_shards(Path(tmp))} samples into {tmp}")
        runs = [run_rank(path, rank, args) for rank in range(args.ranks)]
        per_rank, total = [seen for seen, _ in runs], runs[0][1]
        for epoch in range(args.epochs):
            labels = [x for rank in per_rank for x in rank[epoch]]
            print(
                f"epoch {epoch}: {len(labels)} samples, each once: "
                f"{len(labels) == len(set(labels))}, "
                f"left out by drop_last: {total - len(set(labels))} of {total}"
            )
        orders_differ = args.epochs > 1 and per_rank[0][0] != per_rank[0][1]
        print(f"a new order each epoch: {orders_differ}")


if __name__ == "__main__":
    sys.exit(main())
