"""Benchmark figures for the docs, read from ``benchmarks/results/*.json``.

Every figure the README and the docs site quote comes from here, never typed by hand: the
site's benchmark pages are filled at build time (``hooks.py``), and the README's summary
table is written by ``python tools/docsite/results.py --readme`` between its two markers (a
test fails when the table there differs from what the results files give).
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"
START, END = "<!-- bench-summary:start -->", "<!-- bench-summary:end -->"


@cache
def load(name: str) -> dict[str, Any]:
    """The results file ``benchmarks/results/<name>.json``."""
    data: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return data


def day(stamp: str | None) -> str:
    """``2026-11-25T18:42:34+0000`` -> ``2026-11-25``."""
    return (stamp or "undated")[:10]


def when(stamp: str | None) -> str:
    """``2026-11-25T18:42:34+0000`` -> ``2026-11-25 18:42 UTC``."""
    if not stamp or len(stamp) < 16:
        return day(stamp)
    return f"{stamp[:10]} {stamp[11:16]} UTC"


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _check(checks: dict[str, Any], name: str) -> float:
    entry = checks[name]
    return float(entry.get("value", entry.get("speedup")))


def _dedup_ratio(shape: str) -> float:
    return _check(
        load("dedup")["shapes"][shape]["checks"], "shardwise end-to-end speed vs fastest other peer"
    )


def summary_rows() -> list[tuple[str, str, str, str, str]]:
    """(area, what is compared, best peer, shardwise's ratio, date) per benchmark area."""
    pipe, s3, mix, par = load("pipeline"), load("s3"), load("mix"), load("parallel")
    dedup, loader, tok = load("dedup"), load("loader"), load("tokens")
    pipe_vs = pipe["checks"]["shardwise 2-proc vs fastest peer"]
    shapes = ("short", "medium", "long")
    local = next(r for r in par["results"] if r["backend"] == "local")
    ingest = [
        _check(loader["shapes"][s]["checks"], "shardwise_inproc_numpy vs raw scan")
        for s in ("text", "emb")
    ]
    return [
        (
            "[Processing](docs/benchmarks/pipeline.md)",
            "clean + exact dedup, 2M rows, rows/s",
            pipe_vs["vs"],
            _x(pipe_vs["speedup"]),
            day(pipe["created"]),
        ),
        (
            "[Near-duplicate removal](docs/benchmarks/dedup.md)",
            "MinHash-LSH end to end, short / medium / long",
            "datatrove",
            " / ".join(_x(_dedup_ratio(s)) for s in shapes),
            day(max(dedup["shapes"][s]["measured"]["created"] for s in shapes)),
        ),
        (
            "[Streaming from S3](docs/benchmarks/s3.md)",
            "rows/s through the node cache, cold / warm",
            s3["checks"]["shardwise S3 cold vs faster peer"]["vs"],
            f"{_x(_check(s3['checks'], 'shardwise S3 cold vs faster peer'))} / "
            f"{_x(_check(s3['checks'], 'shardwise S3 warm vs faster peer'))}",
            day(s3["created"]),
        ),
        (
            "[Mixing sources](docs/benchmarks/mix.md)",
            "stratified mixed stream, 2 DataLoader workers, rows/s",
            "mosaic",
            _x(
                _check(
                    mix["checks"], "stratified: shardwise / mosaic rows/s (2 DataLoader workers)"
                )
            ),
            day(mix["created"]),
        ),
        (
            "[Training ingest](docs/benchmarks/loader.md)",
            "in-process loader, text / emb shapes, rows/s",
            "one-thread pyarrow scan (no peer in this run)",
            " / ".join(_x(v) for v in ingest),
            day(loader["created"]),
        ),
        (
            "[Tokenization](docs/benchmarks/tokens.md)",
            "BBC text to token shards, 1 / 2 processes",
            "datatrove",
            f"{_x(_check(tok['checks'], 'tokenize 1 proc vs datatrove'))} / "
            f"{_x(_check(tok['checks'], 'tokenize 2 proc vs datatrove'))}",
            day(tok["created"]),
        ),
        (
            "[Parallel map](docs/benchmarks/parallel.md)",
            "64 CPU-bound tasks, `local` backend, time",
            "multiprocessing.Pool",
            _x(1 / local["ratio_heavy_vs_pool"]),
            day(par["created"]),
        ),
    ]


def summary_table(link_prefix: str | None = None) -> str:
    """The README's table: one row per area, shardwise's ratio to the best peer (higher is
    better for shardwise). ``link_prefix`` rewrites the README's ``docs/`` links."""
    lines = [
        "| area | measured | best peer | shardwise vs peer | run |",
        "| --- | --- | --- | ---: | --- |",
    ]
    for area, what, peer, ratio, date in summary_rows():
        area = area if link_prefix is None else area.replace("(docs/", f"({link_prefix}")
        lines.append(f"| {area} | {what} | {peer} | **{ratio}** | {date} |")
    return "\n".join(lines)


def check_list(lines: list[str]) -> str:
    return "\n".join(f"- {line}" for line in lines)


def _head(data: dict[str, Any]) -> str:
    machine = data.get("machine", {})
    load_avg = machine.get("load_avg") or []
    parts = [f"Run of **{when(data.get('created'))}**"]
    commit = (data.get("git") or {}).get("commit")
    if commit:
        parts.append(f"on commit `{commit[:7]}`")
    cpus = machine.get("cpus", machine.get("cpu_count"))
    if cpus:
        parts.append(f"{cpus} cores, Python {machine.get('python', '?')}")
    if load_avg:
        parts.append(f"1-minute load {load_avg[0]:.1f} at the end")
    return ", ".join(parts) + f" (`benchmarks/results/{data.get('benchmark', '')}.json`)."


def render_loader() -> str:
    data = load("loader")
    out = [_head({**data, "benchmark": "loader"})]
    for shape, block in data["shapes"].items():
        rows = block["data"]
        out += [
            f"\n### The {shape} shape ({rows['rows']:,} rows, {rows['files']} files, "
            f"{rows['row_groups']} row groups)\n",
            block["table"],
            "\n" + check_list(block["check_lines"]),
        ]
    return "\n".join(out)


def render_tabled(name: str) -> Callable[[], str]:
    def render() -> str:
        data = load(name)
        return "\n".join(
            [
                _head({**data, "benchmark": name}),
                "",
                data["table"],
                "",
                check_list(data["check_lines"]),
            ]
        )

    return render


def render_dedup() -> str:
    data = load("dedup")
    out = []
    for shape, block in data["shapes"].items():
        measured = block["measured"]
        base = next(r["seconds"] for r in block["results"] if r["name"] == "datasketch")
        out += [
            f"\n### The {shape} shape ({block['docs']:,} documents)\n",
            f"Run of **{when(measured['created'])}** on commit `{measured['git']['commit'][:7]}`. "
            f"{measured.get('note', '')}\n",
            "| system | end-to-end s | docs/s | vs datasketch | precision | recall | peak RSS MB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in block["results"]:
            out.append(
                f"| {r['name']} | {r['seconds']:.2f} | {r['docs_per_s']:,.0f} "
                f"| {_x(base / r['seconds'])} | {r['precision']:.3f} | {r['recall']:.3f} "
                f"| {r['peak_rss_mb']:,.0f} |"
            )
        out.append(
            "\n"
            + check_list(
                [
                    f"{k}: {v['value']:.3f} (target {v['target']})"
                    for k, v in block["checks"].items()
                ]
            )
        )
    return "\n".join(out)


def render_parallel() -> str:
    data = load("parallel")
    out = [
        _head({**data, "benchmark": "parallel"}),
        "",
        "| backend | kind | 64 heavy tasks, s | time vs `multiprocessing.Pool.map` "
        "| 10,000 tiny tasks, s |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in data["results"]:
        ratio = _x(r["ratio_heavy_vs_pool"])
        out.append(
            f"| {r['backend']} | {r['kind']} | {r['heavy_s']:.3f} | {ratio} | {r['tiny_s']:.3f} |"
        )
    summary = data["summary"]
    speedup = _x(summary["speedup_1_to_2_cores_local"])
    out.append(f"\nThe `local` backend scales {speedup} from 1 to 2 processes.")
    return "\n".join(out)


def render_tokens(name: str = "tokens") -> str:
    data = load(name)
    out = [
        _head({**data, "benchmark": name}),
        "",
        "| row | seconds | tokens | tokens/s | peak RSS MB |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row, r in data["results"].items():
        rate = r.get("tok_per_s") or r["tokens"] / r["seconds"]
        rss = f"{r['peak_rss_mb']:,.0f}" if "peak_rss_mb" in r else "-"
        out.append(f"| {row} | {r['seconds']:.2f} | {r['tokens']:,} | {rate:,.0f} | {rss} |")
    out += ["", "| packing | documents split | padding |", "| --- | ---: | ---: |"]
    for packing, p in data["packing"].items():
        out.append(f"| {packing} | {p['split_share']:.2%} | {p['padding_share']:.2%} |")
    checks = [
        f"{k}: {v['value']:.3f} (target {v['target']})"
        + ("" if v["met"] is None else (" MET" if v["met"] else " not met"))
        for k, v in data["checks"].items()
        if v["value"] is not None  # a row this run did not measure
    ]
    return "\n".join([*out, "", check_list(checks)])


def render_s3_2gb(name: str = "s3-2gb") -> str:
    """A 2.5 GB S3 run: its header, then the tables and targets of its markdown file."""
    data = load(name)
    body = (RESULTS / f"{name}.md").read_text().split("\n", 1)[1]  # without its title
    return _head({**data, "benchmark": name}) + "\n" + body


RENDERERS: dict[str, Callable[[], str]] = {
    "loader": render_loader,
    "pipeline": render_tabled("pipeline"),
    "mix": render_tabled("mix"),
    "s3": render_tabled("s3"),
    "s3_2gb": render_s3_2gb,
    "s3_2gb_nofsync": lambda: render_s3_2gb("s3-2gb-nofsync-2026-12-01"),
    "s3_2gb_tars_2026_11_29": lambda: render_s3_2gb("s3-2gb-tars-2026-11-29"),
    "s3_2gb_parquet_2026_11_29": lambda: render_s3_2gb("s3-2gb-parquet-2026-11-29"),
    "s3_2gb_tars_pair": lambda: render_s3_2gb("s3-2gb-tars-local-s3"),
    "dedup": render_dedup,
    "parallel": render_parallel,
    "tokens": render_tokens,
    "tokens-stream": lambda: render_tokens("tokens-stream"),
    "index": render_tabled("index"),
}


def fix_table(text: str) -> str:
    """A results file's table whose separator row has fewer cells than its header gets one
    cell per column (Markdown drops such a table otherwise)."""
    lines = text.splitlines()
    for i in range(1, len(lines)):
        head, sep = lines[i - 1], lines[i]
        if set(sep.replace(" ", "")) <= set("|-:") and sep.startswith("|") and head.startswith("|"):
            cols, have = head.count("|") - 1, sep.count("|") - 1
            if have < cols:
                lines[i] = sep + " --- |" * (cols - have)
    return "\n".join(lines)


def _get(data: Any, path: str) -> Any:
    """``shapes.medium.results[name=datasketch].seconds``: keys, list items by a field, and
    list items by their place (``before_after.rows.2.4``)."""
    for part in path.split("."):
        if isinstance(data, list) and part.isdigit():
            data = data[int(part)]
        elif part.endswith("]"):
            key, selector = part[:-1].split("[")
            field, wanted = selector.split("=")
            data = next(item for item in data[key] if str(item.get(field)) == wanted)
        else:
            data = data[part]
    return data


def value(spec: str) -> str:
    """``dedup shapes.long.results[name=shardwise].precision .3f``: one figure of a results
    file, formatted (the inline ``<!-- value: ... -->`` marker)."""
    name, *path, fmt = spec.split()
    return format(_get(load(name), " ".join(path)), fmt)


def expand(markdown: str, summary_prefix: str = "") -> str:
    """Replace every ``<!-- results: NAME -->`` marker with the rendered figures
    (``summary``: the README's table, its links relative to ``summary_prefix``)."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "summary":
            return summary_table(link_prefix=summary_prefix)
        return fix_table(RENDERERS[name]())

    markdown = re.sub(r"<!-- value: ([^>]+?) -->", lambda m: value(m.group(1)), markdown)
    return re.sub(r"<!-- results: ([\w-]+) -->", sub, markdown)


def readme_with_summary(text: str) -> str:
    """The README with its summary table regenerated between the markers."""
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{summary_table()}\n{END}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--readme", action="store_true", help="rewrite the README's summary table")
    args = parser.parse_args()
    if args.readme:
        README.write_text(readme_with_summary(README.read_text()))
    else:
        print(summary_table())


if __name__ == "__main__":
    main()
