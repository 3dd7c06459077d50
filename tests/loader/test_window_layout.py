"""The default ``first_window="auto"`` and states that carry their epoch's windows: head
windows where the rule says, whole units elsewhere; a state saved with whole units (as by
the old default) or with head windows continues exactly under the default, in process,
through DataLoader workers (also persistent ones, told through the channel), on another
topology, mixed and with canonical workers; explicit settings refuse the other kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from shardwise import Source, StreamingDataset
from shardwise.errors import PlanError
from shardwise.loader.planner import MIN_AUTO_BLOCKS, MIN_AUTO_HEAD_BYTES
from shardwise.loader.window_layout import PLAIN_KEY, split_blocks, with_blocks

UNITS, ROWS, BATCH = 24, 250, 16
N = UNITS * ROWS
# stored bytes per row that make a unit large enough for the default's head windows
PAD = MIN_AUTO_HEAD_BYTES // ROWS + 64


def _write(root: Path, units: int = UNITS, start: int = 0, pad: int = PAD) -> Path:
    root.mkdir(parents=True)
    rng = np.random.default_rng(start)
    for f in range(2):
        ids = np.arange(start + f * units // 2 * ROWS, start + (f + 1) * units // 2 * ROWS)
        blobs = rng.integers(0, 256, (len(ids), pad), dtype=np.uint8)
        pads = pa.array([row.tobytes() for row in blobs], pa.binary())
        table = pa.table({"id": ids, "label": ids // ROWS % 10, "pad": pads})
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=ROWS)
    return root


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("layout") / "ds")


def _ds(data: Path, **kw: Any) -> Any:
    args: dict[str, Any] = dict(batch_size=BATCH, seed=3, batch_format="numpy", interleave=12)
    return StreamingDataset(str(data), columns=["id", "label"], **(args | kw))


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in np.asarray(batch["id"]).ravel()]


def _run(ds: Any, workers: int = 0, steps: int | None = None) -> list[int]:
    seen: list[int] = []
    for step, batch in enumerate(DataLoader(ds, batch_size=None, num_workers=workers)):
        seen += _ids(batch)
        if step + 1 == steps:
            break
    return seen


def test_the_default_plans_head_windows_where_the_rule_says(data: Path, tmp_path: Path) -> None:
    auto = _ds(data)
    assert auto.blocks == _ds(data, first_window="heads").blocks == 12 >= MIN_AUTO_BLOCKS
    assert _ds(data, first_window=None).blocks == 1
    assert _ds(data, interleave=6).blocks == 1  # heads of 1/6 of a unit: too much mixing cost
    assert _ds(data, interleave=6, first_window="heads").blocks == 6
    assert _ds(data, batching="stratified").blocks == 1
    assert _ds(data, shuffle=False).blocks == 1  # stored order asked for
    assert _ds(data, filter=pc.field("id") >= 0).blocks == 1  # read whole and cut: no gain
    assert _ds(data, epoch_size=N // 2).blocks == 12  # one source, dealt at random
    mixed = [Source(str(data)), Source(str(_write(tmp_path / "b", start=N)))]
    assert StreamingDataset(mixed, batch_size=BATCH, interleave=12).blocks == 1
    # never the storage: the node cache plans the same epochs
    cached = _ds(data, cache_dir=str(tmp_path / "cache"))
    assert cached.blocks == auto.blocks
    assert _run(cached) == _run(auto)
    # a head window of less than a batch, or heads under 16 rows: whole units
    assert _ds(data, batch_size=1024).blocks == 1


def test_the_default_reads_small_units_whole(tmp_path: Path) -> None:
    """A unit of less than ``MIN_AUTO_HEAD_BYTES`` stored costs about as much to read in
    a head as whole: the default reads it whole, asked-for heads still read heads."""
    small = _write(tmp_path / "small", pad=0)
    assert _ds(small).blocks == 1
    assert _ds(small, first_window="heads").blocks == 12


def test_the_keys_of_saved_windows() -> None:
    assert with_blocks(None, 1) is None and split_blocks(None) == (None, 1)
    assert split_blocks(with_blocks(None, 5)) == (None, 5)
    assert split_blocks(with_blocks(PLAIN_KEY | {"layout": 2}, 3)) == (PLAIN_KEY | {"layout": 2}, 3)
    with pytest.raises(PlanError, match="head windows lay out"):
        split_blocks({"blocks": {"k": 3, "layout": 99}})
    with pytest.raises(PlanError, match="not a loader state"):
        split_blocks({"blocks": {"k": True, "layout": 4}})


@pytest.mark.parametrize(("first", "then"), [(0, 0), (2, 2), (2, 0), (0, 2)])
@pytest.mark.parametrize("saved_with", [None, "heads"])
def test_a_state_continues_its_epoch_under_the_default(
    data: Path, first: int, then: int, saved_with: str | None
) -> None:
    """Saved with whole units (the old default) where the default plans heads (k = 12), or
    with heads (k = 6) where the default plans whole units (interleave 6)."""
    interleave = 6 if saved_with else 12
    saved = {"first_window": saved_with, "interleave": interleave}
    ds = _ds(data, **saved)
    before = _run(ds, first, steps=7)
    state = ds.state_dict(consumed_batches=7)
    assert ("mixing" in state) == (saved_with is not None)  # the old default's state, as was
    default = _ds(data, interleave=interleave)
    assert default.blocks == (1 if saved_with else 12)
    default.load_state_dict(state)
    assert default.state.epoch_blocks() == (6 if saved_with else 1)
    after = _run(default, then)
    if first == then:
        assert before + after == _run(_ds(data, **saved), first)  # the uninterrupted epoch
    else:  # elastic: what the saved setting itself continues on this topology
        again = _ds(data, **saved)
        again.load_state_dict(state)
        assert after == _run(again, then)
        assert len(set(before + after)) == len(before + after)
        assert N - len(before + after) < 4 * BATCH
    fresh = _ds(data, interleave=interleave)
    fresh.set_epoch(1)
    assert _run(default, then) == _run(fresh, then)  # the next epoch is the default's own


def test_a_state_continues_on_another_world_size(data: Path) -> None:
    old = [_ds(data, first_window=None, rank=r, world_size=2) for r in range(2)]
    before = [i for ds in old for i in _run(ds, 2, steps=5)]
    state = old[0].state_dict(consumed_batches=5)
    after, expected = [], []
    for r in range(3):
        default = _ds(data, rank=r, world_size=3)
        default.load_state_dict(state)
        after += _run(default, 1)
        same = _ds(data, rank=r, world_size=3, first_window=None)
        same.load_state_dict(state)
        expected += _run(same, 1)
    assert after == expected
    assert len(set(before + after)) == len(before + after)
    assert N - len(before + after) < (2 * 2 + 3) * BATCH  # the remainders drop_last leaves


def test_persistent_workers_are_told_the_loaded_windows(data: Path) -> None:
    heads = _ds(data, first_window="heads", interleave=6)
    before = _run(heads, 0, steps=4)
    state = heads.state_dict(consumed_batches=4)
    default = _ds(data, interleave=6)  # its own: whole units
    loader = DataLoader(default, batch_size=None, num_workers=2, persistent_workers=True)
    whole = [i for b in loader for i in _ids(b)]  # the workers start, epoch 0 of whole units
    assert whole == _run(_ds(data, first_window=None, interleave=6), 2)
    default.load_state_dict(state)  # told to the running workers through the channel
    after = [i for b in loader for i in _ids(b)]
    expected = _ds(data, first_window="heads", interleave=6)
    expected.load_state_dict(state)
    assert after == _run(expected, 2)
    assert len(set(before + after)) == len(before + after)  # 1 slot, then 2: elastic
    assert N - len(before + after) < 3 * BATCH


def test_mixed_sources_and_canonical_workers_carry_their_windows(
    data: Path, tmp_path: Path
) -> None:
    other = _write(tmp_path / "b", start=N)
    mixed = [Source(str(data), weight=1), Source(str(other), weight=1)]
    kw: dict[str, Any] = dict(batch_size=BATCH, seed=1, batch_format="numpy", interleave=12)
    heads = StreamingDataset(mixed, first_window="heads", **kw)
    assert heads.blocks > 1
    before = _run(heads, steps=6)
    state = heads.state_dict(consumed_batches=6)
    default = StreamingDataset(mixed, **kw)
    assert default.blocks == 1
    default.load_state_dict(state)
    assert before + _run(default) == _run(StreamingDataset(mixed, first_window="heads", **kw))
    canon = _ds(data, first_window=None, canonical_workers=2)
    before = _run(canon, 2, steps=3)
    state = canon.state_dict(consumed_batches=3)
    default = _ds(data, canonical_workers=2)
    default.load_state_dict(state)
    assert before + _run(default, 0) == _run(_ds(data, first_window=None, canonical_workers=2))


def test_explicit_settings_refuse_a_state_of_the_other_kind(data: Path) -> None:
    heads = _ds(data, first_window="heads").state_dict(consumed_batches=0)
    whole = _ds(data, first_window=None).state_dict(consumed_batches=0)
    with pytest.raises(PlanError, match="planned with head windows.*first_window='auto'"):
        _ds(data, first_window=None).load_state_dict(heads)
    with pytest.raises(PlanError, match="planned with whole units.*first_window='auto'"):
        _ds(data, first_window="heads").load_state_dict(whole)
    _ds(data, first_window="heads", interleave=10).load_state_dict(heads)  # heads of another k
    _ds(data).load_state_dict(heads)
    _ds(data).load_state_dict(whole)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("saved_with", [None, "heads"])
def test_stateful_dataloader_worker_states_continue_under_the_default(
    data: Path, workers: int, saved_with: str | None
) -> None:
    """torchdata's StatefulDataLoader gathers each worker's own state (its position and
    its epoch's windows) and gives it back to the same worker of a default dataset."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    interleave = 6 if saved_with else 12  # the default plans the other kind of windows

    def loader(first_window: str | None = "auto") -> Any:
        ds = _ds(data, interleave=interleave, first_window=first_window, rank=0, world_size=1)
        return StatefulDataLoader(ds, batch_size=None, num_workers=workers)

    full = [i for b in loader(saved_with) for i in _ids(b)]
    it = iter(saving := loader(saved_with))
    before = [i for _ in range(9) for i in _ids(next(it))]
    state = saving.state_dict()
    del it
    resumed = loader()
    assert resumed.dataset.blocks == (1 if saved_with else 12)
    resumed.load_state_dict(state)
    assert before + [i for b in resumed for i in _ids(b)] == full
