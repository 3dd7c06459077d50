"""Is every canonical grid's global batch splittable so that every divisor's ranks hold each
source's share to within one sample? An integer program (scipy's HiGHS) and the planner's
own split, over every extras vector of the given grid sizes and source counts.

A global batch of ``C`` inner ranks of ``g`` samples takes ``G_s`` of source ``s``; inner
rank ``j`` takes ``floor(G_s / C) + y[j, s]``, ``y`` in {0, 1}, so only the extras
``r_s = G_s mod C`` matter (each below ``C``, their sum ``e * C``): ``y`` has column sums
``r``, row sums ``e``, and for every divisor ``N`` of ``C`` each of the ``N`` blocks of
``C / N`` consecutive rows holds ``floor(r_s / N)`` or ``ceil(r_s / N)`` of column ``s``.
Any ``g`` and any number of batches reduce to these instances.

    PYTHONPATH=src python tools/strata_grid.py 6,12,18 2,3,4          # both checks
    PYTHONPATH=src python tools/strata_grid.py 24,30 3,4 --no-ilp     # the planner only
    PYTHONPATH=src python tools/strata_grid.py 6,12 2,3,4 --vertices  # is the LP integral?

``--vertices`` looks for a fractional vertex of the linear relaxation (simplex vertices
for 30 random objectives per instance): none for two sources (the system is then
intervals, totally unimodular), some for three or more on ``C=12`` (not totally
unimodular: integer solutions exist there without the relaxation promising them).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterator

import numpy as np

from shardwise.plan.grid_split import holds, split_extras


def extras_vectors(c: int, k: int) -> Iterator[tuple[int, ...]]:
    """Every multiset of ``k`` non-zero extras below ``c`` whose sum is a multiple of ``c``
    (zeros and the order of sources change nothing)."""
    for r in itertools.combinations_with_replacement(range(1, c), k):
        if sum(r) % c == 0:
            yield r


def _system(c: int, r: tuple[int, ...]) -> tuple[object, list[int], list[int]]:
    """The constraints of the module doc: a sparse matrix and each row's bounds."""
    from scipy.sparse import lil_matrix

    k, e = len(r), sum(r) // c
    divisors = [n for n in range(1, c) if c % n == 0]
    a = lil_matrix((c + k * sum(divisors), c * k))
    lo, hi = [e] * c, [e] * c
    for j in range(c):
        for s in range(k):
            a[j, j * k + s] = 1
    row = c
    for s, n in itertools.product(range(k), divisors):
        m = c // n
        for i in range(n):
            for j in range(i * m, (i + 1) * m):
                a[row, j * k + s] = 1
            lo.append(r[s] // n)
            hi.append(-(-r[s] // n))
            row += 1
    return a.tocsr(), lo, hi


def ilp_feasible(c: int, r: tuple[int, ...]) -> bool:
    """Whether the integer program of the module doc has a solution (scipy, HiGHS)."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    a, lo, hi = _system(c, r)
    k = len(r)
    res = milp(
        np.zeros(c * k),
        constraints=LinearConstraint(a, lo, hi),
        integrality=np.ones(c * k),
        bounds=Bounds(0, 1),
    )
    return bool(res.status == 0)


def fractional_vertex(c: int, r: tuple[int, ...], tries: int = 30) -> np.ndarray | None:
    """A vertex of the linear relaxation that is not integral, if simplex finds one."""
    from scipy.optimize import linprog

    a, lo, hi = _system(c, r)
    dense, lo_a, hi_a = a.toarray(), np.asarray(lo), np.asarray(hi)  # type: ignore[attr-defined]
    eq = lo_a == hi_a
    a_ub, b_ub = np.vstack([dense[~eq], -dense[~eq]]), np.concatenate([hi_a[~eq], -lo_a[~eq]])
    rng = np.random.default_rng(0)
    for _ in range(tries):
        res = linprog(
            rng.normal(size=dense.shape[1]),
            A_ub=a_ub,
            b_ub=b_ub,
            A_eq=dense[eq],
            b_eq=lo_a[eq],
            bounds=(0, 1),
            method="highs-ds",
        )
        if res.status == 0 and np.abs(res.x - np.round(res.x)).max() > 1e-6:
            return np.asarray(res.x).reshape(c, len(r))
    return None


def vertices(c: int, k: int) -> None:
    """Print how many extras vectors have a fractional vertex, and the first one."""
    found = [(r, x) for r in extras_vectors(c, k) if (x := fractional_vertex(c, r)) is not None]
    print(
        f"C={c} k={k}: {len(found)} of {len(list(extras_vectors(c, k)))} extras vectors have a "
        "fractional vertex",
        flush=True,
    )
    if found:
        print(f"  {found[0][0]}: {np.round(found[0][1], 2).tolist()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grids", help="grid sizes C, comma-separated")
    ap.add_argument("sources", help="source counts k, comma-separated")
    ap.add_argument("--no-ilp", action="store_true", help="check the planner's split only")
    ap.add_argument("--vertices", action="store_true", help="look for fractional vertices")
    args = ap.parse_args()
    for c in (int(x) for x in args.grids.split(",")):
        for k in (int(x) for x in args.sources.split(",")):
            if args.vertices:
                vertices(c, k)
                continue
            start, n, infeasible, failed = time.time(), 0, [], []
            for r in extras_vectors(c, k):
                n += 1
                if not args.no_ilp and not ilp_feasible(c, r):
                    infeasible.append(r)
                y = split_extras(r, c)
                if y is None or not holds(y, np.asarray(r), c):
                    failed.append(r)
            ilp = "not run" if args.no_ilp else f"{len(infeasible)} infeasible {infeasible[:3]}"
            print(
                f"C={c} k={k}: {n} extras vectors; integer program: {ilp}; "
                f"planner split failed on {len(failed)} {failed[:3]} ({time.time() - start:.1f}s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
