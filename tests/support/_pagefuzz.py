"""Differential fuzz of the Parquet page reader's headers against Arrow, run as a script
under an address-space limit (``resource.setrlimit``) so that a decompression or an
allocation the headers talk it into fails here instead of swapping the machine.

Each case is a small pyarrow file of one ``fixed_size_list<float>`` column whose page
headers (and chunk) are damaged the ways a hostile writer would: fields of another
type, fields given twice or dropped, lists lengthened, sizes lied about, bytes after a
page, a second gzip member, a chunk past the end of the file. Arrow's
``ParquetFile.read_row_group`` is the reference: where it raises, the page reader must
decline; where it reads, the page reader gives the same column or declines. Anything
else the page reader raises is a failure. Prints a JSON summary on its last line.

    python _pagefuzz.py CASES SEED LIMIT_BYTES
"""

from __future__ import annotations

import copy
import json
import random
import resource
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _parquetcraft import (
    BINARY,
    BYTE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    STRUCT,
    TRUE,
    Crafted,
    craft,
    gzip_member,
)

from shardwise.formats.parquet._fixedlist import read_fixed_lists

STATS = {"arrow read": 0, "ours read": 0}
TYPES = [I16, I32, I64, TRUE, FALSE, BYTE, BINARY, STRUCT]


def _fields(fields: list[list[Any]], out: list[list[list[Any]]]) -> None:
    """Every struct's field list under ``fields`` (itself included)."""
    out.append(fields)
    for f in fields:
        if f[1] == STRUCT:
            _fields(f[2], out)


def _value(t: int, rng: random.Random) -> Any:
    if t in (TRUE, FALSE):
        return t == TRUE
    if t == BINARY:
        return bytes(rng.randrange(4))
    if t == STRUCT:
        return []
    return rng.choice([0, 1, -1, 503, 2**31 - 1, 2**31, -(2**31) - 1, 2**40])


def _a_field(c: Crafted, rng: random.Random) -> tuple[list[list[Any]], int]:
    header = rng.choice(c.pages)[0]
    structs: list[list[list[Any]]] = []
    _fields(header, structs)
    fields = rng.choice([s for s in structs if s] or [header])
    return fields, rng.randrange(len(fields))


def retype(c: Crafted, rng: random.Random) -> str:
    fields, i = _a_field(c, rng)
    t = rng.choice([t for t in TYPES if t != fields[i][1]])
    fields[i][1:] = [t, _value(t, rng)]
    return f"field {fields[i][0]} made type {t}"


def duplicate(c: Crafted, rng: random.Random) -> str:
    fields, i = _a_field(c, rng)
    twin = copy.deepcopy(fields[i])
    if twin[1] in (I16, I32, I64) and rng.random() < 0.5:
        twin[2] = _value(I32, rng)
    fields.insert(i + rng.randrange(2), twin)
    return f"field {twin[0]} given twice"


def drop(c: Crafted, rng: random.Random) -> str:
    fields, i = _a_field(c, rng)
    return f"field {fields.pop(i)[0]} dropped"


def lengthen(c: Crafted, rng: random.Random) -> str:
    header = rng.choice(c.pages)[0]
    n = rng.choice([0, 14, 15, 300, 5000, 1_000_000, 1_000_001])
    et = rng.choice([BYTE, I32, BINARY, TRUE])
    item = {BYTE: 7, I32: 5, BINARY: b"", TRUE: True}[et]
    if n > 5000 and et != BYTE:
        n = 5000
    pad = rng.choice([[99, LIST, (et, [item] * n)], [99, BINARY, bytes(rng.choice([1, 4096]))]])
    header.insert(rng.randrange(len(header) + 1), pad)
    header.sort(key=lambda f: f[0]) if rng.random() < 0.5 else None
    return f"a list of {n} of type {et} or padding added"


def lie(c: Crafted, rng: random.Random) -> str:
    header = rng.choice(c.pages)[0]
    sizes = [f for f in header if f[0] in (2, 3)]
    subs = [g for f in header if f[1] == STRUCT for g in f[2] if g[0] in (1, 3, 5, 6)]
    ints = [f for f in sizes + subs if f[1] in (I16, I32, I64)]
    if not ints:
        return "nothing to lie about"
    target = rng.choice(ints)
    old = target[2]
    target[2] = rng.choice([old + 1, old - 1, old * 2, old + 4096, 503, 0, 2**31 - 1, 1662])
    return f"field {target[0]} {old} -> {target[2]}"


def trail(c: Crafted, rng: random.Random) -> str:
    i = rng.randrange(len(c.pages))
    header, body = c.pages[i]
    more = (
        gzip_member(bytes(rng.randrange(64)))
        if c.codec == "GZIP" and rng.random() < 0.5
        else bytes(rng.randrange(1, 9))
    )
    size = [f for f in header if f[0] == 3 and f[1] in (I16, I32, I64)]
    if size and rng.random() < 0.8:
        size[0][2] += len(more)
    c.pages[i] = (header, body + more)
    return f"{len(more)} bytes after page {i}"


def past_eof(c: Crafted, rng: random.Random) -> str:
    c.past_eof = rng.choice([1, 8, 100, 10_000, 2**31])
    if rng.random() < 0.3:
        c.extra = bytes(rng.randrange(1, 32))
    return f"chunk {c.past_eof} bytes longer than its pages"


MUTATIONS: list[Callable[[Crafted, random.Random], str]] = [
    retype,
    duplicate,
    drop,
    lengthen,
    lie,
    trail,
    past_eof,
]


def _base(rng: random.Random) -> Crafted:
    return craft(
        rows=rng.choice([1, 7, 64, 300]),
        k=rng.choice([1, 4, 16]),
        codec=rng.choice(["snappy", "gzip", "zstd", "none"]),
        version=rng.choice(["1.0", "2.0"]),
        use_dictionary=rng.random() < 0.5,
        data_page_size=rng.choice([256, 1 << 20]),
    )


def one(seed: int) -> dict[str, Any] | None:
    """Case ``seed``: None when the page reader kept the contract, else what broke it."""
    rng = random.Random(seed)
    c = _base(rng)
    done = [rng.choice(MUTATIONS)(c, rng) for _ in range(rng.choice([1, 1, 2, 3]))]
    try:
        data = c.build()
        pf = pq.ParquetFile(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError, IndexError, OverflowError):
        return None  # a footer Arrow refuses: nothing to compare
    try:
        want: Any = pf.read_row_group(0, use_threads=False).column("emb").combine_chunks()
    except (pa.ArrowException, OSError, MemoryError) as exc:
        want = exc
    try:
        got = read_fixed_lists(pf, pa.BufferReader(data), 0, ["emb"]).get("emb")
    except BaseException:
        return {"seed": seed, "damage": done, "raised": traceback.format_exc(limit=4)}
    STATS["arrow read"] += not isinstance(want, Exception)
    STATS["ours read"] += got is not None
    if got is None or (not isinstance(want, Exception) and got.equals(want)):
        return None
    return {"seed": seed, "damage": done, "arrow": repr(want)[:200], "ours": "a column"}


def main() -> None:
    cases, seed, limit = (int(a) for a in sys.argv[1:4])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    failures = [f for f in (one(seed + i) for i in range(cases)) if f is not None]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    summary = {"cases": cases, "failed": len(failures), "peak_rss": peak, **STATS}
    print(json.dumps({**summary, "failures": failures[:20]}))


if __name__ == "__main__":
    main()
