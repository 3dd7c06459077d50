"""The kernels called by name (shardwise.ops._compute) give what pyarrow.compute gives,
and a worker running a read-dedup-write pipeline's tasks never imports pyarrow.compute."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from shardwise.errors import ConfigError, FormatError
from shardwise.ops._compute import (
    call,
    count_true,
    fill_null,
    filter_rows,
    text_column,
    utf8_normalize,
)

TEXTS = pa.array(["Ｃafé", None, "e\u0301", "", "ﬁne"])


def test_kernels_match_pyarrow_compute() -> None:
    assert call("ascii_lower", TEXTS).equals(pc.ascii_lower(TEXTS))
    assert call("utf8_length", TEXTS).equals(pc.utf8_length(TEXTS))
    for form in ("NFC", "NFKC", "NFD", "NFKD"):
        assert utf8_normalize(TEXTS, form).equals(pc.utf8_normalize(TEXTS, form))
    chunked = pa.chunked_array([TEXTS, pa.array([None, "x"])])
    assert fill_null(chunked, "").equals(pc.fill_null(chunked, ""))
    assert fill_null(TEXTS, "?").to_pylist() == ["Ｃafé", "?", "e\u0301", "", "ﬁne"]


@pytest.mark.parametrize("mask", [[True, None, False, True, True], [None] * 5, [False] * 5])
def test_count_and_filter_match_pyarrow_compute(mask: list[bool | None]) -> None:
    m = pa.array(mask, pa.bool_())
    assert count_true(m) == (pc.sum(m).as_py() or 0)
    batch = pa.record_batch({"text": TEXTS, "n": pa.array(range(5))})
    assert filter_rows(batch, m).equals(batch.filter(m))
    assert count_true(pa.array([], pa.bool_())) == 0


def test_text_column() -> None:
    batch = pa.record_batch({"b": pa.array([b"ab", None]), "n": pa.array([1, 2])})
    assert text_column(batch, "b").to_pylist() == ["ab", None]
    with pytest.raises(ConfigError, match="not text"):
        text_column(batch, "n")
    with pytest.raises(ConfigError, match="no column 'x'"):
        text_column(batch, "x")
    bad = pa.record_batch({"b": pa.array([b"ab", b"\xff"])})
    with pytest.raises(FormatError, match="column 'b' is binary and not all of it is UTF-8"):
        text_column(bad, "b")


# pyarrow imports pandas, when it is installed (ray[train] brings it), on its first
# conversion of Python values or to_numpy(), and pandas imports pyarrow.compute and
# numpy.ma: a cost of the environment, not of shardwise's code, which these tests check
NO_PANDAS = (
    "import sys\n"
    "class NoPandas:\n"
    "    def find_spec(self, name, *args):\n"
    "        if name.partition('.')[0] == 'pandas':\n"
    "            raise ImportError('pandas left out')\n"
    "sys.meta_path.insert(0, NoPandas())\n"
)


def test_worker_path_does_not_import_pyarrow_compute() -> None:
    code = (
        NO_PANDAS + "import sys\n"
        "import shardwise.parallel.backends.local_worker, shardwise.parallel._in_worker\n"
        "import shardwise.pipeline.run_task, shardwise.pipeline.dedup_services, "
        "shardwise.dedup.minhash\nimport pyarrow as pa\n"
        "from shardwise.dedup.shingles import doc_shingles\n"
        "from shardwise.dedup.sets import shingle_sets\n"
        "sh, off = doc_shingles(pa.array(['Ｃafé au lait, s’il vous plaît', None, 'x']), "
        "unique=False)\nshingle_sets(sh, off)\n"
        "print('pyarrow.compute' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
