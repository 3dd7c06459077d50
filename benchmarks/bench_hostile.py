"""Hostile Parquet files: what Arrow's read of them costs, and what shardwise's does.

Builds the gzip bomb of issue 33 (a file of about 1.5 MB whose one data page says, in
its header, 1,662 bytes uncompressed, and whose gzip stream inflates to 1.5 GiB of
zeros) and a page header padded to 16 MiB, then reads each in a fresh process, so
that its peak RSS is its own:

- ``arrow``: ``ParquetFile.read_row_group`` (the reference);
- ``shardwise``: the format's ``read_table`` (the page reader declines, Arrow reports);
- ``pages``: the page reader alone (``read_fixed_lists``), to show what it costs itself
  before it declines.

Each line: the case, the reader, the wall time of the read, the RSS before it (Python
with pyarrow and shardwise imported) and the peak RSS, and how the read ended.

    PYTHONPATH=src python benchmarks/bench_hostile.py [--out DIR]

Serialize with ``flock /tmp/shardwise-bench.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

CHILD = """
import sys, time
import pyarrow as pa, pyarrow.parquet as pq
from shardwise.formats import get_format
from shardwise.formats.parquet._fixedlist import read_fixed_lists
reader, path = sys.argv[1], sys.argv[2]
fmt = get_format("parquet")
unit = fmt.list_units(path, 0)[0]
def status(key):
    line = next(x for x in open("/proc/self/status") if x.startswith(key + ":"))
    return int(line.split()[1]) / 1024
with open("/proc/self/clear_refs", "w") as f:  # the peak RSS from here on (Linux 4.0+)
    f.write("5")
before = status("VmRSS")
t = time.perf_counter()
try:
    if reader == "arrow":
        pq.ParquetFile(path).read_row_group(0, use_threads=False)
    elif reader == "pages":
        got = read_fixed_lists(pq.ParquetFile(path), pa.OSFile(path), 0, ["emb"])
        end = "declined" if not got else "READ A HOSTILE COLUMN"
    else:
        fmt.read_table(unit, use_threads=False)
    end = "read" if reader != "pages" else end
except Exception as exc:
    end = type(exc).__name__ + ": " + str(exc).splitlines()[0][:60]
took = time.perf_counter() - t
peak = status("VmHWM")
print(f"{took:.3f}\\t{before:.0f}\\t{peak:.0f}\\t{end}")
"""


def _file(body: bytes, uncompressed: int, header_padding: int = 0) -> bytes:
    """A pyarrow file of one fixed_size_list<float>[4] column, its data page replaced."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))
    from _parquetcraft import BINARY, craft, data_pages, get

    c = craft(rows=100, k=4, codec="gzip", use_dictionary=False)
    i = data_pages(c)[0]
    header, _ = c.pages[i]
    get(header, 2)[2] = uncompressed
    get(header, 3)[2] = len(body)
    if header_padding:
        header.append([100, BINARY, bytes(header_padding)])
    c.pages[i] = (header, body)
    return c.build()


def _bomb(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = io.BytesIO()
    block = bytes(1 << 24)
    for _ in range(size >> 24):
        out.write(z.compress(block))
    out.write(z.flush())
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where the files are written")
    args = parser.parse_args()
    root = Path(args.out or tempfile.mkdtemp(prefix="shardwise-hostile-"))
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    small = z.compress(bytes(1662)) + z.flush()
    cases = {  # built once: a file already in --out is read again as it is
        "gzip bomb (1,662 B said, 1.5 GiB inflated)": lambda: _file(_bomb(3 << 29), 1662),
        "header padded to 16 MiB": lambda: _file(small, 1662, 16 * 1024 * 1024 - 64),
    }
    print(f"python {sys.version.split()[0]}; files in {root}")
    print("case\treader\tseconds\tRSS before MiB\tpeak RSS MiB\tend")
    for name, build in cases.items():
        path = root / (name.split()[0] + ".parquet")
        if not path.exists():
            path.write_bytes(build())
        data = path.read_bytes()
        for reader in ("arrow", "shardwise", "pages"):
            run = subprocess.run(
                [sys.executable, "-c", CHILD, reader, str(path)],
                capture_output=True,
                text=True,
                check=True,
            )
            print(f"{name} ({len(data) / 1e6:.1f} MB)\t{reader}\t{run.stdout.strip()}")


if __name__ == "__main__":
    main()
