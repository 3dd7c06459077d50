"""The command line every benchmark shares, and the worker's hidden entry."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from harness.runner import System, worker_main

__all__ = ["base_parser", "chosen", "maybe_worker"]


def base_parser(doc: str | None, quick_help: str) -> argparse.ArgumentParser:
    """A parser with ``--quick``, ``--only``, ``--repeats``, ``--timeout``, ``--idle-wait``.

    ``--only`` takes names separated by spaces or commas (``--only a b`` or ``--only a,b``).
    """
    ap = argparse.ArgumentParser(description=(doc or "").strip().split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these systems")
    ap.add_argument("--repeats", type=int, help="rounds; the median of the runs is kept")
    ap.add_argument("--timeout", type=float, help="seconds per system run")
    ap.add_argument(
        "--idle-wait",
        type=float,
        metavar="SECONDS",
        help="before each run, wait up to this long for the machine to be quiet",
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-kwargs", default="{}", help=argparse.SUPPRESS)
    return ap


def chosen(
    ap: argparse.ArgumentParser,
    only: Sequence[str] | None,
    known: Sequence[str],
    always: Sequence[str] = (),
) -> list[str]:
    """The names ``--only`` asks for (all of ``known`` without it), in ``known`` order."""
    if not only:
        return list(known)
    wanted = {n for arg in only for n in arg.split(",") if n} | set(always)
    unknown = sorted(wanted - set(known))
    if unknown:
        ap.error(f"unknown names {unknown}; known: {', '.join(known)}")
    return [n for n in known if n in wanted]


def maybe_worker(args: argparse.Namespace, systems: dict[str, System]) -> int | None:
    """Run the worker side when ``--worker`` was given; None otherwise."""
    if not args.worker:
        return None
    kwargs: dict[str, Any] = json.loads(args.worker_kwargs)
    return worker_main(systems[args.worker], **kwargs)
