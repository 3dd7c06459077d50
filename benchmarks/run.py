#!/usr/bin/env python
"""Run the benchmarks: every ``benchmarks/bench_<name>.py``, or only the named ones.

    .venv/bin/python benchmarks/run.py                  # all of them
    .venv/bin/python benchmarks/run.py parallel --quick # bench_parallel.py, smoke run

Each script runs as a subprocess of this interpreter with its output streamed as it
comes. Names come first; everything from the first option on (e.g. ``--quick``,
``--repeats 5``) is passed on to every script.
Results are the scripts' own business (they write ``benchmarks/results/<name>.json``).
Exits non-zero if any script failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def available() -> dict[str, Path]:
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip())
        print("\navailable:", " ".join(available()) or "(none)")
        return 0
    first_opt = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, flags = argv[:first_opt], argv[first_opt:]
    scripts = available()
    wanted = [n.removesuffix(".py").removeprefix("bench_") for n in names] or list(scripts)
    unknown = [n for n in wanted if n not in scripts]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(scripts)}",
            file=sys.stderr,
        )
        return 2
    failed = []
    for name in wanted:
        print(f"=== {name}: {scripts[name].name} {' '.join(flags)}".rstrip(), flush=True)
        t0 = time.perf_counter()
        code = subprocess.call([sys.executable, str(scripts[name]), *flags], cwd=HERE.parent)
        print(f"=== {name}: exit {code} in {time.perf_counter() - t0:.1f} s", flush=True)
        if code != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
