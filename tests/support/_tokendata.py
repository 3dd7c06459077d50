"""Token shards of BBC articles for the token stream tests (tokenized by the pipeline)."""

from __future__ import annotations

import json
from pathlib import Path

from _corpus import bbc_texts
from _tokenizer import EOS, train_bpe


def make_token_shards(
    root: Path, docs: int = 240, row_group_rows: int = 16
) -> tuple[Path, str, list[str]]:
    """``docs`` BBC articles tokenized (eos appended) into several Parquet files of small
    row groups; returns the shards' directory, the tokenizer's path and the texts."""
    from shardwise.pipeline import read_jsonl

    root.mkdir(parents=True, exist_ok=True)
    texts = bbc_texts()[:docs]
    for f in range(3):
        with open(root / f"in-{f}.jsonl", "w", encoding="utf-8") as out:
            for i in range(f, docs, 3):
                out.write(json.dumps({"id": i, "text": texts[i]}) + "\n")
    tok = train_bpe(root / "tokenizer.json")
    (
        read_jsonl(str(root / "*.jsonl"))
        .apply("tokenize", tokenizer=tok, eos=EOS)
        .apply("drop_columns", columns=["text"])
        .write(str(root / "tokens"), row_group_rows=row_group_rows, target_shard_bytes=200_000)
        .run(backend="sequential", progress=False)
    )
    return root / "tokens", tok, texts
