"""TokenStream over token shards on a real S3 server (SeaweedFS) through the node cache:
the batches equal local disk's, and a second stream on the same node fetches nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _tokendata import make_token_shards

from shardwise.loader.tokens import TokenStream
from shardwise.storage.cache import NodeCache

pytestmark = pytest.mark.engine


def test_cached_token_stream_equals_local_and_fetches_each_unit_once(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    path, _, _ = make_token_shards(tmp_path / "local")
    for p in sorted(path.glob("*.parquet")):
        fs.put(str(p), f"{name}/tokens/{p.name}")
    kw: dict[str, Any] = {"seq_len": 64, "batch_size": 2, "seed": 3}
    local = list(TokenStream(str(path), **kw))
    cache_dir = tmp_path / "cache"
    remote = dict(kw, storage_options=s3_server["storage_options"], cache_dir=str(cache_dir))
    got = list(TokenStream(f"s3://{name}/tokens/", **remote))
    assert len(got) == len(local) > 0
    assert all(np.array_equal(a[f], b[f]) for a, b in zip(got, local) for f in a)
    fetched = NodeCache(str(cache_dir / "units"), 10**9).journal()
    assert fetched  # the units came through the cache
    again = list(TokenStream(f"s3://{name}/tokens/", **remote))
    assert all(np.array_equal(a[f], b[f]) for a, b in zip(again, local) for f in a)
    assert len(NodeCache(str(cache_dir / "units"), 10**9).journal()) == len(fetched)
