"""YAML configs: every mistake is a ConfigError naming the file and the line."""

from __future__ import annotations

import pytest

from shardwise.errors import ConfigError
from shardwise.pipeline.config import load_config, pipeline_from_config

GOOD = """input:    {path: "raw/*.jsonl", format: jsonl, on_error: skip, task_mb: 4}
process:
  - normalize_text: {column: text, lowercase: true}
  - strip_urls
  - word_count_filter: {column: text, min: 5}
  - dedup: {method: minhash, column: text, threshold: 0.8, verify: true}
output:   {path: clean/, format: parquet, target_shard_mb: 0.5}
executor: {backend: local, num_proc: 2}
"""


def test_a_good_config_keeps_each_operator_with_its_line() -> None:
    config = load_config(GOOD, "c.yaml")
    assert [(name, line) for name, _, line in config["process"]] == [
        ("normalize_text", 3),
        ("strip_urls", 4),
        ("word_count_filter", 5),
        ("dedup", 6),
    ]
    assert config["process"][2][1] == {"column": "text", "min": 5}
    assert config["input"]["on_error"] == "skip" and config["executor"] == {
        "backend": "local",
        "num_proc": 2,
    }
    pipeline, executor = pipeline_from_config(GOOD, "c.yaml")
    assert executor["num_proc"] == 2
    assert [op.name for op in pipeline.ops] == [
        "normalize_text",
        "strip_urls",
        "word_count_filter",
        "minhash_dedup",
    ]


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        (
            "input: {path: x}\noutput: {path: y}\nexecutor: {backend: local, num_proc: two}\n",
            3,
            ["executor.num_proc must be int | None", "'two'"],
        ),
        (
            "input: {path: x, on_error: ignore}\noutput: {path: y}\n",
            1,
            ["input.on_error", "'ignore'"],
        ),
        (
            "input: {path: x}\noutput: {path: y, target_shard_mb: big}\n",
            2,
            ["output.target_shard_mb"],
        ),
        (
            "input: {path: x}\noutput: {path: y}\nexecutor: {backnd: ray}\n",
            3,
            ["did you mean 'backend'"],
        ),
        (
            "input: {path: x}\noutptu: {path: y}\n",
            2,
            ["unknown key 'outptu'", "did you mean 'output'"],
        ),
        ("input: {path: x}\noutput: {path: y}\nprocess: {a: 1}\n", 3, ["must be a list"]),
        (
            "input: {path: x}\noutput: {path: y}\nprocess:\n  - {a: 1, b: 2}\n",
            4,
            ["one 'name: {args}' entry"],
        ),
        (
            "input: {path: x}\noutput: {path: y}\nprocess:\n  - strip_urls: [text]\n",
            4,
            ["must be a mapping"],
        ),
        ("output: {format: parquet}\ninput: {path: x}\n", 1, ["output needs path"]),
        ("input: {path: x}\noutput: [1, 2\n", 3, ["not valid YAML"]),
    ],
)
def test_load_config_errors_name_file_and_line(text: str, line: int, words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(text, "c.yaml")
    message = str(info.value)
    assert message.startswith(f"c.yaml, line {line}") or f"c.yaml, line {line}:" in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("step", "words"),
    [
        (
            "word_count_filter: {column: text, min: five}",
            ["argument 'min' must be int | None", "'five'"],
        ),
        ("word_count_filter: {column: text, min: true}", ["argument 'min'"]),
        ("normalize_text: {column: 3}", ["argument 'column' must be str"]),
        ("select_columns: {columns: text}", ["argument 'columns'"]),
        ("length_filter: {column: text, mn: 3}", ["no argument 'mn'", "did you mean 'min'"]),
        ("dedup: {method: minhash, column: text, threshold: high}", ["'threshold'"]),
        ("dedup: {method: minhash, column: text, num_perms: 64}", ["did you mean 'num_perm'"]),
    ],
)
def test_operator_arguments_are_checked_with_the_line(step: str, words: list[str]) -> None:
    text = f"input: {{path: x.jsonl}}\noutput: {{path: y}}\nprocess:\n  - {step}\n"
    with pytest.raises(ConfigError) as info:
        pipeline_from_config(text, "c.yaml")
    message = str(info.value)
    assert "c.yaml, line 4" in message, message
    for word in words:
        assert word in message, message


def test_missing_config_sections_are_named() -> None:
    with pytest.raises(ConfigError, match="needs an 'output' section"):
        load_config("input: {path: x}\n", "c.yaml")
    with pytest.raises(ConfigError, match="must be a mapping with input"):
        load_config("- a\n- b\n", "c.yaml")
