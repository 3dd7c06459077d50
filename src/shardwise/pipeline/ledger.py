"""The row ledger: where every input row of a task (or a whole run) went.

``rows_in = rows_out + dropped (per operator and reason) + quarantined`` holds per task
and, since ledgers add up, for the run. A ledger travels as plain JSON in task manifests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_EXAMPLES", "Ledger"]

MAX_EXAMPLES = 20  # quarantined records kept as examples (file, place, reason)


@dataclass
class Ledger:
    """Counts of one task or of a whole run.

    Attributes:
        rows_in: records read (bad ones included).
        rows_out: rows written (or handed to the next stage).
        dropped: ``{operator: {reason: rows}}``.
        quarantined: bad records skipped under ``on_error="skip"``.
        examples: up to :data:`MAX_EXAMPLES` quarantined records as ``[file, place, reason]``.
        tokens_in: token ids the operators made (``tokenize``; see :mod:`shardwise._tokens`).
        tokens_out: token ids in the rows written; the rest went with dropped rows.
    """

    rows_in: int = 0
    rows_out: int = 0
    dropped: dict[str, dict[str, int]] = field(default_factory=dict)
    quarantined: int = 0
    examples: list[list[str]] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0

    def drop(self, op: str, reason: str, rows: int) -> None:
        """Count ``rows`` dropped by ``op`` for ``reason``."""
        if rows:
            by_reason = self.dropped.setdefault(op, {})
            by_reason[reason] = by_reason.get(reason, 0) + rows

    def quarantine(self, count: int, examples: Iterable[Iterable[str]]) -> None:
        """Count ``count`` quarantined records, keeping the first examples."""
        self.quarantined += count
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend([list(e) for e in examples][:room])

    def add(self, other: Ledger) -> None:
        """Add another task's counts to these."""
        self.rows_in += other.rows_in
        self.rows_out += other.rows_out
        for op, reasons in other.dropped.items():
            for reason, n in reasons.items():
                self.drop(op, reason, n)
        self.quarantine(other.quarantined, other.examples)
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out

    @property
    def dropped_total(self) -> int:
        return sum(sum(r.values()) for r in self.dropped.values())

    @property
    def unaccounted(self) -> int:
        """Rows neither written, dropped nor quarantined (0 unless something is wrong)."""
        return self.rows_in - self.rows_out - self.dropped_total - self.quarantined

    def to_json(self) -> dict[str, Any]:
        """Plain JSON; the token counts only when the run made tokens."""
        out: dict[str, Any] = {
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "dropped": self.dropped,
            "quarantined": self.quarantined,
            "quarantine_examples": self.examples,
        }
        if self.tokens_in or self.tokens_out:
            out.update(tokens_in=self.tokens_in, tokens_out=self.tokens_out)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        return cls(
            int(data["rows_in"]),
            int(data.get("rows_out", 0)),
            {op: dict(r) for op, r in data["dropped"].items()},
            int(data["quarantined"]),
            [list(e) for e in data.get("quarantine_examples", [])],
            int(data.get("tokens_in", 0)),
            int(data.get("tokens_out", 0)),
        )

    @classmethod
    def total(cls, ledgers: Iterable[Ledger]) -> Ledger:
        out = cls()
        for ledger in ledgers:
            out.add(ledger)
        return out

    def table(self, files: int | None = None) -> str:
        """The accounting as a plain-text table."""
        lines = [f"{'rows in':<40}{self.rows_in:>14,}"]
        for op, reasons in self.dropped.items():
            for reason, n in reasons.items():
                lines.append(f"{'  dropped ' + op + ': ' + reason:<40.40}{n:>14,}")
        lines.append(f"{'  quarantined (bad records)':<40}{self.quarantined:>14,}")
        lines.append(f"{'rows out':<40}{self.rows_out:>14,}")
        lines.append(f"{'unaccounted (must be 0)':<40}{self.unaccounted:>14,}")
        if self.tokens_in or self.tokens_out:
            gone = self.tokens_in - self.tokens_out
            lines.append(f"{'tokens in':<40}{self.tokens_in:>14,}")
            lines.append(f"{'  tokens in dropped rows':<40}{gone:>14,}")
            lines.append(f"{'tokens out':<40}{self.tokens_out:>14,}")
        if files is not None:
            lines.append(f"{'files':<40}{files:>14,}")
        return "\n".join(lines)
