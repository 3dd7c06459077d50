"""Strings and binary values of every batch format through a worker's ring, in this
process: Arrow arrays of every variable-width type (nulls, slices, empty, chunked), record
batches, torch and numpy batches, per-sample dicts; equal values and types on arrival,
only a reference in the pickle, and everything the ring does not take by value."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

from shardwise.loader import NumpyColumn
from shardwise.loader.workers import carriers, carry, receive, transport
from shardwise.loader.workers import ring as _ring

TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]
BIG = carriers.MIN_BYTES


@pytest.fixture()
def ring(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process as a worker with a 4 MiB ring; unregistered afterwards."""
    monkeypatch.setattr(transport, "RING_BYTES", 1 << 22)
    monkeypatch.setattr(_ring, "WAIT_S", 0.05)
    monkeypatch.setattr(transport, "_ring", None)
    monkeypatch.setattr(transport, "_active", False)
    monkeypatch.delenv("SHARDWISE_SHM", raising=False)
    carriers.enable()
    yield transport
    for t in (NumpyColumn, transport.RingBatch, pa.RecordBatch, carriers.SampleDict):
        ForkingPickler._extra_reducers.pop(t, None)
    receive._maps.clear()


def _send(obj: Any) -> tuple[bytes, Any]:
    raw = bytes(ForkingPickler.dumps(obj))
    return raw, pickle.loads(raw)


def _values(t: pa.DataType, n: int, size: int = 700, nulls: bool = True) -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        v = (f"é{i}-" * (i * size // 40 % (size // 4) + (i % 3 != 0))).encode()
        out.append(None if nulls and i % 7 == 3 else v if t in TYPES[2:] else v.decode())
    return out


def _arrays(t: pa.DataType) -> list[pa.Array]:
    values = _values(t, 300)
    whole = pa.array(values, t)
    return [
        whole,
        whole.slice(13, 150),  # offsets and validity bits not starting at 0
        whole.slice(5, 0),  # empty
        pa.array([], t),
        pa.array([None, None], t),
        pa.array(_values(t, 40, nulls=False), t).slice(3),
    ]


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_arrow_columns_of_every_type_arrive_equal(t: pa.DataType) -> None:
    shm = _ring.Ring(1 << 20)
    for arr in _arrays(t):
        layout = carry.arrow_layout(arr, "arrow")
        assert layout is not None
        placed = shm.put(layout[1])
        assert placed is not None
        region = shm.data[placed[0] % shm.size :][: placed[1]]
        back, end = carry.rebuild_text(region, 0, layout[0][1:])
        shm.header[0] = shm.pos
        assert end == placed[1] and back.type == t and back.equals(arr) and back.offset == 0
        assert back.to_pylist() == arr.to_pylist()


@pytest.mark.parametrize("t", TYPES, ids=str)
def test_record_batches_cross_through_the_ring(ring: Any, t: pa.DataType) -> None:
    big = pa.array(_values(t, 600, size=900), t)
    for arr in (big, big.slice(101, 333), pa.chunked_array([big.slice(0, 7), big.slice(50)])):
        col = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        small = pa.array(_values(t, len(col), 8), t)
        x = pa.array(np.arange(len(col), dtype=np.float32))
        rb = pa.record_batch({"x": x, "v": col, "s": small}).replace_schema_metadata({"k": "v"})
        assert carry.arrow_layout(arr, "arrow") is not None  # chunked arrays are combined
        raw, back = _send(rb)
        assert len(raw) < len(col.buffers()[2]) // 4  # the values went through the ring
        assert type(back) is pa.RecordBatch and back.schema == rb.schema
        assert back.schema.metadata == rb.schema.metadata and back.equals(rb)
        assert back.column(1).to_pylist() == col.to_pylist()
    assert int(ring._ring.header[0]) == ring._ring.pos  # every region was read back


def test_small_or_other_record_batches_go_by_value(ring: Any) -> None:
    small = pa.record_batch({"v": pa.array(["a", None, "bc"]), "n": [1, 2, 3]})
    raw, back = _send(small)
    assert back.equals(small) and ring._ring is None  # below MIN_BYTES: as Arrow pickles it
    views = pa.array([b"x" * 1000] * (BIG // 500), pa.binary_view())
    other = pa.record_batch({"v": views, "l": pa.array([[1]] * len(views))})
    assert _send(other)[1].equals(other)  # view and list types are not carried
    empty = pa.record_batch([], schema=pa.schema([]))
    assert _send(empty)[1].equals(empty)


def test_torch_batch_strings_and_binary_through_the_ring(ring: Any) -> None:
    n = 64
    blobs = np.empty(n, dtype=object)
    blobs[:] = [None if i % 9 == 4 else bytes([i]) * (BIG // 16) for i in range(n)]
    texts = np.empty(n, dtype=object)
    texts[:] = [f"ü{i}" * (i % 5) for i in range(n)]
    rows = np.empty(n, dtype=object)
    rows[:] = [np.arange(i % 3) for i in range(n)]  # row views: by value
    batch = {"id": torch.arange(n), "img": blobs, "text": texts, "tokens": rows, "step": 3}
    raw, back = _send(carriers.travel_for("torch")(batch, {}))  # type: ignore[misc]
    assert len(raw) < 20_000 and type(back) is dict and list(back) == list(batch)
    assert torch.equal(back["id"], batch["id"]) and back["step"] == 3
    for k in ("img", "text", "tokens"):
        assert type(back[k]) is np.ndarray and back[k].dtype == object and back[k].shape == (n,)
    assert back["img"].tolist() == blobs.tolist() and back["text"].tolist() == texts.tolist()
    assert [r.tolist() for r in back["tokens"]] == [r.tolist() for r in rows]


def test_numpy_batch_binary_and_nulls_through_the_ring(ring: Any) -> None:
    arrow = pa.array(_values(pa.binary(), 200, size=2000), pa.binary()).slice(9, 120)
    texts = pa.array(_values(pa.string(), 200), pa.large_string()).slice(9, 120)
    values = {k: v.to_numpy(zero_copy_only=False) for k, v in (("b", arrow), ("t", texts))}
    plain = np.empty(120, dtype=object)
    plain[:] = arrow.to_pylist()  # no Arrow array handed over: bytes written one by one
    batch = {"b": values["b"], "t": values["t"], "p": plain.view(NumpyColumn)}
    sent = transport.ring_batch(batch, {"b": arrow, "t": texts})
    raw, back = _send(sent)
    assert len(raw) < 2000 and list(back) == ["b", "t", "p"]
    for k, expected in (("b", arrow), ("t", texts), ("p", arrow)):
        assert type(back[k]) is NumpyColumn and back[k].flags.writeable
        assert back[k].tolist() == expected.to_pylist()


def test_samples_send_their_large_values_through_the_ring(ring: Any) -> None:
    jpg = bytes(range(256)) * (BIG // 256 + 1)
    text = "ß" * BIG
    sample = carriers.travel_for(None)({"jpg": jpg, "txt": text, "cls": b"7", "n": 1}, {})
    assert isinstance(sample, carriers.SampleDict)
    raw, back = _send(sample)
    assert len(raw) < 1000 and type(back) is dict
    assert back == {"jpg": jpg, "txt": text, "cls": b"7", "n": 1}
    assert [type(v) for v in back.values()] == [bytes, str, bytes, int]
    # collated by a DataLoader: lists of values
    collated = carriers.SampleDict(jpg=[jpg[:1000]] * 80 + [b"", None], cls=[b"1", b"2"])
    raw, back = _send(collated)
    assert len(raw) < 1000 and back == dict(collated) and type(back) is dict
    small = carriers.SampleDict(cls=b"1", mixed=[b"a" * BIG, "b"])
    raw, back = _send(small)  # nothing to carry (a list of bytes and str is not): by value
    assert back == dict(small) and type(back) is dict and len(raw) > BIG


def test_the_pipe_is_used_when_the_ring_is_full(ring: Any) -> None:
    rb = pa.record_batch({"v": pa.array([b"x" * 4096] * 300)})  # 1.2 MB: 3 fit the 4 MiB ring
    sent = [bytes(ForkingPickler.dumps(rb)) for _ in range(5)]
    assert [len(s) < 4096 for s in sent] == [True] * 3 + [False] * 2
    assert all(pickle.loads(s).equals(rb) for s in sent)
    assert len(_send(rb)[0]) < 4096  # read back: the ring is used again


def test_disabled_or_in_process_nothing_travels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "_active", False)
    assert all(carriers.travel_for(f) is None for f in (None, "numpy", "torch", "arrow"))
    monkeypatch.setenv("SHARDWISE_SHM", "0")
    carriers.enable()
    try:  # record batches go by value, as pyarrow pickles them, but with their rows
        assert carriers.SampleDict not in ForkingPickler._extra_reducers
        rb = pa.record_batch({"v": pa.array([b"x" * 4096] * 300)})
        raw, back = _send(rb)
        assert len(raw) > 300 * 4096 and back.equals(rb)
        assert _send(rb.select([]))[1].num_rows == 300  # pickled by pyarrow: 0 rows
    finally:
        ForkingPickler._extra_reducers.pop(pa.RecordBatch, None)
