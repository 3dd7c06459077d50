"""Cut an operator chain into stages at every dedup operator, and say how heavy its
heaviest operator is (:func:`work_per_byte`, which sizes tasks and picks where small runs go).

Stage ``k`` applies the keep-mask of the dedup that ends stage ``k - 1`` (none for the
first stage), then its own mappers and filters, and either ends with a dedup (its rows
and the dedup's keys are kept for the decision) or writes the output (the last stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardwise.ops.operators import Op

__all__ = ["Stage", "op_names", "plan_stages", "work_per_byte"]


@dataclass(frozen=True)
class Stage:
    """One stage of a pipeline.

    Attributes:
        index: position of the stage (0 first).
        ops: mappers and filters, with their unique names.
        names: unique name of each op (``name``, ``name#2``, ... for repeats).
        dedup: the dedup operator that ends the stage (None: the last stage).
        dedup_name: its unique name ("" for the last stage).
        after: unique name of the dedup whose keep-mask starts the stage ("" for stage 0).
    """

    index: int
    ops: tuple[Op, ...]
    names: tuple[str, ...]
    dedup: Op | None
    dedup_name: str
    after: str

    @property
    def last(self) -> bool:
        return self.dedup is None


def op_names(ops: Sequence[Op]) -> list[str]:
    """Unique names: the operator's name, then ``name#2``, ``name#3`` for repeats."""
    seen: dict[str, int] = {}
    out = []
    for op in ops:
        seen[op.name] = seen.get(op.name, 0) + 1
        out.append(op.name if seen[op.name] == 1 else f"{op.name}#{seen[op.name]}")
    return out


def plan_stages(ops: Sequence[Op]) -> list[Stage]:
    """The stages of ``ops`` (at least one)."""
    names = op_names(ops)
    stages: list[Stage] = []
    current: list[tuple[Op, str]] = []
    after = ""
    for op, name in zip(ops, names):
        if op.kind != "dedup":
            current.append((op, name))
            continue
        stages.append(_stage(len(stages), current, op, name, after))
        current, after = [], name
    stages.append(_stage(len(stages), current, None, "", after))
    return stages


def _stage(index: int, ops: list[tuple[Op, str]], dedup: Op | None, name: str, after: str) -> Stage:
    return Stage(index, tuple(o for o, _ in ops), tuple(n for _, n in ops), dedup, name, after)


def work_per_byte(ops: Sequence[Op]) -> float:
    """The CPU work per input byte of the heaviest of ``ops``, reading and writing being
    1.0 (a dedup operator says its own: :attr:`~shardwise.ops.dedup.DedupOp.work_per_byte`)."""
    dedups = [op.dedup for op in ops if op.kind == "dedup" and op.dedup is not None]
    return max([1.0, *(d.work_per_byte for d in dedups)])
