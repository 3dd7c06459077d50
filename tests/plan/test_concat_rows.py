"""``concat`` windows of batches (``plan.concat_rows``) give exactly the arrays of
``fill_batch`` over ``sequence_tokens``: values and dtypes, any order, several units."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.plan.concat_rows import take_window, unit_rows, window_batches
from shardwise.plan.packing import pack
from shardwise.plan.sequences import fill_batch, sequence_tokens

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# empty, single-token, around seq_len and much longer documents; a unit has a token
UNIT = st.lists(
    st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 40), st.integers(30, 130)),
    min_size=1,
    max_size=12,
).filter(lambda x: sum(x) > 0)


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=1, max_size=3),
    seq_len=st.integers(1, 33),
    batch_size=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_windows_equal_fill_batch(
    units: list[list[int]], seq_len: int, batch_size: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    data = {}
    for u, lengths in enumerate(units):
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        tokens = rng.integers(1, 60_000, int(offsets[-1])).astype(np.uint16)
        data[u] = (tokens, offsets, pack(np.array(lengths), seq_len, "concat"))
    pairs = np.array([(u, k) for u in data for k in range(data[u][2].num_sequences)])
    pairs = pairs[rng.permutation(len(pairs))][: len(pairs) // batch_size * batch_size]
    assume(len(pairs) > 0)
    laid = {u: unit_rows(t, o, seq_len, pad_id=7) for u, (t, o, _) in data.items()}
    window, starts = take_window(pairs[:, 0], pairs[:, 1], laid, seq_len)
    got = list(window_batches(window, starts, batch_size))
    assert len(got) == len(pairs) // batch_size
    for j, batch in enumerate(got):
        part = pairs[j * batch_size : (j + 1) * batch_size].tolist()
        seqs = [sequence_tokens(data[u][0], data[u][1], data[u][2], k) for u, k in part]
        expected = fill_batch(seqs, seq_len, pad_id=7)
        assert list(batch) == list(expected)
        for name, array in expected.items():
            assert batch[name].dtype == array.dtype, name
            assert np.array_equal(batch[name], array), name
