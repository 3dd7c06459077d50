"""The 2.5 GB S3 benchmark's logic: its data (made once, reused, decodable), the peers' reading
of the tars, the consumers and the report's ratios."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import s3report
from adapters.s3_big_peers import tar_rows
from adapters.s3_epochs import consume
from datagen import s3_data


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_data, "SHARD_BYTES", 250_000)
    monkeypatch.setattr(s3_data, "ROW_GROUP", 64)


def test_tars_hold_decodable_jpeg_sized_images_with_labels(tmp_path: Path, small: None) -> None:
    from PIL import Image

    out = s3_data.generate(tmp_path, "tars", 600_000)
    meta = json.loads((out / "meta.json").read_text())
    files = s3_data.data_files(out / "files")
    assert len(files) == meta["files"] >= 2
    rows = [r for f in files for r in tar_rows(str(f))]
    assert len(rows) == meta["rows"]
    for r in rows:
        assert 90_000 <= len(r["jpg"]) <= 110_000
        assert 0 <= r["cls"] < s3_data.NUM_LABELS
        with Image.open(io.BytesIO(r["jpg"])) as im:
            assert im.convert("RGB").size == (s3_data.IMAGE_SIDE, s3_data.IMAGE_SIDE)
    assert consume("cpu", [r["jpg"] for r in rows]) == 96 * len(rows)


def test_data_is_reused_unless_its_files_changed(tmp_path: Path, small: None) -> None:
    out = s3_data.generate(tmp_path, "parquet", 200_000)
    first = [f.stat().st_mtime_ns for f in s3_data.data_files(out / "files")]
    (out / "files" / "_shardwise_index.json").write_text("{}")  # a reader's index: ignored
    assert s3_data.generate(tmp_path, "parquet", 200_000) == out
    assert [f.stat().st_mtime_ns for f in s3_data.data_files(out / "files")] == first
    s3_data.data_files(out / "files")[0].unlink()
    s3_data.generate(tmp_path, "parquet", 200_000)
    assert len(s3_data.data_files(out / "files")) == len(first)


def test_bytes_consumer_touches_images_and_embeddings() -> None:
    assert consume("bytes", [b"\x01" * 10_000, b"\x00" * 5]) == 1
    assert consume("bytes", np.ones((4, 768), np.float32)) == 1


def _epoch(rps: float, fetched: float = 0.0) -> dict[str, Any]:
    return {"rows_per_s": rps, "first_batch_s": 0.5, "fetched_bytes": fetched, "cpu_s": 1.0}


def _results() -> dict[str, Any]:
    return {
        "tars.shardwise_local.bytes": {"cold": _epoch(900), "warm": _epoch(1000)},
        "tars.shardwise_s3.bytes": {"cold": _epoch(800, 2000), "warm": _epoch(950)},
        "tars.limit.bytes": {"cold": _epoch(1000, 2000)},
        "tars.litdata.bytes": {"cold": _epoch(400, 2400), "warm": _epoch(700)},
        "tars.mosaic.bytes": {"cold": _epoch(500, 2000), "warm": _epoch(600)},
        "tars.webdataset.bytes": {"error": "exit 1: boom"},
    }


def test_targets_are_ratios_between_rows_of_the_run() -> None:
    checks = s3report.targets(_results(), {"tars": {"bytes": 2000, "rows": 20}}).data
    assert checks["tars: shardwise cold vs the download limit (bytes consumer)"]["value"] == 0.8
    assert checks["tars, bytes consumer: shardwise warm vs local disk"]["value"] == 0.95
    cold = checks["tars, bytes consumer: shardwise cold vs the fastest peer"]
    assert (cold["value"], cold["vs"], cold["met"]) == (1.6, "mosaic", True)
    warm = checks["tars, bytes consumer: shardwise warm vs the fastest peer"]
    assert (warm["vs"], warm["met"]) == ("litdata", False)
    fetched = checks["tars, bytes consumer: bytes fetched in the cold epoch / data bytes"]
    assert fetched["value"] == 1.0 and fetched["met"]


def test_report_rows_give_mb_per_s_and_bytes_against_the_stored_format() -> None:
    res = _results()
    data = {"bytes": 2000, "rows": 20}
    cells = s3report.row_cells("tars.litdata.bytes", res["tars.litdata.bytes"], data, "S3", 2400)
    assert cells[:6] == ["litdata.bytes", "S3", "400", "0", "700", "0"]
    assert cells[7] == "1.000 / 0.000"
    failed = s3report.row_cells("tars.webdataset.bytes", res["tars.webdataset.bytes"], data, "")
    assert failed[2].startswith("failed: exit 1")


def test_the_cold_bound_adds_the_warm_work_the_download_and_the_server_over_the_cores() -> None:
    res = _results()
    res["tars.shardwise_s3.bytes"]["warm"]["cpu_s"] = 3.0
    res["tars.limit.bytes"]["cold"] |= {"cpu_s": 1.0, "server_cpu_s": 2.0}
    payload = {"machine": {"cpus": 2}, "data": {"tars": {"rows": 30}}, "results": res}
    (line,) = s3report.cold_bounds(payload)
    assert "at least 3.00 s, 10 rows/s, 0.01x the download limit" in line
    del res["tars.limit.bytes"]["cold"]["server_cpu_s"]
    assert s3report.cold_bounds(payload) == []  # no bound without the server's count


def test_the_page_cache_fill_adds_its_first_read_less_its_second_to_a_second_bound() -> None:
    res = _results()
    res["tars.shardwise_s3.bytes"]["warm"]["cpu_s"] = 3.0
    res["tars.limit.bytes"]["cold"] |= {"cpu_s": 1.0, "server_cpu_s": 2.0}
    res["tars.page_fill.bytes"] = {"cold": {"cpu_s": 2.5}, "warm": {"cpu_s": 0.5}}
    payload = {"machine": {"cpus": 2}, "data": {"tars": {"rows": 30}}, "results": res}
    plain, filled = s3report.cold_bounds(payload)
    assert "at least 3.00 s, 10 rows/s, 0.01x the download limit, 0.02x" in plain
    assert "(mosaic)" in plain  # the fastest peer's cold epoch: 500 rows/s
    assert "page-cache fill (2.0 CPU s" in filled
    assert "at least 4.00 s, 8 rows/s" in filled


def test_the_page_fill_row_reads_copies_written_as_the_cache_writes_them(tmp_path: Path) -> None:
    from adapters import s3_big

    files = tmp_path / "data" / "files"
    files.mkdir(parents=True)
    blobs = {"a.tar": np.random.default_rng(0).bytes(3 * 4096 + 17), "b.tar": b"", "c.tar": b"x"}
    for name, blob in blobs.items():
        (files / name).write_bytes(blob)
    (tmp_path / "data" / "meta.json").write_text(json.dumps({"rows": 7}))
    copies = s3_big._direct_copies(str(tmp_path / "data"), str(tmp_path / "tmp"))
    assert {p.name: p.read_bytes() for p in copies} == blobs
    res = s3_big.page_fill(str(tmp_path / "data"), str(tmp_path / "tmp"), {}, "tars", "bytes")
    assert res["cold"]["rows"] == res["warm"]["rows"] == 7
    assert not (tmp_path / "tmp" / "fill").exists()  # the copies are removed


def test_each_epoch_comes_from_its_own_median_run() -> None:
    import bench_s3_2gb

    def run(cold: float, warm: float) -> dict[str, Any]:
        return {
            "cold_rows_per_s": cold,
            "cold": {"rows_per_s": cold, "cpu_s": cold / 10},
            "warm": {"rows_per_s": warm, "cpu_s": warm / 10},
        }

    runs = [run(5, 9), run(4, 12), run(6, 13), {"name": "x", "error": "exit 1"}]
    best = bench_s3_2gb.epoch_medians(runs)
    assert best["cold"]["rows_per_s"] == 5 and best["warm"]["cpu_s"] == 1.2
    assert best["warm"]["rows_per_s"] == 12 and sorted(best["runs_warm_rows_per_s"]) == [9, 12, 13]
    assert best["failed_runs"] == ["exit 1"]
    limit = bench_s3_2gb.epoch_medians([{"cold_rows_per_s": 7, "cold": {"rows_per_s": 7}}])
    assert "warm" not in limit  # a row of one epoch
