"""YAML pipeline configs with errors that name the file and line.

::

    input:    {path: "raw/*.jsonl", format: jsonl, on_error: skip}
    process:
      - normalize_text: {column: text, lowercase: true}
      - strip_urls: {column: text}
      - word_count_filter: {column: text, min: 5}
      - dedup: {method: exact, column: text}
    output:   {path: clean/, format: parquet, target_shard_mb: 128}
    executor: {backend: local, num_proc: 2}
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

import yaml

from shardwise.errors import ConfigError
from shardwise.formats import guess_format
from shardwise.ops._argcheck import describe, fits
from shardwise.pipeline.api import Pipeline, _reader

__all__ = ["load_config", "pipeline_from_config"]

# every key a section takes, with the type its value must have
_SECTIONS: dict[str, dict[str, Any]] = {
    "input": {
        "path": str | list[str],
        "format": str | None,
        "on_error": Literal["raise", "skip"],
        "columns": list[str] | None,
        "task_mb": float | None,
        "storage_options": dict[str, Any],
    },
    "output": {
        "path": str,
        "format": str | None,
        "target_shard_mb": float,
        "row_group_rows": int,
        "compression": str | None,
        "storage_options": dict[str, Any],
    },
    "executor": {"backend": str | None, "num_proc": int | None},
}
_REQUIRED = {"input": {"path"}, "output": {"path"}}


def _where(source: str, node: yaml.Node) -> str:
    return f"{source}, line {node.start_mark.line + 1}"


def _plain(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def load_config(text: str, source: str = "<config>") -> dict[str, Any]:
    """Parse and validate a config: known sections and keys, values of the right type,
    and each operator with its line (``process`` is a list of ``(name, args, line)``).

    Raises:
        ConfigError: naming ``source`` and the line of the first problem.
    """
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(
            f"{source}{line}: not valid YAML ({getattr(exc, 'problem', exc)})"
        ) from exc
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(
            f"{source}: the config must be a mapping with input, process, output, executor"
        )
    config: dict[str, Any] = {}
    for key_node, value_node in root.value:
        key = key_node.value
        if key == "process":
            config["process"] = _process(value_node, source)
        elif key in _SECTIONS:
            config[key] = _section(key, key_node, value_node, source)
        else:
            raise ConfigError(
                f"{_where(source, key_node)}: unknown key "
                f"{key!r}{_near(key, [*_SECTIONS, 'process'])}"
                "; expected one of input, process, output, executor"
            )
    for key in ("input", "output"):
        if key not in config:
            raise ConfigError(f"{source}: the config needs an {key!r} section")
    return config


def _near(word: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _process(node: yaml.Node, source: str) -> list[tuple[str, dict[str, Any], int]]:
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigError(f"{_where(source, node)}: 'process' must be a list of operators")
    ops = []
    for item in node.value:
        op = _plain(item)
        if isinstance(op, str):
            op = {op: {}}
        if not isinstance(op, dict) or len(op) != 1:
            raise ConfigError(
                f"{_where(source, item)}: each process step is one 'name: {{args}}' entry"
            )
        ((name, args),) = op.items()
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ConfigError(f"{_where(source, item)}: arguments of {name!r} must be a mapping")
        ops.append((name, args, item.start_mark.line + 1))
    return ops


def _section(key: str, key_node: yaml.Node, node: yaml.Node, source: str) -> dict[str, Any]:
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{_where(source, node)}: {key!r} must be a mapping")
    allowed = _SECTIONS[key]
    section: dict[str, Any] = {}
    for k_node, v_node in node.value:
        name = k_node.value
        if name not in allowed:
            raise ConfigError(
                f"{_where(source, k_node)}: unknown key {name!r} in "
                f"{key}{_near(name, list(allowed))}; "
                f"expected one of {', '.join(sorted(allowed))}"
            )
        value = _plain(v_node)
        if not fits(value, allowed[name]):
            raise ConfigError(
                f"{_where(source, v_node)}: {key}.{name} must be {describe(allowed[name])}, "
                f"got {value!r}"
            )
        problem = _executor_problem(name, value) if key == "executor" else None
        if problem:
            raise ConfigError(f"{_where(source, v_node)}: executor.{name} {problem}")
        section[name] = value
    missing = _REQUIRED.get(key, set()) - set(section)
    if missing:
        raise ConfigError(f"{_where(source, key_node)}: {key} needs {', '.join(sorted(missing))}")
    return section


def _executor_problem(name: str, value: Any) -> str | None:
    """What is wrong with executor setting ``name`` (None: nothing), as ``run`` would say
    only after indexing the input."""
    from shardwise.parallel._registry import known_backends

    if name == "backend" and value is not None and value not in known_backends():
        return f"is {value!r}, not one of the backends: {', '.join(known_backends())}"
    if name == "num_proc" and value is not None and value != -1 and value < 1:
        return f"must be -1 (every core or slot) or at least 1, got {value}"
    return None


def pipeline_from_config(text: str, source: str = "<config>") -> tuple[Pipeline, dict[str, Any]]:
    """Build the pipeline a config describes; return it and the executor section."""
    config = load_config(text, source)
    p = _read_input(config["input"], source)
    for name, args, line in config.get("process", []):
        try:
            if name == "dedup":
                p = p.dedup(**args)
            else:
                p = p.apply(name, **args)
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"{source}, line {line}: {exc}") from exc
    return _write_output(p, dict(config["output"]), source), config.get("executor", {})


def _read_input(inp: dict[str, Any], source: str) -> Pipeline:
    """The pipeline over the config's ``input`` section."""
    fmt = inp.get("format") or _guess_format(inp["path"])
    read = _reader(fmt) if fmt else None
    try:
        kwargs: dict[str, Any] = {"on_error": inp.get("on_error", "raise")}
        if inp.get("columns"):
            kwargs["columns"] = inp["columns"]
        if inp.get("task_mb"):
            kwargs["task_bytes"] = int(float(inp["task_mb"]) * 2**20)
        if inp.get("storage_options"):
            kwargs["storage_options"] = inp["storage_options"]
        return (
            read(inp["path"], **kwargs)
            if read
            else Pipeline(inp["path"], None, on_error=kwargs["on_error"])
        )
    except ConfigError as exc:
        raise ConfigError(f"{source}, input: {exc}") from exc


def _write_output(p: Pipeline, out: dict[str, Any], source: str) -> Pipeline:
    """``p`` written where the config's ``output`` section (``out``, consumed) says."""
    path = out.pop("path")
    fmt_out = out.pop("format", "parquet")
    target = int(float(out.pop("target_shard_mb", 128)) * 2**20)
    try:
        return p.write(path, fmt_out, target_shard_bytes=target, **out)
    except ConfigError as exc:
        raise ConfigError(f"{source}, output: {exc}") from exc


def _guess_format(path: Any) -> str | None:
    first = path[0] if isinstance(path, list) else str(path)
    return guess_format(first)
