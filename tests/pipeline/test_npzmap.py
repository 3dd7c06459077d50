"""Memory-mapped ``.npz`` members equal what ``np.load`` reads, and fall back when they cannot
be mapped."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shardwise.pipeline._npzmap import map_npz
from shardwise.pipeline.dedup_services import TaskKeyFiles

ARRAYS = {
    "sig": np.arange(24, dtype=np.uint64).reshape(6, 4),
    "none": np.zeros((0, 128), np.uint64),
    "lengths": np.array([3, 0, 5], dtype=np.int32),
    "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
    "text": np.array(["ab", "c"]),
    "scalar": np.array(5),
}


def test_mapped_members_equal_loaded(tmp_path: Path) -> None:
    path = tmp_path / "keys.npz"
    np.savez(path, **ARRAYS)  # type: ignore[arg-type]
    mapped = map_npz(str(path))
    assert mapped is not None and set(mapped) == set(ARRAYS)
    for name, want in ARRAYS.items():
        got = mapped[name]
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert not got.flags.writeable
    assert map_npz(str(path), ["sig", "absent"]) is not None
    assert set(map_npz(str(path), ["sig", "absent"]) or {}) == {"sig"}


def test_unmappable_members_fall_back(tmp_path: Path) -> None:
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, obj=np.array([1, "x"], dtype=object), a=np.arange(3))
    assert map_npz(str(pickled), ["obj"]) is None
    assert map_npz(str(pickled), ["a"]) is not None
    compressed = tmp_path / "compressed.npz"
    np.savez_compressed(compressed, a=np.arange(3))
    assert map_npz(str(compressed)) is None
    loaded = TaskKeyFiles((str(compressed),), {}).load(0)  # read instead
    assert np.array_equal(loaded["a"], np.arange(3))


def test_task_key_files_map_local_files(tmp_path: Path) -> None:
    path = tmp_path / "keys.npz"
    np.savez(path, **ARRAYS)  # type: ignore[arg-type]
    got = TaskKeyFiles((str(path),), {}).load(0, ["sig", "lengths", "absent"])
    assert set(got) == {"sig", "lengths"}
    assert not got["sig"].flags.writeable  # a map, not a copy
    assert np.array_equal(got["sig"][[1, 4]], ARRAYS["sig"][[1, 4]])
