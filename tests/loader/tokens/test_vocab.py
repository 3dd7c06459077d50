"""Token ids at or above the vocabulary size the token column declares are refused when
their unit is read, naming the file, the unit and the document, on every read path (a view
of the file the index locates, or Arrow's read): an embedding lookup would otherwise fail
on the device, or read another token's row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise import FormatError
from shardwise._tokens import TokenInfo, token_array
from shardwise.loader.tokens import TokenStream
from shardwise.loader.tokens.flatmap import FlatTokens

INFO = TokenInfo("<u2", 100, eos_id=0, tokenizer="abc")


def _write(root: Path, plain: bool, bad: int | None) -> Path:
    """40 documents in units of 10; document 23 (unit 2's document 3) holds id ``bad``."""
    root.mkdir()
    docs = [np.arange(1 + i % 7, dtype="<u2") + 5 for i in range(40)]
    if bad is not None:
        docs[23][1] = bad
    flat = np.concatenate(docs)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    schema = pa.schema([INFO.field("tokens"), pa.field("num_tokens", pa.int32())])
    table = pa.table(
        [token_array(flat, offsets), pa.array([len(d) for d in docs], pa.int32())], schema=schema
    )
    path = root / "part.parquet"
    pq.write_table(
        table, path, row_group_size=10, use_dictionary=not plain, write_statistics=not plain
    )
    return path


@pytest.mark.parametrize("plain", [True, False])
@pytest.mark.parametrize(
    ("packing", "fields"), [("concat", ("input_ids",)), ("concat", None), ("best_fit", None)]
)
def test_an_id_beyond_the_vocabulary_is_refused_naming_its_place(
    tmp_path: Path, plain: bool, packing: str, fields: tuple[str, ...] | None
) -> None:
    path = _write(tmp_path / "bad", plain, 100)
    kw = {"seq_len": 8, "packing": packing, "shuffle": False} | (
        {"fields": fields} if fields else {}
    )
    with pytest.raises(FormatError, match=r"token id 100 \(.*\) is not below the vocab_size=100"):
        list(TokenStream(str(path.parent), **kw))
    good = _write(tmp_path / "good", plain, 99)  # the largest id of the vocabulary
    assert len(list(TokenStream(str(good.parent), **kw))) > 0


def test_the_error_names_the_file_unit_and_document(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad", False, 65_535)
    ds = TokenStream(str(path.parent), seq_len=8, packing="best_fit", shuffle=False)
    assert ds.units.flat is None  # Arrow's read (or the mapped pages), with the offsets
    with pytest.raises(FormatError) as e:
        list(ds)
    assert e.value.path is not None and e.value.path.endswith("part.parquet")
    assert e.value.location == "unit 2"
    assert "token id 65535 (token 1 of document 3 of the unit)" in str(e.value)


def test_a_view_of_a_mapped_file_is_checked_once(tmp_path: Path) -> None:
    """The path of units the index locates (:class:`FlatTokens`): the unit's ids are
    checked at its first view (one ``max``), not at every one."""
    path = tmp_path / "ids.bin"
    ids = np.arange(50, dtype="<u2") * 2  # 0 .. 98, then one id of 100
    path.write_bytes(ids.tobytes() + np.array([100], "<u2").tobytes())
    st = path.stat()
    files = {str(path): (st.st_size, str(st.st_mtime))}
    spans = np.array([[0, 50], [0, 51]], np.int64)
    flat = FlatTokens(spans, [str(path)] * 2, files, np.dtype("<u2"), vocab_size=100)
    assert flat.view(0).tolist() == ids.tolist()
    with pytest.raises(FormatError, match=r"token id 100 \(token 50 of the unit\)") as e:
        flat.view(1)
    assert e.value.path == str(path) and e.value.location == "unit 1"
    flat._checked[1] = True  # as after a first view that passed
    assert len(flat.view(1)) == 51
