"""The benchmarks' shared harness: rounds, medians, tables, checks, earlier results, workers."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

# benchmarks/ is on the tests' import path (pyproject's pytest ``pythonpath``)
from harness.cli import base_parser, chosen
from harness.report import Checks, earlier_results, markdown, ratio
from harness.runner import System, alternate, median_run, run_system

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def test_alternate_runs_every_name_once_per_round_and_drops_failures() -> None:
    order: list[str] = []

    def once(name: str) -> dict[str, object]:
        order.append(name)
        return {"name": name, "error": "boom"} if name == "b" else {"name": name, "s": len(order)}

    runs = alternate(["a", "b", "c"], 3, once)
    assert order == ["a", "b", "c", "a", "c", "a", "c"]
    assert [r["s"] for r in runs["a"]] == [1, 4, 6]
    assert len(runs["b"]) == 1 and runs["b"][0]["error"] == "boom"


def test_median_run_keeps_the_middle_run_and_lists_all() -> None:
    runs = [{"s": 5.0, "tag": "x"}, {"s": 1.0, "tag": "y"}, {"error": "e"}, {"s": 3.0, "tag": "z"}]
    m = median_run(runs, "s")
    assert (m["s"], m["tag"], m["runs_s"], m["median_of"], m["failed_runs"]) == (
        3.0,
        "z",
        [5.0, 1.0, 3.0],
        3,
        ["e"],
    )
    even = median_run([{"r": 10.0}, {"r": 20.0}], "r", higher_is_better=True)
    assert even["r"] == 15.0
    assert median_run([{"error": "a"}, {"error": "b"}], "s") == {"error": "b"}


def test_markdown_and_checks() -> None:
    text = markdown(["a", "b"], [["x|y", 1], ["z"]], right=[1])
    assert text.splitlines() == ["| a | b |", "|---|---:|", "| x/y | 1 |", "| z |  |"]
    c = Checks()
    assert c.add("speed", 12.0, 10, vs="peer") is True
    assert c.add("rss", 5.0, 4, at_most=True, unit=" GB") is False
    assert c.add("missing", None, 3) is None
    assert c.lines[0] == "speed: 12.00x (target >= 10x) [peer] MET"
    assert c.lines[1].endswith("NOT MET") and "<= 4 GB" in c.lines[1]
    assert c.data["missing"]["met"] is None
    assert ratio(None, 2.0) is None and ratio(1.0, 0.0) is None and ratio(3.0, 2.0) == 1.5


def test_earlier_results_are_printed_apart_with_their_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.json"
    path.write_text(
        json.dumps(
            {
                "created": "2026-01-02T03:04:05",
                "results": {
                    "a": {"s": 1.5},
                    "b": {"s": 2.5},
                    "c": {"error": "x"},
                    "gone": {"s": 9.0},
                },
            }
        )
    )
    got = earlier_results(path, measured=["a"], names=["a", "b", "c"], columns={"s": "seconds"})
    assert got == {"created": "2026-01-02T03:04:05", "results": {"b": {"s": 2.5}}}
    out = capsys.readouterr().out
    assert "2026-01-02T03:04:05" in out and "| b | 2.500 |" in out and "| a |" not in out
    assert earlier_results(tmp_path / "none.json", [], ["a"], {"s": "s"}) == {}


def test_earlier_results_a_file_kept_are_carried_on_when_its_own_run_has_none_of_the_others(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.json"
    older = {"created": "2026-01-01T00:00:00", "results": {"peer": {"s": 7.0}}}
    path.write_text(
        json.dumps(
            {
                "created": "2026-01-02T00:00:00",
                "shapes": {"x": {"results": {"a": {"s": 1.0}}, "earlier_results": older}},
            }
        )
    )
    assert earlier_results(path, ["a"], ["a", "peer"], {"s": "s"}, section="x") == older
    # rows of the file's own run come first, with its date
    assert earlier_results(path, [], ["a", "peer"], {"s": "s"}, section="x") == {
        "created": "2026-01-02T00:00:00",
        "results": {"a": {"s": 1.0}},
    }


def test_only_takes_spaces_or_commas() -> None:
    ap = base_parser("Title.\n\nMore.", "small")
    args = ap.parse_args(["--only", "b,c", "a"])
    assert chosen(ap, args.only, ["a", "b", "c", "d"]) == ["a", "b", "c"]
    assert chosen(ap, None, ["a", "b"]) == ["a", "b"]
    assert chosen(ap, ["b"], ["a", "b"], always=["a"]) == ["a", "b"]
    with pytest.raises(SystemExit):
        chosen(ap, ["zz"], ["a"])


WORKER = """
import sys
from harness.cli import base_parser, maybe_worker
from harness.runner import System

def echo(tmp, value, fail=False):
    import os
    if fail:
        raise ValueError("bad value " + str(value))
    return {{"value": value * 2, "tmp_existed": os.path.isdir(tmp)}}

SYSTEMS = {{
    "ok": System("ok", "__main__:echo"),
    "bad": System("bad", "__main__:echo", kwargs=(("fail", True),)),
}}
sys.exit(maybe_worker(base_parser(None, "").parse_args(sys.argv[1:]), SYSTEMS))
"""


def test_run_system_round_trip_and_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the worker finds the harness as a benchmark script does: benchmarks/ on its path
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(BENCH), path) if p))
    script = tmp_path / "bench_echo.py"
    script.write_text(WORKER.format())
    ok = run_system(
        script,
        System("ok", "__main__:echo"),
        sys.executable,
        timeout=60,
        logdir=tmp_path,
        worker_kwargs={"value": 21},
        scratch=tmp_path,
    )
    assert ok["value"] == 42 and ok["tmp_existed"] is True and ok["name"] == "ok"
    assert ok["process_s"] > 0 and len(ok["loadavg_1m"]) == 2
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith("run-")
    ] == []  # scratch removed
    bad = run_system(
        script,
        System("bad", "__main__:echo", kwargs=(("fail", True),)),
        sys.executable,
        timeout=60,
        logdir=tmp_path,
        worker_kwargs={"value": 1},
    )
    assert bad["name"] == "bad" and "ValueError: bad value 1" in bad["error"]
    assert os.path.exists(tmp_path / "bad.log")


def test_loader_rounds_rotate_and_pair_their_ratios() -> None:
    import bench_loader

    orders = [bench_loader.rotated(["a", "b", "c"], i) for i in range(6)]
    assert orders[:4] == [["a", "b", "c"], ["c", "b", "a"], ["b", "c", "a"], ["a", "c", "b"]]
    assert sorted(o[0] for o in orders) == ["a", "a", "b", "b", "c", "c"]  # each opens twice
    for row in "abc":  # and follows more than one neighbour
        assert len({o[o.index(row) - 1] for o in orders if o.index(row)}) == 2
    assert bench_loader.rotated([], 3) == []
    runs = [
        {"round": 0, "rows_per_s": 2.0},
        {"round": 1, "error": "boom"},
        {"round": 2, "rows_per_s": 9.0},
    ]
    row = {"by_round": bench_loader.by_round(runs)}
    assert row["by_round"] == {"0": 2.0, "2": 9.0}
    base = {"by_round": {"0": 1.0, "1": 5.0, "2": 3.0}}
    assert bench_loader.paired_ratio(row, base) == 2.5  # rounds 0 and 2 only: (2.0 + 3.0) / 2
    assert bench_loader.paired_ratio(row, None) is None
    assert bench_loader.paired_ratio(row, {"by_round": {"1": 5.0}}) is None


def test_the_loaders_memory_check_leaves_out_what_the_process_held_before() -> None:
    import bench_loader
    from harness.report import Checks

    fe = {"shuffle_bytes": 100 << 20, "prefetch_bytes": 100 << 20, "peak_rss_mb": 500.0}
    checks = Checks()
    bench_loader._memory_check("row", dict(fe, rss_start_mb=300.0), 400.0, checks)  # 200 MB
    bench_loader._memory_check("row", dict(fe, rss_start_mb=200.0), 400.0, checks)  # 300 MB
    bench_loader._memory_check("row", fe, None, checks)  # no start recorded: the whole 500
    met = [line.endswith(" MET") and "NOT MET" not in line for line in checks.lines]
    assert met == [True, False, False]  # the budget: 1.3 x 200 MiB = 260 MB
    assert "row peak memory: 200 MB" in checks.lines[0]
    assert "whole process 500 MB" in checks.lines[0]


def test_the_loaders_first_batch_is_the_median_of_its_rounds() -> None:
    import bench_loader

    runs = [
        {"round": 0, "first_batch_s": 0.3, "rows_per_s": 10.0},
        {"round": 1, "first_batch_s": 0.1, "rows_per_s": 30.0},
        {"round": 2, "error": "boom"},
        {"round": 3, "first_batch_s": 0.2, "rows_per_s": 20.0},
    ]
    got = bench_loader.first_batches(runs)
    assert got["first_batch_s"] == 0.2
    assert got["first_batch_by_round"] == {"0": 0.3, "1": 0.1, "3": 0.2}
    assert bench_loader.first_batches([{"round": 0, "rows_per_s": 1.0}]) == {}
