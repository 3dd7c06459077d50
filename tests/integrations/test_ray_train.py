"""Ray Train's usage without starting Ray: what its workers see of a dataset made elsewhere.

Ray Train runs the training function in worker processes that set ``RANK`` and
``WORLD_SIZE`` (and start ``torch.distributed``); a dataset made in the driver and passed
in ``train_loop_config`` arrives pickled, with the driver's rank 0 of 1. The pages' runs
under a real ``TorchTrainer`` are in ``test_framework_docs.py``."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from _loaderdata import make_parquet

from shardwise import StreamingDataset
from shardwise.errors import ConfigError

torch_data = pytest.importorskip("torch.utils.data")


@pytest.mark.parametrize("batch_format", ["torch", None])
def test_a_dataset_made_in_the_driver_is_refused_by_dataloader_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_format: str | None
) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "cache"))
    data = make_parquet(tmp_path / "data", 120, files=2)
    made = StreamingDataset(str(data), batch_size=10, batch_format=batch_format, columns=["id"])
    monkeypatch.setenv("RANK", "1")  # in a Ray Train worker, as Ray sets them
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = pickle.loads(pickle.dumps(made))
    loader = torch_data.DataLoader(ds, batch_size=None if batch_format else 10, num_workers=2)
    with pytest.raises(ConfigError, match="rank 0 of 1, and it is now rank 1 of 2"):
        for _ in loader:  # not list(): its len() asks in the training process
            pass  # rank 0 of 1 on every rank: each would stream every sample
