"""Tokenize as a pipeline step: token shards, tokens in the accounting, YAML, and the same
bytes on every backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _corpus import bbc_texts
from _tokenizer import EOS, train_bpe

from shardwise._tokens import TokenInfo, flat_tokens
from shardwise.cli import main
from shardwise.ops.tokens import load_tokenizer
from shardwise.pipeline import Pipeline, read_jsonl

DOCS = 600


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    root = tmp_path_factory.mktemp("tokin")
    texts = bbc_texts()[:DOCS]
    for f in range(3):
        with open(root / f"in-{f}.jsonl", "w", encoding="utf-8") as out:
            for i in range(f, DOCS, 3):
                out.write(json.dumps({"id": i, "text": texts[i]}) + "\n")
    return root, train_bpe(root / "tokenizer.json"), texts


def _pipeline(src: Path, tok: str, out: Path) -> Pipeline:
    return (
        read_jsonl(str(src / "*.jsonl"), task_bytes=200_000)
        .apply("tokenize", tokenizer=tok, eos=EOS)
        .apply("word_count_filter", min=150)
        .apply("drop_columns", columns=["text"])
        .write(str(out), target_shard_bytes=150_000, row_group_rows=50)
    )


def _read(out: Path) -> tuple[dict[int, list[int]], TokenInfo]:
    docs, info = {}, None
    for path in sorted(out.glob("part-*.parquet")):
        table = pq.read_table(path)
        info = TokenInfo.of(table.schema.field("tokens"))
        assert info is not None
        flat, off = flat_tokens(table.column("tokens"), info.dtype)
        for i, doc_id in enumerate(table.column("id").to_pylist()):
            docs[doc_id] = flat[off[i] : off[i + 1]].tolist()
    assert info is not None
    return docs, info


@pytest.fixture(scope="module")
def reference(corpus: tuple[Path, str, list[str]], tmp_path_factory: pytest.TempPathFactory) -> Any:
    src, tok, _ = corpus
    out = tmp_path_factory.mktemp("tokref") / "out"
    return out, _pipeline(src, tok, out).run(backend="sequential", progress=False)


def test_token_shards_hold_every_kept_document(
    corpus: tuple[Path, str, list[str]], reference: Any
) -> None:
    _, tok, texts = corpus
    out, result = reference
    docs, info = _read(out)
    assert info.dtype == "<u2" and info.eos_id == load_tokenizer(tok)[0].token_to_id(EOS)
    kept = {i for i, t in enumerate(texts) if len(t.split()) >= 150}
    assert set(docs) == kept and result.rows_out == len(kept)
    decode = load_tokenizer(tok)[0].decode
    for i in kept:
        assert docs[i][-1] == info.eos_id
        assert decode(docs[i][:-1]) == texts[i]
    meta = pq.ParquetFile(next(out.glob("part-*.parquet"))).metadata
    assert meta.num_row_groups > 1
    col = meta.row_group(0).column(meta.schema.names.index("tokens"))
    # the layout token streams map (the tokens one run of bytes per row group)
    assert not col.is_stats_set and "DELTA_LENGTH_BYTE_ARRAY" in col.encodings
    assert not any("DICTIONARY" in e for e in col.encodings)
    assert col.compression == "UNCOMPRESSED"


def test_accounting_counts_tokens_in_and_out(reference: Any) -> None:
    out, result = reference
    docs, _ = _read(out)
    assert result.tokens_out == sum(len(d) for d in docs.values())
    assert result.tokens_in > result.tokens_out  # the filter dropped tokenized rows
    manifest = json.loads((out / "_manifest.json").read_text())
    assert (manifest["tokens_in"], manifest["tokens_out"]) == (result.tokens_in, result.tokens_out)
    table = result.table()
    assert "tokens in" in table and f"{result.tokens_out:>14,}" in table


def test_tokens_count_through_a_dedup_stage(
    corpus: tuple[Path, str, list[str]], tmp_path: Path
) -> None:
    src, tok, _ = corpus
    result = (
        read_jsonl(str(src / "*.jsonl"), task_bytes=200_000)
        .apply("tokenize", tokenizer=tok, eos=EOS)
        .dedup("exact", column="text")
        .write(str(tmp_path / "out"))
        .run(backend="sequential", progress=False)
    )
    docs, _ = _read(tmp_path / "out")
    assert result.tokens_out == sum(len(d) for d in docs.values()) > 0
    dropped = sum(n for r in result.dropped.values() for n in r.values())
    assert (result.tokens_in == result.tokens_out) == (dropped == 0)


def test_yaml_config_tokenizes(
    corpus: tuple[Path, str, list[str]],
    reference: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, tok, _ = corpus
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""input: {{path: "{src}/*.jsonl", format: jsonl, task_mb: 0.2}}
process:
  - tokenize: {{tokenizer: {tok}, column: text, eos: "{EOS}"}}
  - word_count_filter: {{min: 150}}
  - drop_columns: {{columns: [text]}}
output: {{path: {tmp_path / "out"}, target_shard_mb: 0.15, row_group_rows: 50}}
executor: {{backend: thread}}
""")
    assert main(["run", str(cfg), "--accounting", str(tmp_path / "a.json")]) == 0
    assert "tokens out" in capsys.readouterr().out
    acct = json.loads((tmp_path / "a.json").read_text())
    assert acct["tokens_out"] == reference[1].tokens_out
    assert _read(tmp_path / "out")[0] == _read(reference[0])[0]


@pytest.mark.engine
def test_same_token_bytes_on_every_backend(
    corpus: tuple[Path, str, list[str]],
    reference: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    from _engines import make_backend

    src, tok, _ = corpus
    ref_out, ref = reference
    expected = {p.name: p.read_bytes() for p in sorted(ref_out.glob("part-*.parquet"))}
    assert len(expected) > 1
    for name in ["local", "thread", "ray", "spark", "dask"]:
        b = make_backend(name, request)
        try:
            out = tmp_path / name
            result = _pipeline(src, tok, out).run(backend=b, progress=False)
        finally:
            b.close()
        assert (result.tokens_in, result.tokens_out) == (ref.tokens_in, ref.tokens_out), name
        got = {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}
        assert got == expected, f"{name} wrote different bytes"
