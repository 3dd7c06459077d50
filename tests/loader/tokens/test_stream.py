"""TokenStream: decoded sequences give the documents back, equal steps, resume, mixing by
token weights, stats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tokendata import make_token_shards

from shardwise import ConfigError, FormatError, PlanError, Source
from shardwise.loader.tokens import TokenStream
from shardwise.ops.tokens import load_tokenizer
from shardwise.plan.sequences import sequence_tokens


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    return make_token_shards(tmp_path_factory.mktemp("tokstream"))


def _real(batch: dict[str, Any]) -> list[np.ndarray]:
    return [row[mask] for row, mask in zip(batch["input_ids"], batch["loss_mask"])]


def test_concat_in_file_order_is_the_corpus(shards: tuple[Path, str, list[str]]) -> None:
    path, tok, texts = shards
    ds = TokenStream(str(path), seq_len=64, batch_size=1, shuffle=False)
    flat = np.concatenate([seq for b in ds for seq in _real(b)])
    eos = ds.units.info.eos_id
    ends = np.flatnonzero(flat == eos)
    decode = load_tokenizer(tok)[0].decode
    docs = [decode(d.tolist()) for d in np.split(flat, ends + 1)[:-1]]
    by_id = sorted(range(len(texts)), key=lambda i: (i % 3, i))  # file order of the shards
    assert docs == [texts[i] for i in by_id][: len(docs)]
    assert len(flat) > ds.stats()["sources"]["all"]["tokens"] - 64  # a tail under one sequence


def test_a_state_before_the_first_batch_needs_no_iteration(
    shards: tuple[Path, str, list[str]],
) -> None:
    """A checkpoint at step 0 (before any batch) is the whole epoch; a later step needs
    the workers given, as StreamingDataset's does."""
    path, _, _ = shards
    ds = TokenStream(str(path), seq_len=128, batch_size=2, seed=3, world_size=1, rank=0)
    state = ds.state_dict(0)
    again = TokenStream(str(path), seq_len=128, batch_size=2, seed=3)
    again.load_state_dict(state)
    assert [b["input_ids"].tobytes() for b in again] == [b["input_ids"].tobytes() for b in ds]
    fresh = TokenStream(str(path), seq_len=128, batch_size=2, seed=3)
    with pytest.raises(PlanError, match="cannot tell how many DataLoader workers"):
        fresh.state_dict(1)
    given = TokenStream(str(path), seq_len=128, batch_size=2, seed=3, num_workers=1)
    assert given.state_dict(1)["resumes"][0]["consumed_batches"] == 1


@pytest.mark.parametrize("packing", ["concat", "best_fit", "pad"])
def test_ranks_take_equal_steps_and_every_token_once(
    shards: tuple[Path, str, list[str]], packing: str
) -> None:
    path, tok, _ = shards
    per_rank = []
    for rank in range(3):
        ds = TokenStream(
            str(path), seq_len=200, batch_size=2, packing=packing, rank=rank, world_size=3, seed=5
        )
        per_rank.append(list(ds))
        assert len(per_rank[-1]) == len(ds)
    assert len({len(b) for b in per_rank}) == 1
    got = Counter(t for bs in per_rank for b in bs for seq in _real(b) for t in seq.tolist())
    stats = ds.stats()
    s = stats["sources"]["all"]
    left = stats["sequences_left_out"]
    assert left < 3 * 2
    data = Counter(t for u in range(len(ds.docs)) for t in ds.units.read(u)[0].tolist())
    assert not got - data  # nothing twice, nothing foreign
    missing = sum((data - got).values())
    assert missing <= left * 200 and (missing == 0) == (left == 0)
    assert sum(got.values()) == s["tokens"] - missing
    for b in per_rank[0]:
        assert b["input_ids"].shape == (2, 200)
        starts = b["position_ids"] == 0
        changes = np.diff(b["document_ids"], axis=1) != 0
        assert ((changes & b["loss_mask"][:, 1:]) == starts[:, 1:] & b["loss_mask"][:, 1:]).all()


def test_pad_sequences_decode_to_whole_documents(shards: tuple[Path, str, list[str]]) -> None:
    path, tok, texts = shards
    probe = TokenStream(str(path), seq_len=8, packing="pad")
    longest = int(probe.lengths.max())
    ds = TokenStream(str(path), seq_len=longest, batch_size=4, packing="pad", seed=1)
    decode = load_tokenizer(tok)[0].decode
    got = [decode(seq[:-1].tolist()) for b in ds for seq in _real(b)]
    assert len(got) == len(texts) - ds.stats()["sequences_left_out"]
    assert not Counter(got) - Counter(texts)  # the corpus has a few repeated articles
    assert ds.stats()["sources"]["all"]["split_documents"] == 0


def test_resume_continues_at_the_next_sequence(shards: tuple[Path, str, list[str]]) -> None:
    path, _, _ = shards
    ds = TokenStream(str(path), seq_len=128, batch_size=2, packing="best_fit", seed=3)
    full = [b["input_ids"] for b in ds]
    ds.set_epoch(0)
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = ds.state_dict(5)
    again = TokenStream(str(path), seq_len=128, batch_size=2, packing="best_fit", seed=3)
    again.load_state_dict(state)
    rest = [b["input_ids"] for b in again]
    assert len(rest) == len(full) - 5
    assert all((a == b).all() for a, b in zip(full[5:], rest))
    elastic = [
        TokenStream(
            str(path), seq_len=128, batch_size=2, packing="best_fit", seed=3, rank=r, world_size=2
        )
        for r in range(2)
    ]
    for e in elastic:
        e.load_state_dict(state)
    consumed = Counter(x.tobytes() for b in full[:5] for x in b)
    after = Counter(x.tobytes() for e in elastic for b in e for x in b["input_ids"])
    plan = ds.plan()
    every = Counter(
        np.pad(ids, (0, 128 - len(ids)), constant_values=ds.pad_id).astype(np.int64).tobytes()
        for u in range(len(ds.docs))
        for ids, _ in (
            sequence_tokens(*ds.units.read(u), plan.packed(u), k) for k in range(ds.counts[u])
        )
    )
    assert not (consumed + after) - every  # no sequence twice (the corpus repeats a few)
    assert sum(every.values()) - sum((consumed + after).values()) < 2 * 2  # the tail
    with pytest.raises(ConfigError, match="seq_len"):
        TokenStream(str(path), seq_len=64, seed=3).load_state_dict(state)


@pytest.mark.parametrize("packing", ["concat", "best_fit", "pad"])
@pytest.mark.parametrize("seq_len", [0, -1, 2.5])
def test_a_sequence_length_under_one_is_refused_by_every_packing(
    shards: tuple[Path, str, list[str]], packing: str, seq_len: Any
) -> None:
    with pytest.raises(ConfigError, match="seq_len and buffer must be whole numbers"):
        TokenStream(str(shards[0]), seq_len=seq_len, packing=packing)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 2.5}, "batch_size must be an integer, got 2.5"),  # was a TypeError
        ({"batch_size": True}, "batch_size must be an integer, got True"),  # was batches of 1
        ({"batch_size": "2"}, "batch_size must be an integer"),
        ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
        ({"seed": 2.5}, "seed must be an integer, got 2.5"),  # was taken
        ({"seed": -1}, "seed must be at least 0, got -1"),
        ({"shuffle": "no"}, "shuffle must be True or False"),  # was true
        ({"drop_last": 0}, "drop_last must be True or False"),
        ({"canonical_workers": 2.5}, "canonical_workers must be an integer"),  # was 2
        ({"world_size": 2.5}, "world_size must be an integer, got 2.5"),  # was an AxisError
        ({"rank": True}, "rank must be an integer, got True"),
        ({"prefetch_units": -1}, "prefetch_units must be at least 0, got -1"),
        ({"prefetch_units": 1.5}, "prefetch_units must be an integer"),
        ({"batch_format": "arrow"}, "batch_format must be one of 'numpy', 'torch'"),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(
    shards: tuple[Path, str, list[str]], kwargs: dict[str, Any], match: str
) -> None:
    """A wrong type or value is refused at once, naming the argument: never cut to a whole
    number, taken as truthy, or a raw TypeError from deep in the plan."""
    with pytest.raises(ConfigError, match=match):
        TokenStream(str(shards[0]), seq_len=32, **kwargs)


def test_bad_epochs_and_steps_are_config_errors(shards: tuple[Path, str, list[str]]) -> None:
    ds = TokenStream(str(shards[0]), seq_len=32, num_workers=1, batch_size=np.int64(2))
    assert ds.batch_size == 2  # numpy integers are integers
    for call, match in (
        (lambda: ds.set_epoch(2.5), "epoch must be an integer"),  # was epoch 2
        (lambda: ds.set_epoch(-1), "epoch must be at least 0"),
        (lambda: ds.state_dict(-1), "consumed_batches must be at least 0"),
        (lambda: ds.state_dict(1.5), "consumed_batches must be an integer"),  # was 1
    ):
        with pytest.raises(ConfigError, match=match):
            call()


def test_sources_mix_by_token_weight(shards: tuple[Path, str, list[str]]) -> None:
    path, _, _ = shards
    a, b = Source(str(path), weight=1, name="a"), Source(str(path), weight=3, name="b")
    ds = TokenStream([a, b], seq_len=100, batch_size=2, seed=2)
    assert ds.units.count_column == "num_tokens"  # lengths from the counts, not the tokens
    stats = ds.stats()["sources"]
    total = stats["a"]["epoch_tokens"] + stats["b"]["epoch_tokens"]
    assert abs(stats["a"]["epoch_tokens"] / total - 0.25) < 100 * 2 / total
    batches = list(ds)
    assert sum(len(x["input_ids"]) for x in batches) * 100 == total


def test_dataloader_workers_follow_epochs_and_state(shards: tuple[Path, str, list[str]]) -> None:
    from torch.utils.data import DataLoader

    path, _, _ = shards
    ds = TokenStream(str(path), seq_len=256, batch_size=2, num_workers=2, seed=4)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)

    def epoch() -> list[bytes]:
        return [x.numpy().tobytes() for b in loader for x in b["input_ids"]]

    first, second = epoch(), epoch()  # persistent workers advance by themselves
    assert len(first) == len(second) == 2 * len(ds) and first != second
    assert Counter(first) == Counter(second) or len(first) < ds.counts.sum()
    ds.set_epoch(0)
    assert epoch() == first
    inline = TokenStream(str(path), seq_len=256, batch_size=2, seed=4, num_workers=2)
    assert len(inline) == len(ds)
    state = ds.state_dict(3)
    assert state["resumes"][0]["topology"]["num_workers"] == 2
    ds.load_state_dict(state)
    assert epoch() == first[3 * 2 :]


def test_workers_of_a_dataloader_without_workers_mean_in_process(
    shards: tuple[Path, str, list[str]],
) -> None:
    """``num_workers=0`` (a DataLoader's count when it loads in-process) is one worker, as
    for ``StreamingDataset``; a negative count is refused when the stream is made."""
    from torch.utils.data import DataLoader

    path, _, _ = shards
    kw: dict[str, Any] = {"seq_len": 256, "batch_size": 2, "seed": 4}
    ds = TokenStream(str(path), num_workers=0, **kw)
    one = TokenStream(str(path), num_workers=1, **kw)
    got = [b["input_ids"].numpy().tobytes() for b in DataLoader(ds, batch_size=None)]
    assert len(ds) == len(one) == len(got)
    assert got == [b["input_ids"].tobytes() for b in one]
    assert ds.state_dict(2) == one.state_dict(2)
    with pytest.raises(ConfigError, match="num_workers must be at least 0, got -1"):
        TokenStream(str(path), num_workers=-1, **kw)


def test_a_stream_given_workers_and_iterated_in_process_streams_the_whole_share(
    shards: tuple[Path, str, list[str]],
) -> None:
    """Iterated in the training process (``for batch in ds``, a DataLoader without
    workers), a stream given ``num_workers=2`` is the rank's one worker, as
    ``StreamingDataset`` is: worker 0 of 2 would leave the other half of the epoch out."""
    from torch.utils.data import DataLoader

    path, _, _ = shards
    kw: dict[str, Any] = {"seq_len": 256, "batch_size": 2, "seed": 4}
    want = [b["input_ids"].tobytes() for b in TokenStream(str(path), **kw)]
    ds = TokenStream(str(path), num_workers=2, **kw)
    assert [b["input_ids"].tobytes() for b in ds] == want
    loader = DataLoader(TokenStream(str(path), num_workers=2, **kw), batch_size=None)
    assert [b["input_ids"].numpy().tobytes() for b in loader] == want
    assert ds.state_dict(3)["resumes"][0]["topology"]["num_workers"] == 1


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
def test_fields_choose_the_arrays_and_keep_their_values(
    shards: tuple[Path, str, list[str]], packing: str
) -> None:
    path, _, _ = shards
    full = list(TokenStream(str(path), seq_len=48, batch_size=3, packing=packing, seed=2))
    for fields in [("input_ids",), ("cu_seqlens", "labels")]:
        ds = TokenStream(
            str(path), seq_len=48, batch_size=3, packing=packing, seed=2, fields=fields
        )
        got = list(ds)
        assert len(got) == len(full) > 0
        for a, b in zip(got, full):
            assert sorted(a) == sorted(fields)
            assert all(np.array_equal(a[f], b[f]) for f in fields)
    with pytest.raises(ConfigError, match="fields"):
        TokenStream(str(path), seq_len=48, fields=("input_ids", "tokens"))


def test_fresh_workers_and_inline_passes_advance_epochs_by_themselves(
    shards: tuple[Path, str, list[str]],
) -> None:
    from torch.utils.data import DataLoader

    path, _, _ = shards
    kw: dict[str, Any] = {"seq_len": 256, "batch_size": 2, "num_workers": 2, "seed": 4}

    def epoch(ds: Any) -> list[bytes]:
        loader = DataLoader(ds, batch_size=None, num_workers=2)  # fresh workers each pass
        return [x.numpy().tobytes() for b in loader for x in b["input_ids"]]

    ds = TokenStream(str(path), **kw)
    first, second = epoch(ds), epoch(ds)
    assert first != second and ds.epoch == 1 and ds.state_dict(0)["epoch"] == 1
    ref = TokenStream(str(path), **kw)
    ref.set_epoch(1)
    assert epoch(ref) == second
    ds.set_epoch(0)
    assert epoch(ds) == first and ds.epoch == 0
    inline = TokenStream(str(path), seq_len=256, batch_size=2, seed=4)
    one, two = list(inline), list(inline)
    assert inline.epoch == 1 and inline.state_dict(0)["epoch"] == 1
    again = TokenStream(str(path), seq_len=256, batch_size=2, seed=4)
    again.set_epoch(1)
    assert all(np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(list(again), two))
    assert any(not np.array_equal(a["input_ids"], b["input_ids"]) for a, b in zip(one, two))


def test_units_are_views_of_the_shards_equal_to_arrows_read(
    shards: tuple[Path, str, list[str]],
) -> None:
    from shardwise._tokens import flat_tokens
    from shardwise.loader.tokens.mapped import mapped_tokens

    path, _, _ = shards
    ds = TokenStream(str(path), seq_len=64)
    u = ds.units
    for unit in range(len(ds.docs)):
        mapped = mapped_tokens(u.index, unit, u.column, "num_tokens", u.info)
        assert mapped is not None  # tokenize lays every row group out for the view
        tokens, offsets = flat_tokens(u.reader.read(unit).column(u.column), u.info.dtype)
        assert np.array_equal(mapped[0], tokens) and np.array_equal(mapped[1], offsets)
        assert np.array_equal(
            np.diff(offsets), ds.lengths[ds.plan().doc_ends[unit] :][: len(offsets) - 1]
        )


COPY_DROPPED = """
import gc, pickle, sys
copy = pickle.loads(sys.stdin.buffer.read())  # another training process's copy
path = copy._channel.path
del copy
gc.collect()
print(path)
"""


def test_a_copy_in_another_process_leaves_the_creators_channel(
    shards: tuple[Path, str, list[str]],
) -> None:
    import gc
    import os
    import pickle
    import subprocess
    import sys

    path, _, _ = shards
    ds = TokenStream(str(path), seq_len=64, batch_size=2)
    ds.set_epoch(1)  # written to the channel for DataLoader workers
    control = f"{ds._channel.path}.control"
    assert os.path.exists(control)
    out = subprocess.run(
        [sys.executable, "-c", COPY_DROPPED],
        input=pickle.dumps(ds),
        capture_output=True,
        timeout=120,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode().strip() == ds._channel.path  # the copy named the same files
    assert os.path.exists(control)  # and left them to their creator
    del ds
    gc.collect()
    assert not os.path.exists(control)  # which removes them with its dataset


def test_an_empty_token_dataset_names_its_files(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = {b"shardwise.tokens": b'{"dtype": "<u2", "vocab_size": 300, "eos_id": 0}'}
    schema = pa.schema([pa.field("tokens", pa.binary(), metadata=meta), ("num_tokens", pa.int32())])
    pq.write_table(schema.empty_table(), tmp_path / "e.parquet")
    with pytest.raises(PlanError, match=r"nothing to stream: .*e\.parquet has no tokens"):
        TokenStream(str(tmp_path), seq_len=8, world_size=1, rank=0)


@pytest.mark.parametrize("packing", ["concat", "best_fit", "pad"])
@pytest.mark.parametrize("layout", ["arrow", "plain", "mapped", "mapped-swapped"])
def test_a_count_column_that_disagrees_with_the_tokens_is_refused(
    tmp_path: Path, packing: str, layout: str
) -> None:
    """The plan packs by the counts: one document's count off by one would repeat or lose
    a token, so the unit holding it is refused by name, on every way of reading it."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 2000, rng.integers(1, 60)).astype("<u2") for _ in range(120)]
    info = {"dtype": "<u2", "vocab_size": 2000, "eos_id": 0, "bos_id": None, "tokenizer": "x"}
    meta = {b"shardwise.tokens": json.dumps(info).encode()}
    counts = [len(d) for d in docs]
    counts[70] += 1
    if layout == "mapped-swapped":  # the same total: only each document's count tells
        counts[70] -= 1
        counts[70], counts[71] = counts[71] + 1, counts[70] - 1
    schema = pa.schema([pa.field("tokens", pa.binary(), metadata=meta), ("num_tokens", pa.int32())])
    table = pa.table([[d.tobytes() for d in docs], counts], schema=schema)
    plain = {"compression": "none", "use_dictionary": False, "write_statistics": False}
    mapped = plain | {"column_encoding": {"tokens": "DELTA_LENGTH_BYTE_ARRAY"}}  # tokenize's
    kw: dict[str, Any] = {"arrow": {}, "plain": plain}.get(layout, mapped)
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=40, **kw)
    ds = TokenStream(str(tmp_path), seq_len=16, batch_size=2, packing=packing, world_size=1, rank=0)
    said = r"'num_tokens' says \d+ tokens for document 30 of the unit"
    with pytest.raises(FormatError, match=said) as err:
        for _ in ds:
            pass
    assert (err.value.path, err.value.location) == (str(tmp_path / "a.parquet"), "unit 1")


@pytest.mark.parametrize("packing", ["concat", "best_fit"])
@pytest.mark.parametrize("damage", ["odd bytes", "null count", "negative count"])
def test_damaged_tokens_and_counts_are_refused_naming_file_and_unit(
    tmp_path: Path, packing: str, damage: str
) -> None:
    """A token value of no whole number of ids, a null count and a negative one are
    FormatErrors naming the file and unit, as a count that disagrees is."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    info = {"dtype": "<u2", "vocab_size": 100, "eos_id": 0, "bos_id": None, "tokenizer": "x"}
    meta = {b"shardwise.tokens": json.dumps(info).encode()}
    tokens: list[bytes] = [b"\x01\x00\x02\x00"] * 30
    counts: list[int | None] = [2] * 30
    if damage == "odd bytes":
        tokens[25] = b"\x01\x00\x02"
    else:
        counts[25] = None if damage == "null count" else -2
    schema = pa.schema([pa.field("tokens", pa.binary(), metadata=meta), ("num_tokens", pa.int32())])
    pq.write_table(
        pa.table([tokens, counts], schema=schema), tmp_path / "a.parquet", row_group_size=10
    )
    with pytest.raises(FormatError) as err:
        ds = TokenStream(str(tmp_path), seq_len=4, packing=packing, world_size=1, rank=0)
        for _ in ds:
            pass
    assert (err.value.path, err.value.location) == (str(tmp_path / "a.parquet"), "unit 2")
    if damage == "negative count":
        assert "says -2 tokens for document 5 of the unit" in str(err.value)
