"""A unit read in two parts when it holds wide binary values (images) in a dictionary page:
the page reader decodes the head's values and then the rest's, the unit stays open between
them, and the loader's batches are the plan's with the values of whole reads, on the
in-process path and through 2 real DataLoader workers. The next window's reads start once
the first batch of a head window is cut."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _partsdata import check_head_and_rest
from torch.utils.data import DataLoader

import shardwise.loader.batches.piece_maker as piece_maker
import shardwise.loader.batches.windows as windows
from shardwise import StreamingDataset
from shardwise.loader.read.units import UnitReader

SIZES = [(70, 60), (45,), (90, 8, 33)]  # rows of each file's row groups (uneven, as written)


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Binary values of 1-3 KB, pyarrow's defaults: each row group's values in one
    dictionary page."""
    return _write_images(
        tmp_path_factory.mktemp("images"), 3, lambda ids, values: pa.array(values, pa.binary())
    )


def _write_images(root: Path, seed: int, column: Any) -> Path:
    """Files of :data:`SIZES` row groups of ids, labels and images of 1-3 KB, the image
    column made by ``column(ids, values)``."""
    rng = np.random.default_rng(seed)
    first = 0
    for f, groups in enumerate(SIZES):
        ids = np.arange(first, first + sum(groups))
        first += len(ids)
        values = [rng.bytes(int(n)) for n in rng.integers(1000, 3000, len(ids))]
        table = pa.table({"id": ids, "label": ids % 7, "image": column(ids, values)})
        with pq.ParquetWriter(root / f"p{f}.parquet", table.schema) as writer:
            at = 0
            for n in groups:
                writer.write_table(table.slice(at, n))
                at += n
    return root


def _ds(root: Path, **kw: Any) -> Any:
    args: dict[str, Any] = dict(batch_size=8, seed=3, batch_format="numpy", first_window="heads")
    return StreamingDataset(str(root), **(args | kw))


@pytest.mark.parametrize("pages", ["1", "0"])
def test_heads_and_rests_of_binary_values_equal_whole_reads(
    images: Path, pages: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDWISE_PAGE_READER", pages)
    ds = _ds(images)
    check_head_and_rest(ds, "image", by_pages=pages == "1")


def _rows(ds: Any, columns: list[str]) -> list[pa.Table]:
    reader = UnitReader(ds.index, columns)
    return [reader.read(u) for u in range(ds.index.num_units)]


def _planned(ds: Any, workers: int, rank: int = 0) -> list[list[tuple[int, bytes]]]:
    """The plan's batches with the values of whole reads: (id, image) per row."""
    tables = _rows(ds, ["id", "image"])
    ids = [t.column("id").to_pylist() for t in tables]
    values = [t.column("image").to_pylist() for t in tables]
    batches = ds.plan(num_workers=workers).rank_batches(rank)
    return [[(ids[u][r], values[u][r]) for u, r in b] for b in batches]


def _batches(it: Any) -> list[list[tuple[int, bytes]]]:
    return [list(zip(np.asarray(b["id"]).tolist(), list(b["image"]))) for b in it]


def test_batches_are_the_plans_with_whole_reads_values_on_both_paths(images: Path) -> None:
    assert _batches(_ds(images)) == _planned(_ds(images), 1)  # in-process
    ds = _ds(images)
    by_workers = _batches(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(by_workers) == sorted(_planned(ds, 2))


def test_the_next_windows_reads_start_once_the_first_batch_is_cut(
    images: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With head windows the first piece's first batch is cut before the rest window's
    reads start (they would take the cores from it); the batches are still the plan's.
    Without head windows the reads start behind the first piece, as before."""
    events: list[str] = []
    cut, ahead = piece_maker.PieceMaker.batches, windows.WindowBuilder.read_ahead

    def batches(self: Any, piece: Any) -> Any:
        for batch in cut(self, piece):
            events.append("batch")
            yield batch

    def read_ahead(self: Any) -> None:
        events.append("read ahead")
        ahead(self)

    monkeypatch.setattr(piece_maker.PieceMaker, "batches", batches)
    monkeypatch.setattr(windows.WindowBuilder, "read_ahead", read_ahead)
    ds = _ds(images)
    assert _batches(ds) == _planned(ds, 1)
    assert events[:2] == ["batch", "read ahead"]
    events.clear()
    whole = _ds(images, first_window=None)
    assert len(_batches(whole)) > 1
    heads = whole.reading.first_piece(whole.reading.batch_size) is not None
    assert events[:2] == (["batch", "read ahead"] if heads else ["read ahead", "batch"])


def _head_of_first_unit(root: Path) -> tuple[Any, Any, pa.Table, int]:
    """The dataset of ``root``, its unit reader in parts with unit 0's first 10 rows read
    (checked against the whole read), the whole read, and the unit's rows."""
    from shardwise.loader.read import unit_heads

    ds = _ds(root)
    whole = UnitReader(ds.index).read(0)
    parts = unit_heads.unit_parts(ds.index, None, None, None, whole.schema)
    assert parts is not None
    head = parts.head(0, 10)
    assert head is not None and head.equals(whole.slice(0, 10))
    return ds, parts, whole, ds.index.units[0].num_samples


def test_page_reads_map_the_file_for_the_read_alone(
    images: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page readers read each part from a mapping of its own, closed when the part is
    read: the pages a head touched are not kept resident while its unit waits for the rest
    (the unit's own file stays open for Arrow's columns)."""
    from shardwise.loader.read import part_map

    mapped: list[Any] = []
    real = part_map._map_again

    def counting(source: Any) -> Any:
        again = real(source)
        mapped.append((source, again))
        return again

    monkeypatch.setattr(part_map, "_map_again", counting)
    ds, parts, whole, n = _head_of_first_unit(images)
    assert len(mapped) == 1
    unit_file, head_pages = mapped[0]
    assert isinstance(unit_file, pa.MemoryMappedFile) and isinstance(head_pages, mmap.mmap)
    assert head_pages.closed and not unit_file.closed
    assert parts._open[0].fixed == ["image"]
    rest = parts.rest(0, 10, n - 10)
    assert rest is not None and rest.equals(whole.slice(10))
    assert len(mapped) == 2 and mapped[1][0] is unit_file
    assert unit_file.closed and mapped[1][1].closed


@pytest.fixture(scope="module")
def image_structs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Images as ``{bytes, path}`` structs (Hugging Face's ``Image`` feature), some paths
    null, pyarrow's defaults."""

    def structs(ids: np.ndarray, values: list[bytes]) -> pa.StructArray:
        paths = pa.array([None if i % 4 else f"{i}.jpg" for i in ids.tolist()], pa.string())
        return pa.StructArray.from_arrays(
            [pa.array(values, pa.binary()), paths], names=["bytes", "path"]
        )

    return _write_images(tmp_path_factory.mktemp("image_structs"), 5, structs)


def test_image_structs_are_read_in_parts_from_their_pages(image_structs: Path) -> None:
    """Heads and rests of ``{bytes, path}`` structs equal whole reads, the struct read
    from its pages (its bytes; Arrow reads the paths), and the in-process batches are the
    plan's rows with the values of whole reads."""
    check_head_and_rest(_ds(image_structs), "image", by_pages=True)
    got = _batches(_ds(image_structs))
    assert len(got) > 10 and isinstance(got[0][0][1], dict) and got[0][0][1]["bytes"]
    assert got == _planned(_ds(image_structs), 1)
    ds = _ds(image_structs)
    by_workers = _batches(DataLoader(ds, batch_size=None, num_workers=2))
    assert sorted(by_workers, key=str) == sorted(_planned(ds, 2), key=str)
    batch = next(iter(_ds(image_structs)))
    assert type(batch["image"]).__name__ == "NumpyColumn" and batch["image"].dtype == object


def test_a_file_replaced_between_head_and_rest_is_not_mixed_in(
    images: Path, tmp_path: Path
) -> None:
    """The rest's page reads map the unit's own file again (its descriptor, not its path):
    with another file at the path now, the rest is the rest of the file the head came from."""
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(images, root)
    ds, parts, whole, n = _head_of_first_unit(root)
    path = ds.index.units[0].path
    other = pq.read_table(path)
    replaced = other.set_column(2, "image", pa.array([b"x" * 1500] * other.num_rows, pa.binary()))
    Path(path).unlink()  # a new file at the path (the open mapping keeps the old one)
    pq.write_table(replaced, path, row_group_size=SIZES[0][0])
    rest = parts.rest(0, 10, n - 10)
    assert rest is not None and rest.equals(whole.slice(10))


def test_a_file_grown_in_place_between_head_and_rest_is_read_from_the_units_map(
    images: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose size changed since its unit was opened (written to in place) is not
    mapped again for the rest: the rest's pages come from the unit's own mapping."""
    import shutil

    from shardwise.loader.read import unit_heads

    root = tmp_path / "copy"
    shutil.copytree(images, root)
    ds, parts, whole, n = _head_of_first_unit(root)
    with open(ds.index.units[0].path, "ab") as f:
        f.write(b"\0" * 4096)
    sources: list[Any] = []
    real = unit_heads.read_binary_dicts

    def reading(pf: Any, source: Any, *args: Any) -> Any:
        sources.append(source)
        return real(pf, source, *args)

    monkeypatch.setattr(unit_heads, "read_binary_dicts", reading)
    rest = parts.rest(0, 10, n - 10)
    assert rest is not None and rest.equals(whole.slice(10))
    assert len(sources) == 1 and isinstance(sources[0], pa.MemoryMappedFile)


def test_a_file_cut_short_in_place_between_head_and_rest_is_read_whole(
    images: Path, tmp_path: Path
) -> None:
    """A file truncated in place after its unit's head: the rest is not read from the
    unit's mapping, whose pages past the file's end would kill the process (SIGBUS, as the
    rest's page reads did), but left to a whole read, which names the damaged file."""
    import os
    import shutil

    from shardwise.errors import ShardwiseError

    root = tmp_path / "copy"
    shutil.copytree(images, root)
    ds, parts, whole, n = _head_of_first_unit(root)
    path = ds.index.units[0].path
    os.truncate(path, os.path.getsize(path) // 3)
    assert parts.rest(0, 10, n - 10) is None
    with pytest.raises(ShardwiseError, match="p0.parquet"):
        UnitReader(ds.index).read(0)


@pytest.fixture(scope="module")
def token_lists(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Token ids as ``list<int32>`` of 1,000-3,000 values a row, pyarrow's defaults."""

    def tokens(ids: np.ndarray, values: list[bytes]) -> pa.Array:
        return pa.array(
            [np.frombuffer(v, np.uint8).astype(np.int32) for v in values], pa.list_(pa.int32())
        )

    return _write_images(tmp_path_factory.mktemp("token_lists"), 6, tokens)


def test_token_lists_are_read_in_parts(token_lists: Path) -> None:
    """Heads and rests of lists of any length equal whole reads (the heads read by Arrow,
    the rests from their pages: ``test_list_parts.py``), and the batches are the plan's
    rows with the values of whole reads."""
    check_head_and_rest(_ds(token_lists), "image", by_pages=False)
    got = [[(i, v.tolist()) for i, v in b] for b in _batches(_ds(token_lists))]
    planned = _planned(_ds(token_lists), 1)
    assert len(got) > 10 and got == planned
