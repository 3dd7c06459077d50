"""``shardwise plan --seq-len``: the token plan of token shards, per source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _tokendata import make_token_shards

from shardwise.cli import main
from shardwise.loader.tokens import TokenStream


def test_plan_reports_tokens_sequences_padding_and_splits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = make_token_shards(tmp_path / "d", docs=60)
    args = ["plan", str(path), "--seq-len", "100", "--packing", "best_fit", "-w", "2", "-b", "3"]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ds = TokenStream(str(path), seq_len=100, batch_size=3, packing="best_fit", rank=0, world_size=2)
    stats = ds.stats()
    assert report["steps_per_rank"] == stats["batches_per_rank"] == len(ds)
    assert report["sequences_left_out"] == stats["sequences_left_out"]
    keep = TokenStream(str(path), seq_len=100, batch_size=3, rank=0, world_size=2, drop_last=False)
    assert main([*args[:4], "-w", "2", "-b", "3", "--keep-last", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["sequences_padded"] == keep.stats()["sequences_padded"] > 0
    (row,) = report["sources"]
    assert {k: v for k, v in row.items() if k != "source"} == stats["sources"]["all"]
    assert row["documents"] == 60 and row["padding_tokens"] > 0
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "packing best_fit" in out and "split documents" in out
    mixed = ["plan", "-s", f"{path}:weight=1,name=a", "-s", f"{path}:weight=3,name=b"]
    assert main([*mixed, "--seq-len", "100", "-b", "2", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["sources"]
    assert [r["source"] for r in rows] == ["a", "b"]
    assert rows[1]["epoch_sequences"] in range(
        3 * rows[0]["epoch_sequences"] - 2, 3 * rows[0]["epoch_sequences"] + 3
    )


def test_packing_without_a_sequence_length_is_bad_usage_and_padding_is_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = make_token_shards(tmp_path / "d", docs=60)
    assert main(["plan", str(path), "--packing", "best_fit"]) == 2
    assert "give --seq-len too" in capsys.readouterr().err
    args = ["plan", str(path), "--seq-len", "100", "-w", "2", "-b", "3", "--keep-last"]
    assert main([*args, "--json"]) == 0
    padded = json.loads(capsys.readouterr().out)["sequences_padded"]
    assert padded > 0  # 2 ranks x 3 do not divide the sequences
    assert main(args) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "padded" in line]
    assert shown == ([f"sequences padded    {padded:,} (repeated, --keep-last)"] if padded else [])
