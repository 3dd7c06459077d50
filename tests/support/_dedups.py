"""A user-defined dedup operator (importable by every engine's workers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shardwise.ops.dedup import DedupContext, DedupDecision, DedupOp


@dataclass(frozen=True)
class KeepFirstOfEachLength(DedupOp):
    """Keeps the first row of each text length (in input order); uses every service."""

    column: str = "text"

    def keys(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        return {
            "len": np.array([len(t or "") for t in batch.column(self.column).to_pylist()], np.int64)
        }

    def decide(self, ctx: DedupContext) -> DedupDecision:
        lengths = ctx.map(_lengths, [(ctx.keys, t) for t in range(ctx.num_tasks)], "lengths")
        seen: set[int] = set()
        masks = []
        for t, arr in enumerate(lengths):
            ctx.scratch.save(f"copy/t{t}.npy", arr)
            keep = np.zeros(len(arr), dtype=bool)
            for i, n in enumerate(ctx.scratch.load(f"copy/t{t}.npy").tolist()):
                keep[i] = n not in seen
                seen.add(n)
            masks.append(keep)
        removed = int(sum((~m).sum() for m in masks))
        audit = ctx.write_audit(pa.table({"removed": [removed]}))
        return DedupDecision(masks, {"removed": removed, "audit": audit, "stage": ctx.name})


def _lengths(arg: tuple[object, int]) -> np.ndarray:
    keys, t = arg
    return keys.load(t, ["len"]).get("len", np.zeros(0, np.int64))  # type: ignore[attr-defined, no-any-return]
