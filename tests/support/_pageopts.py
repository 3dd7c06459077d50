"""Hypothesis choices of pyarrow's writing options that change a column's pages (codec,
dictionary, page version and size, byte-stream split), shared by the page readers' tests."""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: the page readers' property tests: deterministic, no example database
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
CODECS = ["none", "snappy", "gzip", "zstd", "brotli", "lz4"]
READ = {"none", "snappy", "gzip", "zstd"}  # the codecs the page readers decompress


def page_options(draw: st.DrawFn, leaf: str, row_groups: list[int]) -> dict[str, Any]:
    """Writing options for a table whose list column's leaf is ``leaf``
    (``"emb.list.element"``), in row groups of one of ``row_groups`` rows."""
    opts: dict[str, Any] = {
        "compression": draw(st.sampled_from(CODECS)),
        "use_dictionary": draw(st.booleans()),
        "data_page_version": draw(st.sampled_from(["1.0", "2.0"])),
        "data_page_size": draw(st.sampled_from([1 << 10, 1 << 14, 1 << 20])),
        "row_group_size": draw(st.sampled_from(row_groups)),
        "dictionary_pagesize_limit": draw(st.sampled_from([1 << 10, 1 << 20])),
    }
    if not opts["use_dictionary"] and draw(st.booleans()):
        opts["use_byte_stream_split"] = [leaf]
    return opts


def written(table: pa.Table, opts: dict[str, Any]) -> bytes:
    """``table`` as the bytes of a Parquet file written with ``opts``."""
    buf = io.BytesIO()
    pq.write_table(table, buf, **opts)
    return buf.getvalue()
