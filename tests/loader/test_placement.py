"""detect_placement: explicit arguments win, then torch.distributed, then the environment."""

from __future__ import annotations

import pytest

from shardwise.errors import ConfigError
from shardwise.loader.placement import Placement, detect_placement, in_dataloader_worker


def test_defaults_to_one_rank_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert detect_placement() == Placement(0, 1, 0, 1)


def test_environment_of_launchers_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert detect_placement() == Placement(3, 8, 0, 1)
    assert detect_placement(rank=1, world_size=2, worker_id=1, num_workers=4) == Placement(
        1, 2, 1, 4
    )


def test_a_non_integer_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "eight")
    with pytest.raises(ConfigError, match="WORLD_SIZE='eight'"):
        detect_placement()


@pytest.mark.parametrize(
    ("args", "what"),
    [
        ((2, 2, 0, 1), "rank"),
        ((-1, 2, 0, 1), "rank"),
        ((0, 0, 0, 1), "rank"),
        ((0, 1, 1, 1), "worker_id"),
        ((0, 1, 0, 0), "worker_id"),
    ],
)
def test_impossible_placements_are_config_errors(
    args: tuple[int, int, int, int], what: str
) -> None:
    with pytest.raises(ConfigError, match=what):
        Placement(*args)


def test_inside_a_dataloader_worker_the_worker_is_detected() -> None:
    from torch.utils.data import DataLoader, IterableDataset

    class Probe(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self):  # type: ignore[no-untyped-def]
            p = detect_placement(rank=0, world_size=1)
            yield p.worker_id, p.num_workers

    got = sorted(
        tuple(int(v) for v in x) for x in DataLoader(Probe(), num_workers=2, batch_size=None)
    )
    assert got == [(0, 2), (1, 2)]
    # the training process itself is no worker: worker 0 of 1 once its workers are done
    assert not in_dataloader_worker()
    assert detect_placement(rank=0, world_size=1) == Placement(0, 1, 0, 1)
