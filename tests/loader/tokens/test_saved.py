"""TokenStream states record what decides the epoch's plan and refuse a stream planned
otherwise; user mistakes (pad_id, a state of another kind, sources tokenized otherwise)
are ShardwiseErrors naming what is wrong; epoch_size counts for a single path too."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _tokendata import make_token_shards

from shardwise import ConfigError, FormatError, PlanError, Source, StreamingDataset
from shardwise._tokens import TokenInfo, token_array
from shardwise.loader.tokens import TokenStream

BASE: dict[str, Any] = {"seq_len": 32, "batch_size": 2, "seed": 1, "world_size": 1, "rank": 0}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_token_shards(tmp_path_factory.mktemp("toksaved"), docs=90)[0]


def _state(ds: Any, steps: int = 3) -> dict[str, Any]:
    it = iter(ds)
    for _ in range(steps):
        next(it)
    return dict(ds.state_dict(steps))


@pytest.mark.parametrize(
    ("saved", "loaded", "match"),
    [
        ({"packing": "best_fit"}, {"packing": "best_fit", "buffer": 8}, "buffer=1024"),
        ({}, {"shuffle": False}, "shuffle=True"),
        ({}, {"canonical_workers": 4}, r"mixing=None, this stream .*'canonical_workers': 4"),
        ({}, {"epoch_size": 32 * 20}, r"mixing=None, this stream .*'epoch_size': 640"),
    ],
)
def test_a_state_of_another_plan_is_refused(
    shards: Path, saved: dict[str, Any], loaded: dict[str, Any], match: str
) -> None:
    state = _state(TokenStream(str(shards), **BASE, **saved))
    with pytest.raises(PlanError, match=match):
        TokenStream(str(shards), **BASE, **loaded).load_state_dict(state)


def test_a_state_of_other_sources_weights_or_data_is_refused(shards: Path) -> None:
    def mixed(w: float) -> Any:
        return TokenStream(
            [Source(str(shards), weight=w, name="a"), Source(str(shards), weight=1 - w, name="b")],
            **BASE,
        )

    state = _state(mixed(0.75))
    with pytest.raises(PlanError, match="rules="):
        mixed(0.25).load_state_dict(state)
    with pytest.raises(PlanError, match="another dataset"):  # twice the units
        TokenStream(str(shards), **BASE).load_state_dict(state)
    mixed(0.75).load_state_dict(state)  # the same plan continues


def test_a_state_continues_on_another_topology(shards: Path) -> None:
    """World size, batch size and drop_last are the resume points' own (elastic resume)."""
    ds = TokenStream(str(shards), **BASE)
    full = Counter(s.tobytes() for b in TokenStream(str(shards), **BASE) for s in b["input_ids"])
    first = Counter(s.tobytes() for b in list(ds)[:3] for s in b["input_ids"])
    ds.set_epoch(0)
    state = _state(ds)
    rest: Counter[bytes] = Counter()
    for rank in range(2):
        kw = {**BASE, "rank": rank, "world_size": 2, "batch_size": 3, "drop_last": False}
        again = TokenStream(str(shards), **kw)
        again.load_state_dict(state)
        rest.update(s.tobytes() for b in again for s in b["input_ids"])
    assert not full - (first + rest)  # nothing lost; only the new topology's padding repeats
    assert sum((first + rest - full).values()) < 2 * 3


def test_a_state_saved_before_the_record_is_checked_as_then(shards: Path) -> None:
    ds = TokenStream(str(shards), **BASE)
    state = _state(ds)
    old = {k: state[k] for k in ("version", "epoch", "seed", "seq_len", "packing", "resumes")}
    again = TokenStream(str(shards), **BASE)
    again.load_state_dict(old)
    assert len(list(again)) == len(ds) - 3
    with pytest.raises(ConfigError, match="seq_len=32"):
        TokenStream(str(shards), **{**BASE, "seq_len": 16}).load_state_dict(old)


@pytest.mark.parametrize("pad_id", [-1, 70_000, 10**9, True, 2.0])
def test_a_pad_id_outside_the_vocabulary_is_refused(shards: Path, pad_id: Any) -> None:
    with pytest.raises(ConfigError, match="pad_id must be"):
        TokenStream(str(shards), **BASE, pad_id=pad_id)


def test_a_state_of_another_kind_is_a_config_error(shards: Path) -> None:
    sd = StreamingDataset(str(shards), batch_size=2, columns=["id"], world_size=1, rank=0)
    with pytest.raises(ConfigError, match=r"StreamingDataset's state\?.*seq_len"):
        TokenStream(str(shards), **BASE).load_state_dict(sd.state_dict(0))
    state = _state(TokenStream(str(shards), **BASE))
    for broken in [
        {k: v for k, v in state.items() if k != "resumes"},
        {**state, "resumes": [{"consumed_batches": 1}]},
        {**state, "resumes": 3},
        "not a state",
    ]:
        with pytest.raises(ConfigError, match="state"):
            TokenStream(str(shards), **BASE).load_state_dict(broken)  # type: ignore[arg-type]


def test_epoch_size_counts_for_a_single_path(shards: Path) -> None:
    one = TokenStream(str(shards), **BASE, epoch_size=32 * 40)
    mixed = TokenStream([Source(str(shards))], **BASE, epoch_size=32 * 40)
    assert len(one) == len(mixed) == 20 == len(list(one))
    assert one.stats()["sources"]["all"]["epoch_tokens"] == 32 * 40


def _write(root: Path, info: TokenInfo, text: bool, n: int = 40) -> str:
    root.mkdir()
    docs = [np.arange(1 + i % 7, dtype=info.dtype) + 5 for i in range(n)]
    flat = np.concatenate(docs)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])])
    cols = {
        "tokens": token_array(flat, offsets),
        "num_tokens": pa.array([len(d) for d in docs], pa.int32()),
    }
    schema = pa.schema([info.field("tokens"), pa.field("num_tokens", pa.int32())])
    if text:
        cols["text"] = pa.array(["x"] * len(docs))
        schema = schema.append(pa.field("text", pa.string()))
    pq.write_table(pa.table(cols, schema=schema), root / "part.parquet", row_group_size=10)
    return str(root)


def test_a_state_of_other_data_is_refused(tmp_path: Path) -> None:
    info = TokenInfo("<u2", 100, eos_id=0, tokenizer="abc")
    a, b = _write(tmp_path / "a", info, False), _write(tmp_path / "b", info, False, n=60)
    kw = {**BASE, "seq_len": 4}
    with pytest.raises(PlanError, match="another dataset"):
        TokenStream(b, **kw).load_state_dict(_state(TokenStream(a, **kw)))


def test_sources_of_other_eos_are_refused_naming_it(tmp_path: Path) -> None:
    eos = TokenInfo("<u2", 100, eos_id=0, bos_id=1, tokenizer="abc")
    plain = TokenInfo("<u2", 100, tokenizer="abc")
    a, b = _write(tmp_path / "a", eos, True), _write(tmp_path / "b", plain, False)
    sources = [Source(a, name="a"), Source(b, name="b")]
    with pytest.raises(ConfigError, match="'a' and 'b' were tokenized with different eos/bos"):
        TokenStream(sources, **BASE)
    other = _write(
        tmp_path / "c", TokenInfo("<u2", 100, eos_id=0, bos_id=1, tokenizer="def"), False
    )
    with pytest.raises(ConfigError, match="'a' and 'c' hold 'tokens' of different tokenizers"):
        TokenStream([Source(a, name="a"), Source(other, name="c")], **BASE)
    same = _write(tmp_path / "d", eos, False)  # no text column: it is not read
    ds = TokenStream([Source(a, name="a"), Source(same, name="d")], **BASE)
    assert ds.units.count_column == "num_tokens" and len(list(ds)) == len(ds) > 0


def test_files_of_one_dataset_tokenized_otherwise_are_refused_naming_one(tmp_path: Path) -> None:
    """Files of one path are held to one token layout as mixed sources are: the first
    file's would otherwise be taken for all (another eos read as a token, another dtype's
    bytes as other ids)."""
    eos = TokenInfo("<u2", 100, eos_id=0, tokenizer="abc")
    first = _write(tmp_path / "a", eos, False)
    others = {
        "b": TokenInfo("<u2", 100, eos_id=1, tokenizer="abc"),
        "c": TokenInfo("<u2", 100, eos_id=0, tokenizer="def"),
        "d": TokenInfo("<u4", 70_000, eos_id=0, tokenizer="abc"),
    }
    for name, info in others.items():
        other = _write(tmp_path / name, info, False)
        with pytest.raises(FormatError, match=rf"{name}/part.parquet.*'tokens' .*eos_id=0"):
            TokenStream([first, other], **BASE)
    same = _write(tmp_path / "e", eos, False)
    assert len(list(TokenStream([first, same], **BASE))) > 0
