"""The 2 GB S3 benchmark's report: its tables and its targets, all from one run's rows.

Rows are named ``<dataset>.<row>.<consumer>``; each holds a ``cold`` epoch (and, but for
the download limit, a ``warm`` one) with ``rows_per_s``, ``first_batch_s``,
``fetched_bytes`` (counted by the S3 server), ``get_requests``, ``cpu_s`` (the reader's
process tree), ``server_cpu_s`` and ``disk_read_mb`` (the machine's reads from its disks
during the epoch: in a warm epoch, what the page cache no longer held).
"""

from __future__ import annotations

import os
from typing import Any

from harness.report import Checks, fmt, markdown, ratio

__all__ = ["PEERS", "best_peer", "cold_bounds", "markdown_report", "row_cells", "targets"]

PEERS = ("webdataset", "litdata", "mosaic")
HEADER = [
    "row",
    "reads",
    "cold rows/s",
    "cold MB/s",
    "warm rows/s",
    "warm MB/s",
    "1st batch s (cold / warm)",
    "fetched / stored (cold / warm)",
    "GETs cold",
    "reader CPU s (cold / warm)",
    "server CPU s cold",
    "disk MB read warm",
    "set-up s",
    "load (1-min, before / after)",
]


def _epoch(r: dict[str, Any] | None, epoch: str, key: str) -> Any:
    if r is None or "error" in r or epoch not in r:
        return None
    return r[epoch].get(key)


def best_peer(
    results: dict[str, Any], dataset: str, consumer: str, epoch: str
) -> tuple[str | None, float | None]:
    """The fastest peer row of ``dataset``/``consumer`` in ``epoch``: (name, rows/s)."""
    found = [
        (p, _epoch(results.get(f"{dataset}.{p}.{consumer}"), epoch, "rows_per_s")) for p in PEERS
    ]
    found = [(p, v) for p, v in found if v is not None]
    return max(found, key=lambda pv: pv[1]) if found else (None, None)


def row_cells(
    name: str, r: dict[str, Any], data: dict[str, Any], kind: str, stored: int | None = None
) -> list[str]:
    """One table row: rates, MB/s from the data's bytes per row, first batch, bytes fetched
    as a share of ``stored`` (the bytes of the row's own format on the server; default the
    data's), CPU."""
    row = name.split(".", 1)[1]
    stored = stored or data["bytes"]
    if "error" in r:
        return [row, kind, f"failed: {r['error'][:80]}"]
    per_row = data["bytes"] / data["rows"]

    def rate(e: str) -> tuple[str, str]:
        v = _epoch(r, e, "rows_per_s")
        return fmt(v, ",.0f"), fmt(v and v * per_row / 1e6, ",.0f")

    def pair(key: str, spec: str, scale: float = 1.0) -> str:
        a, b = (_epoch(r, e, key) for e in ("cold", "warm"))
        return " / ".join(fmt(v if v is None else v / scale, spec) for v in (a, b) if v is not None)

    return [
        row,
        kind,
        *rate("cold"),
        *rate("warm"),
        pair("first_batch_s", ".2f"),
        pair("fetched_bytes", ".3f", stored) if not row.startswith("shardwise_local") else "-",
        fmt(_epoch(r, "cold", "get_requests"), ",.0f"),
        pair("cpu_s", ".1f"),
        fmt(_epoch(r, "cold", "server_cpu_s"), ".1f"),
        fmt(_epoch(r, "warm", "disk_read_mb"), ",.0f"),
        fmt(r.get("setup_s"), ".1f"),
        " / ".join(f"{x:.1f}" for x in r.get("loadavg_1m", [])),
    ]


def _add_peers(checks: Checks, results: dict[str, Any], d: str, c: str) -> None:
    s3 = results.get(f"{d}.shardwise_s3.{c}")
    for epoch in ("cold", "warm"):
        peer, v = best_peer(results, d, c, epoch)
        checks.add(
            f"{d}, {c} consumer: shardwise {epoch} vs the fastest peer",
            ratio(_epoch(s3, epoch, "rows_per_s"), v),
            1.5,
            vs=peer,
        )
    alone = _epoch(results.get(f"{d}.consumer.{c}"), "cold", "rows_per_s")
    peer, v = best_peer(results, d, c, "warm")
    if alone is not None and v:
        checks.add(  # below 1.5x: no loader can be 1.5x that peer with this consumer
            f"{d}, {c} consumer: the consumer alone (images in memory) vs the fastest peer warm",
            ratio(alone, v),
            1.5,
            vs=peer,
        )


def targets(results: dict[str, Any], meta: dict[str, dict[str, Any]]) -> Checks:
    """The issue's targets, every ratio between rows of this run."""
    checks = Checks()
    for d, data in meta.items():
        s3 = results.get(f"{d}.shardwise_s3.bytes")
        checks.add(
            f"{d}: shardwise cold vs the download limit (bytes consumer)",
            ratio(
                _epoch(s3, "cold", "rows_per_s"),
                _epoch(results.get(f"{d}.limit.bytes"), "cold", "rows_per_s"),
            ),
            0.8,
        )
        for c in ("bytes", "cpu"):
            if f"{d}.shardwise_s3.{c}" not in results:
                continue
            r = results[f"{d}.shardwise_s3.{c}"]
            local = results.get(f"{d}.shardwise_local.{c}")
            checks.add(
                f"{d}, {c} consumer: shardwise warm vs local disk",
                ratio(_epoch(r, "warm", "rows_per_s"), _epoch(local, "warm", "rows_per_s")),
                0.9,
            )
            _add_peers(checks, results, d, c)
            cold = _epoch(r, "cold", "fetched_bytes")
            checks.add(
                f"{d}, {c} consumer: bytes fetched in the cold epoch / data bytes",
                cold if cold is None else cold / data["bytes"],
                1.01,
                at_most=True,
                spec=".4f",
            )
            checks.add(
                f"{d}, {c} consumer: bytes fetched in the warm epoch",
                _epoch(r, "warm", "fetched_bytes"),
                0,
                at_most=True,
                spec=",.0f",
                unit=" B",
            )
    return checks


def cold_bounds(payload: dict[str, Any]) -> list[str]:
    """The fastest cold epoch this machine allows, from this run's rows: a cold epoch does
    at least the warm epoch's work (read, parse, hand over, consume) plus the download
    limit's, and the S3 server's work, on the same cores; its seconds are at least their
    CPU seconds over the cores. With the ``page_fill`` row, also that bound for a cache
    whose warm epoch reads from the page cache, as local disk does: it adds the fill."""
    cores = payload["machine"]["cpus"]
    out = []
    for d in payload["data"]:
        s3 = payload["results"].get(f"{d}.shardwise_s3.bytes")
        lim = payload["results"].get(f"{d}.limit.bytes")
        parts = (_epoch(s3, "warm", "cpu_s"), _epoch(lim, "cold", "cpu_s"))
        server = _epoch(lim, "cold", "server_cpu_s")
        if None in (*parts, server):
            continue
        seconds = (sum(parts) + server) / cores
        out.append(
            f"{d}: warm epoch's reader CPU {parts[0]:.1f} s + the limit's reader CPU "
            f"{parts[1]:.1f} s + its server CPU {server:.1f} s, over {cores} cores: "
            + _bound(payload, d, seconds)
        )
        fill = _fill_s(payload["results"].get(f"{d}.page_fill.bytes"))
        if fill is not None:
            out.append(
                f"{d}, with the page-cache fill ({fill:.1f} CPU s: the page_fill row's "
                "first read of the files less its second), which a cache pays once so that "
                "its warm epoch reads at the rate of local disk: "
                + _bound(payload, d, seconds + fill / cores)
            )
    return out


def _fill_s(r: dict[str, Any] | None) -> float | None:
    """CPU seconds of filling the page cache with the data: the ``page_fill`` row's first
    pass (every page new) less its second (every page there)."""
    cold, warm = _epoch(r, "cold", "cpu_s"), _epoch(r, "warm", "cpu_s")
    return None if cold is None or warm is None else max(0.0, cold - warm)


def _bound(payload: dict[str, Any], d: str, seconds: float) -> str:
    """A cold epoch of at least ``seconds``: its rows/s, against the limit and the fastest
    peer's cold epoch (bytes consumer)."""
    results = payload["results"]
    best = payload["data"][d]["rows"] / seconds
    lim = _epoch(results.get(f"{d}.limit.bytes"), "cold", "rows_per_s")
    peer, rate = best_peer(results, d, "bytes", "cold")
    text = (
        f"a cold epoch takes at least {seconds:.2f} s, {best:,.0f} rows/s, "
        f"{fmt(ratio(best, lim), '.2f')}x the download limit"
    )
    if peer is not None:
        text += f", {fmt(ratio(best, rate), '.2f')}x the fastest peer's ({peer})"
    return text


def _stored(payload: dict[str, Any], name: str) -> int | None:
    """Bytes on the server of the format row ``name`` reads."""
    d, row, _ = name.split(".")
    prefix = {"litdata": "lit", "mosaic": "mds"}.get(row, "sw")
    return payload.get("bucket_bytes", {}).get(f"{prefix}-{d}")


def markdown_report(payload: dict[str, Any]) -> str:
    """The results as markdown: how measured, a table per data set and consumer, targets."""
    m = payload["machine"]
    lines = [
        f"# S3 at 2.5 GB ({payload.get('created', '?')})",
        "",
        f"{m['cpus']} CPUs, load average {', '.join(f'{x:.2f}' for x in m['load_avg'])} at the "
        f"end; {payload['repeats']} alternated round(s), {payload['statistic']}. SeaweedFS "
        "on 127.0.0.1; 2-worker DataLoaders; bytes fetched are the server's own count.",
        "",
    ]
    results = payload["results"]
    for d, data in payload["data"].items():
        lines.append(
            f"**{d}**: {data['rows']:,} rows in {data['files']} files, "
            f"{data['bytes'] / 1e9:.2f} GB ({data['bytes'] / data['rows'] / 1e3:.1f} KB a row)."
        )
        lines.append("")
        for c in ("bytes", "cpu"):
            names = [n for n in results if n.startswith(f"{d}.") and n.endswith(f".{c}")]
            if not names:
                continue
            lines += [f"{d}, {c} consumer:", ""]
            rows = [
                row_cells(n, results[n], data, results[n].get("kind", ""), _stored(payload, n))
                for n in names
            ]
            lines += [markdown(HEADER, rows, right=range(2, len(HEADER))), ""]
    for k, v in payload.get("conversions", {}).items():
        again = " (made in an earlier run, reused)" if v.get("reused") else ""
        lines.append(f"- conversion to {k}: {fmt(v.get('convert_s'), '.1f')} s{again}")
    lines += ["", "Targets:", "", *[f"- {ln}" for ln in payload["check_lines"]]]
    bounds = cold_bounds(payload)
    if bounds:
        lines += ["", "The fastest cold epoch this machine allows (bytes consumer):", ""]
        lines += [f"- {ln}" for ln in bounds]
    return "\n".join(lines).replace(os.path.expanduser("~"), "~")


def main(argv: list[str]) -> int:
    """``python benchmarks/s3report.py results/s3-2gb.json``: write its ``.md`` again."""
    import json
    from pathlib import Path

    for name in argv:
        path = Path(name)
        path.with_suffix(".md").write_text(markdown_report(json.loads(path.read_text())) + "\n")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
