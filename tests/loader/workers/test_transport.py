"""numpy batches through the shared-memory rings of DataLoader workers: exact values,
space reused, and every way out (too large, full for too long, not strings, disabled)
falls back to sending by value."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from shardwise import StreamingDataset
from shardwise.loader import NumpyColumn
from shardwise.loader.workers import receive, transport
from shardwise.loader.workers import ring as _ring


@pytest.fixture()
def ring(monkeypatch: pytest.MonkeyPatch) -> Any:
    """This process as a worker with a small ring; unregistered afterwards."""
    monkeypatch.setattr(transport, "RING_BYTES", 1 << 16)
    monkeypatch.setattr(_ring, "WAIT_S", 0.05)
    monkeypatch.setattr(transport, "_ring", None)
    ForkingPickler.register(NumpyColumn, transport._reduce)
    ForkingPickler.register(transport.RingBatch, transport._reduce_batch)
    yield transport
    ForkingPickler._extra_reducers.pop(NumpyColumn, None)
    ForkingPickler._extra_reducers.pop(transport.RingBatch, None)
    receive._maps.clear()


def _send(obj: Any) -> tuple[bytes, Any]:
    raw = bytes(ForkingPickler.dumps(obj))
    return raw, pickle.loads(raw)


def test_columns_go_through_the_ring_and_come_back_equal(ring: Any) -> None:
    rng = np.random.default_rng(0)
    for i in range(200):  # ~30 times round the 64 KiB ring
        emb = rng.random((16, 64), dtype=np.float32).view(NumpyColumn)
        text = np.array([f"é{i}-{j}" * (j + 1) for j in range(16)], dtype=object).view(NumpyColumn)
        raw, (e2, t2) = _send((emb, text))
        assert len(raw) < 400  # references only: the bytes went through shared memory
        assert isinstance(e2, NumpyColumn) and e2.flags.writeable
        np.testing.assert_array_equal(e2, emb)
        assert t2.dtype == object and t2.tolist() == text.tolist()
    assert ring._ring.pos > ring.RING_BYTES * 10
    assert int(ring._ring.header[0]) == ring._ring.pos  # everything sent was read back


def test_string_columns_send_their_arrow_buffers(
    ring: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = [f"ü{j}" * (j % 5) for j in range(300)]  # empty strings too
    encode = transport._reduce_objects
    monkeypatch.setattr(transport, "_reduce_objects", lambda arr: pytest.fail("objects re-encoded"))
    for typ in (pa.string(), pa.large_string()):
        arrow = pa.array(words, type=typ).slice(37, 200)  # a slice: offsets do not start at 0
        values = arrow.to_numpy(zero_copy_only=False)
        col = transport.string_column(values, arrow)
        assert not col.flags.writeable
        raw, back = _send(col)
        assert len(raw) < 400 and back.tolist() == words[37:237] and back.flags.writeable
    monkeypatch.setattr(transport, "_reduce_objects", encode)
    # a column made writable again may have been edited: its objects are sent, not the Arrow array
    arrow = pa.array(words[:10])
    col = transport.string_column(arrow.to_numpy(zero_copy_only=False), arrow)
    col.flags.writeable = True
    col[0] = "edited"
    assert _send(col)[1].tolist() == ["edited"] + words[1:10]
    # a slice of the column is a new array without the Arrow array: also sent by its objects
    assert (
        _send(transport.string_column(arrow.to_numpy(zero_copy_only=False), arrow)[2:5])[1].tolist()
        == words[2:5]
    )


def test_fallbacks_send_by_value(ring: Any) -> None:
    big = np.zeros(ring.RING_BYTES, dtype=np.uint8).view(NumpyColumn)  # over half the ring
    raw, back = _send(big)
    assert (
        len(raw) > ring.RING_BYTES and np.array_equal(back, big) and isinstance(back, NumpyColumn)
    )

    mixed = np.array(["a", None, 3], dtype=object).view(NumpyColumn)  # not all strings
    assert _send(mixed)[1].tolist() == ["a", None, 3]

    # nothing reads the ring back: it fills, the wait times out and columns go by value
    chunk = np.ones(ring.RING_BYTES // 4, dtype=np.uint8).view(NumpyColumn)
    sent = [bytes(ForkingPickler.dumps(chunk)) for _ in range(6)]
    assert [len(s) < 400 for s in sent] == [True] * 4 + [False] * 2
    # once the reader catches up the ring is used again
    for s in sent:
        assert np.array_equal(pickle.loads(s), chunk)
    assert len(_send(chunk)[0]) < 400


def _ring_batch(i: int, rows: int = 40) -> tuple[transport.RingBatch, list[str]]:
    words = [f"é{i}-{j}" * (j % 6) for j in range(rows)]
    arrow = pa.array(words).slice(1)  # offsets not starting at 0
    emb = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)[1:] + i
    cols: dict[str, Any] = {
        "id": np.arange(i, i + rows - 1).view(NumpyColumn),
        "emb": emb.view(NumpyColumn),  # 2-D, float32: realigned in the region
        "flag": (np.arange(rows - 1) % 2 == 0).view(NumpyColumn),  # 1-byte items
        "text": transport.string_column(arrow.to_numpy(zero_copy_only=False), arrow),
        "misc": np.array([1, "x", None] * 13, dtype=object).view(
            NumpyColumn
        ),  # not strings: by value
        "step": i,  # not an array: by value
        "plain": np.arange(3),  # a plain array stays plain
    }
    return transport.RingBatch(cols), words[1:]


def test_a_batch_goes_through_the_ring_as_one_region(ring: Any) -> None:
    for i in range(300):  # several times round the 64 KiB ring
        batch, words = _ring_batch(i)
        raw, back = _send(batch)
        assert len(raw) < 1200  # one reference, the specs and the small by-value parts
        assert type(back) is dict and list(back) == list(batch)
        for name in ("id", "emb", "flag"):
            assert isinstance(back[name], NumpyColumn) and back[name].flags.writeable
            assert back[name].dtype == batch[name].dtype
            np.testing.assert_array_equal(back[name], batch[name])
        assert back["text"].tolist() == words and back["misc"].tolist() == batch["misc"].tolist()
        assert back["step"] == i
        assert type(back["plain"]) is np.ndarray and back["plain"].tolist() == [0, 1, 2]
        assert type(back["misc"]) is NumpyColumn
    assert ring._ring.pos > ring.RING_BYTES * 3
    assert int(ring._ring.header[0]) == ring._ring.pos


def test_a_batch_too_large_for_the_ring_goes_by_value(ring: Any) -> None:
    batch, words = _ring_batch(0)
    batch["big"] = np.zeros(ring.RING_BYTES, dtype=np.uint8).view(NumpyColumn)
    raw, back = _send(batch)
    assert len(raw) > ring.RING_BYTES and ring._ring.pos == 0
    assert back["text"].tolist() == words and np.array_equal(back["emb"], batch["emb"])
    assert all(isinstance(back[k], NumpyColumn) for k in ("id", "emb", "text", "big", "misc"))
    assert type(back["plain"]) is np.ndarray and back["step"] == 0


def test_plain_pickle_never_uses_the_ring(ring: Any) -> None:
    col = np.arange(10).view(NumpyColumn)
    assert np.array_equal(pickle.loads(pickle.dumps(col)), col)
    batch, words = _ring_batch(0)
    back = pickle.loads(pickle.dumps(batch))
    assert back["text"].tolist() == words and np.array_equal(back["emb"], batch["emb"])
    assert ring._ring is None


def _text_data(root: Path) -> Path:
    root.mkdir()
    for f in range(3):
        ids = np.arange(f * 700, (f + 1) * 700)
        pq.write_table(
            pa.table(
                {
                    "id": ids,
                    "emb": pa.FixedSizeListArray.from_arrays(
                        pa.array(np.repeat(ids, 4).astype(np.float32)), 4
                    ),
                    "text": [f"ünïcode {i} " * (i % 7) for i in ids],
                }
            ),
            root / f"p{f}.parquet",
            row_group_size=300,
        )
    return root


def _batches(data: Path, workers: int) -> list[dict[str, Any]]:
    ds = StreamingDataset(
        str(data),
        batch_size=50,
        rank=0,
        world_size=1,
        num_workers=workers,
        batch_format="numpy",
        seed=1,
    )
    return list(DataLoader(ds, batch_size=None, num_workers=workers))


def test_dataloader_batches_are_exact_with_and_without_the_rings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _text_data(tmp_path / "d")
    runs = {}
    for shm in ("1", "0"):
        monkeypatch.setenv("SHARDWISE_SHM", shm)
        receive._maps.clear()
        runs[shm] = _batches(data, 2)
        assert bool(receive._maps) == (shm == "1")  # the workers' rings were mapped (or not)
    got = runs["1"]
    assert len(got) == len(runs["0"]) == 2100 // 50
    ids = np.concatenate([g["id"] for g in got])
    assert sorted(ids.tolist()) == list(range(2100))
    for g, by_value in zip(got, runs["0"]):
        assert all(isinstance(v, NumpyColumn) for v in g.values())
        np.testing.assert_array_equal(g["id"], by_value["id"])
        np.testing.assert_array_equal(
            g["emb"], np.repeat(g["id"], 4).reshape(-1, 4).astype(np.float32)
        )
        assert g["text"].tolist() == [f"ünïcode {i} " * (i % 7) for i in g["id"].tolist()]
        assert g["emb"].flags.writeable
