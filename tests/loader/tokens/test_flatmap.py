"""The token layout in the dataset index: written when tokenize's output is indexed, used
when a stream opens (the same batches as without it), ignored when stale or of another
version, and a file changed since it was indexed refused by name."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from _tokendata import make_token_shards

from shardwise import FormatError, Source, index_dataset
from shardwise.index import INDEX_NAME
from shardwise.index.token_layout import LAYOUT_VERSION, layout_units
from shardwise.loader.tokens import TokenStream


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_token_shards(tmp_path_factory.mktemp("tokflat"))[0]


@pytest.fixture
def copy(shards: Path, tmp_path: Path) -> Path:
    out = tmp_path / "tokens"
    shutil.copytree(shards, out)
    (out / INDEX_NAME).unlink()
    return out


def _saved(root: Path) -> dict[str, Any]:
    payload = json.loads((root / INDEX_NAME).read_text())
    return dict(json.loads(payload["index"]))


def _batches(ds: Any) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in b.items()} for b in ds]


def test_tokenize_run_saves_every_row_groups_token_run(shards: Path) -> None:
    layout = _saved(shards)["tokens"]
    assert layout["version"] == LAYOUT_VERSION and layout["counts"] == {"tokens": "num_tokens"}
    files = sorted(shards.glob("*.parquet"))
    assert len(files) > 1 and sorted(layout["files"]) == [str(f) for f in files]
    for f in files:
        pf = pq.ParquetFile(f)
        runs = layout["files"][str(f)]["tokens"]
        assert len(runs) == pf.metadata.num_row_groups > 1
        raw = f.read_bytes()
        for g, (offset, count) in enumerate(runs):
            table = pf.read_row_group(g)
            assert count == sum(table.column("num_tokens").to_pylist())
            expected = b"".join(table.column("tokens").to_pylist())
            assert raw[offset : offset + 2 * count] == expected  # uint16 ids, back to back


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("fields", [("input_ids",), None])
def test_stream_opens_from_the_layout_with_the_same_batches(
    shards: Path, shuffle: bool, fields: tuple[str, ...] | None
) -> None:
    index = index_dataset(str(shards), progress=False)
    assert index.tokens is not None
    bare = replace(index, tokens=None)
    kw: dict[str, Any] = {"seq_len": 96, "batch_size": 3, "shuffle": shuffle, "seed": 2}
    kw |= {"fields": fields} if fields else {}
    for rank in range(2):
        kw |= {"rank": rank, "world_size": 2}
        ds = TokenStream(index, **kw)
        assert ds.units.flat is not None and ds._lengths is None  # nothing read to open
        got = _batches(ds)
        assert (ds._lengths is None) == (fields is not None)  # input_ids need no lengths
        old = TokenStream(bare, **kw)
        assert old.units.flat is None
        expected = _batches(old)
        assert len(got) == len(expected) == len(ds) > 0
        for a, b in zip(got, expected):
            assert a.keys() == b.keys()
            assert all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a)
        assert ds.stats() == old.stats() and np.array_equal(ds.counts, old.counts)


def test_resume_on_another_topology_from_the_layout(shards: Path) -> None:
    kw: dict[str, Any] = {"seq_len": 64, "batch_size": 2, "fields": ("input_ids",), "seed": 5}
    index = index_dataset(str(shards), progress=False)
    ds = TokenStream(index, **kw)
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = ds.state_dict(5)
    for rank in range(2):
        again = TokenStream(index, rank=rank, world_size=2, **kw)
        again.load_state_dict(state)
        old = TokenStream(replace(index, tokens=None), rank=rank, world_size=2, **kw)
        old.load_state_dict(state)
        got, expected = _batches(again), _batches(old)
        assert old.units.flat is None and len(got) == len(expected) > 0
        assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, expected))


def test_sources_take_their_own_layouts(shards: Path) -> None:
    from shardwise.plan.packing import count_sequences

    kw: dict[str, Any] = {"seq_len": 80, "batch_size": 2, "epoch_size": 6_000, "seed": 1}
    sources = [Source(str(shards), weight=1, name="a"), Source(str(shards), weight=2, name="b")]
    ds = TokenStream(sources, fields=("input_ids",), **kw)
    assert ds.units.flat is not None and len(ds.units.flat.totals) == len(ds.docs)
    plain = TokenStream(sources, **kw)
    plain.units.flat = None  # read as before: footers, num_tokens, Arrow
    got, expected = _batches(ds), _batches(plain)
    assert len(got) == len(expected) > 0
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, expected))
    assert np.array_equal(ds.counts, count_sequences(ds.lengths, ds.docs, 80))


def test_an_index_without_or_with_another_layout_is_laid_out_again(copy: Path) -> None:
    index_dataset(str(copy), progress=False)
    for stale in (None, {"version": LAYOUT_VERSION + 1, "files": {}}):
        payload = json.loads((copy / INDEX_NAME).read_text())
        inner = json.loads(payload["index"])
        inner.pop("tokens")
        if stale is not None:
            inner["tokens"] = stale
        payload["index"] = json.dumps(inner)
        (copy / INDEX_NAME).write_text(json.dumps(payload))
        index = index_dataset(str(copy), progress=False)
        assert index.tokens is not None and index.tokens["version"] == LAYOUT_VERSION
        assert _saved(copy)["tokens"] == index.tokens  # saved again
        assert layout_units(index, "tokens", "num_tokens") is not None


def test_layout_checked_against_another_count_column_is_not_used(shards: Path) -> None:
    index = index_dataset(str(shards), progress=False)
    assert layout_units(index, "tokens", "other_counts") is None
    assert layout_units(index, "tokens", None) is not None
    assert layout_units(index, "no_such_column", None) is None
    broken = replace(index, tokens={**index.tokens, "files": {}})  # type: ignore[dict-item]
    assert layout_units(broken, "tokens", "num_tokens") is None
    assert TokenStream(broken, seq_len=64).units.flat is None  # read as before


def test_a_file_of_another_layout_leaves_the_dataset_to_the_old_path(copy: Path) -> None:
    victim = sorted(copy.glob("*.parquet"))[0]
    table = pq.read_table(victim)
    pq.write_table(table, victim, row_group_size=16, compression="zstd")  # not mappable
    index = index_dataset(str(copy), progress=False)
    assert index.tokens is not None and index.tokens["files"][str(victim)] == {}
    assert _saved(copy)["tokens"] == index.tokens  # saved: not read again while unchanged
    again = index_dataset(str(copy), progress=False)
    assert again.reused_files == len(again.files) and again.tokens == index.tokens
    ds = TokenStream(str(copy), seq_len=64, fields=("input_ids",), shuffle=False)
    assert ds.units.flat is None
    assert sum(b["input_ids"].size for b in ds) > 0


@pytest.mark.parametrize("change", ["truncate", "grow", "rewrite"])
def test_a_file_changed_after_indexing_is_refused_by_name(copy: Path, change: str) -> None:
    index = index_dataset(str(copy), progress=False)
    victim = sorted(copy.glob("*.parquet"))[1]
    data = victim.read_bytes()
    st = victim.stat()
    if change == "truncate":
        victim.write_bytes(data[: len(data) // 2])
    elif change == "grow":
        victim.write_bytes(data + b"\0" * 64)
    else:  # the same size, another modification time
        victim.write_bytes(data[::-1])
        os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    ds = TokenStream(index, seq_len=64, fields=("input_ids",), shuffle=False)
    with pytest.raises(FormatError, match="changed since the dataset was indexed") as err:
        for _ in ds:
            pass
    assert err.value.path == str(victim)


_TRUNCATE_MIDWAY = """
import os, sys
import shardwise
from shardwise.loader.tokens import TokenStream
root, victim, fields = sys.argv[1], sys.argv[2], tuple(sys.argv[3].split(","))
it = iter(TokenStream(root, seq_len=64, batch_size=2, shuffle=False, fields=fields))
next(it)
os.truncate(victim, os.path.getsize(victim) // 2)
try:
    for _ in it:
        pass
except shardwise.FormatError as exc:
    print("refused:", exc.path)
"""


def test_a_file_truncated_while_streamed_is_refused_not_a_crash(copy: Path, tmp_path: Path) -> None:
    """Truncated in place after the stream mapped it: the next unit of it laid out is
    refused by name. Touching a mapped page past the new end would end the process with
    SIGBUS, so the stream runs in a process of its own."""
    import subprocess
    import sys

    index_dataset(str(copy), progress=False)
    victim = sorted(copy.glob("*.parquet"))[0]
    script = tmp_path / "truncate.py"
    script.write_text(_TRUNCATE_MIDWAY)
    done = subprocess.run(
        [sys.executable, str(script), str(copy), str(victim), "input_ids"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"refused: {victim}"


def test_files_off_local_disks_are_not_mapped(
    shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardwise.loader.tokens.flatmap as flatmap

    monkeypatch.setattr(flatmap, "mappable", lambda path: False)  # e.g. NFS or FUSE
    ds = TokenStream(str(shards), seq_len=64, fields=("input_ids",))
    assert ds.units.flat is None and sum(b["input_ids"].size for b in ds) > 0


def test_many_files_are_laid_out_on_threads_as_on_one(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardwise.index.token_layout as token_layout

    serial = index_dataset(str(copy), progress=False, refresh=True).tokens
    monkeypatch.setattr(token_layout, "SERIAL_FILES", 0)
    threaded = index_dataset(str(copy), progress=False, refresh=True).tokens
    assert threaded == serial and serial is not None and len(serial["files"]) > 1


def test_lengths_that_disagree_with_the_layout_are_refused(shards: Path) -> None:
    import copy as copying

    index = index_dataset(str(shards), progress=False)
    tampered = copying.deepcopy(index.tokens)
    assert tampered is not None
    path, entry = next(iter(tampered["files"].items()))
    entry["tokens"][0][1] -= 1  # one token fewer than num_tokens says
    ds = TokenStream(replace(index, tokens=tampered), seq_len=64)
    assert ds.units.flat is not None
    with pytest.raises(FormatError, match="disagree with the dataset index") as err:
        ds.stats()
    assert err.value.path is not None and err.value.path.removeprefix("file://") == path


def test_units_and_maps_evicted_and_needed_again_give_the_same_batches(
    shards: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardwise.loader.tokens.flatmap as flatmap

    monkeypatch.setattr(flatmap, "KEEP_UNITS", 1)
    monkeypatch.setattr(flatmap, "KEEP_MAPS", 1)
    index = index_dataset(str(shards), progress=False)
    kw: dict[str, Any] = {"seq_len": 48, "batch_size": 4, "fields": ("input_ids",), "seed": 7}
    ds = TokenStream(index, **kw)
    got = _batches(ds)
    expected = _batches(TokenStream(replace(index, tokens=None), **kw))
    assert ds.units.flat is not None and len(ds.units.flat._maps) == 1
    assert len(got) == len(expected) > 0
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, expected))


def test_tokenize_on_the_local_backend_saves_the_same_layout(shards: Path, tmp_path: Path) -> None:
    from _tokenizer import EOS

    from shardwise.pipeline import read_jsonl

    root = shards.parent  # the fixture's inputs and tokenizer
    out = tmp_path / "tokens"
    (
        read_jsonl(str(root / "*.jsonl"))
        .apply("tokenize", tokenizer=str(root / "tokenizer.json"), eos=EOS)
        .apply("drop_columns", columns=["text"])
        .write(str(out), row_group_rows=16, target_shard_bytes=200_000)
        .run(backend="local", num_proc=2, progress=False)
    )
    ours, theirs = _saved(out)["tokens"], _saved(shards)["tokens"]
    assert {Path(p).name: v for p, v in ours["files"].items()} == {
        Path(p).name: v for p, v in theirs["files"].items()
    }
    assert ours["counts"] == theirs["counts"] and len(ours["files"]) > 1
    ds = TokenStream(str(out), seq_len=64, fields=("input_ids",), shuffle=False)
    assert ds.units.flat is not None and ds._lengths is None
    expected = TokenStream(str(shards), seq_len=64, fields=("input_ids",), shuffle=False)
    got = _batches(ds)
    assert len(got) == len(expected) > 0
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(got, expected))
