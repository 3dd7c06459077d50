"""A real gloo run of 2 ranks x 2 DataLoader workers: the sequences decoded back to text
are the corpus's documents, every rank takes the same steps."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _tokendata import make_token_shards

from shardwise.ops.tokens import load_tokenizer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(data: Path, seq_len: int, out: Path) -> list[list[dict]]:
    script = os.path.join(os.path.dirname(__file__), "..", "..", "support", "_ddp_tokens_worker.py")
    port, procs = _free_port(), []
    for rank in range(2):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            GLOO_SOCKET_IFNAME="lo",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, script, str(data), str(seq_len), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    report: list[list[dict]] = json.loads(out.read_text())
    return report


@pytest.mark.engine
def test_gloo_two_ranks_two_workers_decode_to_the_documents(tmp_path: Path) -> None:
    data, tok, texts = make_token_shards(tmp_path / "d", docs=120)
    tokenizer = load_tokenizer(tok)[0]
    eos = tokenizer.token_to_id("<|endoftext|>")
    lengths = [len(tokenizer.encode(t, add_special_tokens=False).ids) + 1 for t in texts]
    seq_len = max(lengths)  # pad: one whole document per sequence
    pad, best_fit = _run(data, seq_len, tmp_path / "report.json")
    for gathered in (pad, best_fit):
        assert len({g["steps"] for g in gathered}) == 1  # equal steps on both ranks
        assert all(g["steps"] == g["len"] for g in gathered)
    seqs = [s for g in pad for s in g["seqs"]]
    left = pad[0]["stats"]["sequences_left_out"]
    assert left < 2 * 2 * 2 and len(seqs) == len(texts) - left
    docs = [tokenizer.decode(s[:-1]) for s in seqs]
    assert all(s[-1] == eos for s in seqs)
    assert not Counter(docs) - Counter(texts)  # each a whole document, none twice
    # best_fit: whole documents fit, so every sequence is whole documents, EOS-separated
    fitted = [s for g in best_fit for s in g["seqs"]]
    pieces = [
        tokenizer.decode(d.tolist())
        for s in fitted
        for d in np.split(np.array(s), np.flatnonzero(np.array(s) == eos) + 1)[:-1]
    ]
    assert best_fit[0]["stats"]["sources"]["all"]["split_documents"] == 0
    assert not Counter(pieces) - Counter(texts)
    left_docs = len(texts) - len(pieces)
    assert left_docs >= 0 and (left_docs == 0) == (best_fit[0]["stats"]["sequences_left_out"] == 0)
