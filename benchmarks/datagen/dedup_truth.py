"""Exact near-duplicate truth for the dedup benchmark, computed once and cached.

All pairs with Jaccard >= threshold of the reference shingle sets, found exactly by prefix
filtering (AllPairs, Bayardo et al. 2007: each set's ``|s| - ceil(t |s|) + 1`` rarest
shingles; two sets with J >= t share one of them) plus a length filter, then the exact
Jaccard of every candidate. Pairs reported by the systems and the planted pairs are
verified too (a true pair prefix filtering missed is added and counted: it should be 0).
Per connected component of size ``k`` of the true graph, ``k - 1`` documents should go.
Precision: share of removed documents with a partner at J >= t; recall: sum over
components of ``min(removed in it, k - 1)`` over the sum of ``k - 1``.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from adapters.shingling import read_docs, shingles

__all__ = ["Truth"]


class Truth:
    """Exact Jaccard >= ``threshold`` pairs of the documents under ``data``."""

    def __init__(self, data: Path, ngram: int, threshold: float) -> None:
        self.pairs: dict[tuple[int, int], float]
        ids, texts = read_docs(data)
        if ids != list(range(len(ids))):
            raise RuntimeError(f"{data}: document ids are not 0..n-1 in order")
        self.n = len(ids)
        self.t: float = threshold
        self.sets = [
            np.unique(np.fromiter((hash(s) for s in shingles(x, ngram)), np.int64)) for x in texts
        ]
        cache = data / f"truth-{ngram}-{threshold}.json"
        if cache.exists():
            c = json.loads(cache.read_text())
            self.pairs = {(u, v): j for u, v, j in c["pairs"]}
            self.stats = c["stats"]
        else:
            t0 = time.perf_counter()
            self.pairs, self.stats = self._all_pairs()
            self.stats["seconds"] = time.perf_counter() - t0
            cache.write_text(
                json.dumps(
                    {
                        "pairs": [[u, v, j] for (u, v), j in sorted(self.pairs.items())],
                        "stats": self.stats,
                    }
                )
            )
        self.extra_checked = 0
        self.added_by_crosscheck = 0

    def jaccard(self, u: int, v: int) -> float:
        """The exact Jaccard similarity of documents ``u`` and ``v``."""
        a, b = self.sets[u], self.sets[v]
        if len(a) == 0 and len(b) == 0:
            return 1.0
        inter = np.intersect1d(a, b, assume_unique=True).size
        return inter / (len(a) + len(b) - inter)

    def _prefix_groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """(shingle rank, doc) of every prefix shingle sorted by rank; group bounds; sizes."""
        sizes = np.array([len(s) for s in self.sets], dtype=np.int64)
        flat = np.concatenate(self.sets) if self.sets else np.zeros(0, np.int64)
        doc = np.repeat(np.arange(self.n), sizes)
        uniq, inv, cnt = np.unique(flat, return_inverse=True, return_counts=True)
        rank_of = np.empty(len(uniq), np.int64)
        rank_of[np.lexsort((uniq, cnt))] = np.arange(len(uniq))  # rarest first
        rank = rank_of[inv]
        order = np.lexsort((rank, doc))
        rank, doc = rank[order], doc[order]
        starts = np.concatenate([[0], np.cumsum(sizes)])[:-1]
        pos = np.arange(len(rank)) - starts[doc]
        plen = sizes - np.ceil(self.t * sizes - 1e-9).astype(np.int64) + 1
        m = pos < plen[doc]
        pr, pd = rank[m], doc[m]
        o = np.lexsort((pd, pr))
        pr, pd = pr[o], pd[o]
        bounds = np.concatenate([[0], np.nonzero(np.diff(pr))[0] + 1, [len(pr)]])
        return pd, bounds, sizes, uniq, len(uniq)

    def _all_pairs(self) -> tuple[dict[tuple[int, int], float], dict[str, Any]]:
        pd, bounds, sizes, _, distinct = self._prefix_groups()
        cand: set[tuple[int, int]] = set()
        big = 0
        for s, e in itertools.pairwise(bounds):
            if e - s < 2:
                continue
            g = pd[s:e].tolist()
            big = max(big, len(g))
            for i in range(len(g)):
                for j in range(i + 1, len(g)):
                    u, v = g[i], g[j]
                    lo, hi = (sizes[u], sizes[v]) if sizes[u] <= sizes[v] else (sizes[v], sizes[u])
                    if lo >= self.t * hi - 1e-9:
                        cand.add((u, v) if u < v else (v, u))
        pairs: dict[tuple[int, int], float] = {}
        for u, v in cand:
            jac = self.jaccard(u, v)
            if jac >= self.t:
                pairs[(u, v)] = jac
        return pairs, {
            "candidates": len(cand),
            "largest_prefix_group": big,
            "true_pairs": len(pairs),
            "distinct_shingles": int(distinct),
        }

    def crosscheck(self, pairs: list[list[int]]) -> None:
        """Verify pairs reported elsewhere; add any true pair prefix filtering missed."""
        for u, v in pairs:
            u, v = (int(u), int(v)) if u < v else (int(v), int(u))
            if u == v or (u, v) in self.pairs:
                continue
            self.extra_checked += 1
            j = self.jaccard(u, v)
            if j >= self.t:
                self.pairs[(u, v)] = j
                self.added_by_crosscheck += 1

    def finish(self) -> None:
        """Connected components of the true graph (call after every cross-check)."""
        from scipy import sparse
        from scipy.sparse.csgraph import connected_components

        uv = np.array(sorted(self.pairs), dtype=np.int64).reshape(-1, 2)
        g = sparse.coo_matrix((np.ones(len(uv)), (uv[:, 0], uv[:, 1])), shape=(self.n, self.n))
        _, self.labels = connected_components(g, directed=False)
        self.comp_size = np.bincount(self.labels)
        self.has_partner = np.zeros(self.n, bool)
        self.has_partner[uv.ravel()] = True
        self.should_remove = int((self.comp_size[self.comp_size > 1] - 1).sum())

    def score(self, removed: list[int]) -> tuple[float | None, float | None]:
        """(precision, recall) of removing ``removed``."""
        r = np.asarray(sorted(set(removed)), dtype=np.int64)
        precision = float(self.has_partner[r].mean()) if len(r) else None
        per_comp = np.bincount(self.labels[r], minlength=len(self.comp_size))
        hit = np.minimum(per_comp, np.maximum(self.comp_size - 1, 0)).sum()
        recall = float(hit / self.should_remove) if self.should_remove else None
        return precision, recall

    def report(self) -> dict[str, Any]:
        """The truth's statistics for the results JSON."""
        return {
            **self.stats,
            "true_pairs_final": len(self.pairs),
            "should_remove": self.should_remove,
            "docs_with_partner": int(self.has_partner.sum()),
            "crosscheck_pairs_verified": self.extra_checked,
            "crosscheck_pairs_added": self.added_by_crosscheck,
        }
