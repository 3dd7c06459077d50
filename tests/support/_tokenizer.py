"""A small byte-level BPE trained on the BBC corpus (no download): decoding gives the text
back exactly, so tests can compare streamed tokens with the documents."""

from __future__ import annotations

from pathlib import Path

from _corpus import bbc_texts

EOS = "<|endoftext|>"
BOS = "<|bos|>"


def train_bpe(path: Path, vocab_size: int = 2000, texts: list[str] | None = None) -> str:
    """Train a byte-level BPE on ``texts`` (the BBC articles), save it at ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, BOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts if texts is not None else bbc_texts(), trainer)
    tok.save(str(path))
    return str(path)
