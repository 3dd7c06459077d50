"""The convert step of :func:`shardwise.prepare`: the inputs (each where the download
step left it) become Parquet shards in ``out/data`` through a pipeline with no operators;
and the checks of the inputs it needs first (present, one format)."""

from __future__ import annotations

import json
from typing import Any

from shardwise.errors import ConfigError, StorageError
from shardwise.formats import OnError, check_on_error, detect_format
from shardwise.index import MANIFEST_NAME
from shardwise.parallel import BackendSpec
from shardwise.pipeline import RunResult
from shardwise.preparing.download import is_remote
from shardwise.storage import join, named, open_input, resolve

__all__ = ["convert_step", "one_format", "options_for"]


def convert_step(
    files: list[str],
    out: str,
    format: str | None,
    target: int,
    on_error: OnError,
    backend: BackendSpec,
    progress: bool,
    opts: dict[str, Any],
) -> tuple[list[str], int]:
    """Every input (all present, or a StorageError naming the first missing) as Parquet
    shards in ``out/data``: the shards, and the bad records quarantined."""
    _check_inputs(files, out, opts)
    data = join(out, "data")
    result = _convert(
        files, data, format, target, check_on_error(on_error), backend, progress, opts
    )
    return [join(data, f["path"]) for f in result.files], result.quarantined


def options_for(url: str, out: str, opts: dict[str, Any]) -> dict[str, Any]:
    """``storage_options`` apply to the output's store and to inputs on the same protocol
    (an ``https://`` source takes none when the output is in a bucket)."""
    if is_remote(out) and url.split("://", 1)[0] != out.split("://", 1)[0]:
        return {}
    return opts


def _exists(url: str, opts: dict[str, Any]) -> bool:
    fs, path = resolve(url, **opts)
    with named(url):
        return bool(fs.exists(path))


def _check_inputs(files: list[str], out: str, storage_options: dict[str, Any]) -> None:
    """Refuse to convert when an input is missing, naming the first one."""
    missing = [f for f in files if not _exists(f, options_for(f, out, storage_options))]
    if missing:
        raise StorageError(
            f"input not found (run the download step first?): {missing[0]}", missing[0]
        )


def _convert(
    files: list[str],
    data: str,
    format: str | None,
    target: int,
    on_error: OnError,
    backend: BackendSpec,
    progress: bool,
    storage_options: dict[str, Any],
) -> RunResult:
    """Every input as Parquet shards in ``data``: a pipeline with no operators, so the
    task lifecycle, the ledger and the all-or-nothing commit are the pipeline's own. A
    ``data`` directory already converted is kept as it is (delete it to convert again)."""
    from shardwise.pipeline import Pipeline

    manifest = join(data, MANIFEST_NAME)
    if _exists(manifest, storage_options):
        with open_input(manifest, **storage_options) as f:
            return RunResult.from_manifest(json.loads(f.read()), manifest, 0)

    remote = any(is_remote(f) for f in files)
    pipeline = Pipeline(
        files,
        one_format(files, format),
        on_error=on_error,
        read_options=(("storage_options", storage_options),) if remote else (),
    )
    writer = pipeline.write_parquet(
        data,
        target_shard_bytes=target,
        **({"storage_options": storage_options} if is_remote(data) else {}),
    )
    return writer.run(backend, progress=progress)


def one_format(files: list[str], format: str | None) -> str:
    """The inputs' one format, told by their names (so a mix is refused before anything is
    downloaded); a ``ConfigError`` naming the formats when they differ."""
    formats = {format or detect_format(f) for f in files}
    if len(formats) > 1:
        raise ConfigError(
            f"the inputs mix formats ({', '.join(sorted(formats))}); prepare them separately "
            "or pass format="
        )
    return formats.pop()
