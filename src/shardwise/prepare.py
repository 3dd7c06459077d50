"""Download and prepare: remote files -> local copies -> indexed Parquet shards.

``prepare(sources, out)`` runs three steps, each on a parallel backend:

- ``download``: copy remote files (``https://``, ``s3://``, ``gs://`` ...) into
  ``out/raw/`` in parallel. A partial download is kept as ``<name>.part`` and resumed
  from where it stopped; the result is verified against the remote size and, when
  given, a checksum (``"sha256:<hex>"`` or ``"md5:<hex>"``), then committed by rename.
  Local inputs are used in place.
- ``convert``: the inputs become Parquet shards in ``out/data/``, through a pipeline
  with no operators (tasks cut by the data, the output published whole or not at all, a
  rerun skips committed tasks, bad records counted under ``on_error="skip"``).
- ``index``: the dataset index of ``out/data`` is written beside it.

``steps=`` runs a subset. A step declares the backends it can run on; asking for
another raises ``NotImplementedError`` naming the ones that can.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError, StorageError, UnsupportedError
from shardwise.formats import OnError, check_on_error, detect_format
from shardwise.index import MANIFEST_NAME
from shardwise.parallel import BackendSpec
from shardwise.pipeline import RunResult
from shardwise.storage import expand, resolve
from shardwise.storage.retry import with_retries

__all__ = ["STEPS", "PrepareResult", "prepare"]

_CHUNK = 4 * 2**20


@dataclass(frozen=True)
class _Step:
    name: str
    backends: tuple[str, ...]


STEPS: dict[str, _Step] = {
    # downloads write to the driver's disk: only backends whose workers share it
    "download": _Step("download", ("thread", "sequential", "local")),
    "convert": _Step("convert", ("thread", "sequential", "local", "joblib", "ray", "dask", "spark")),
    "index": _Step("index", ("thread", "sequential", "local", "joblib", "ray", "dask", "spark")),
}
DEFAULT_BACKEND = {"download": "thread", "convert": None, "index": None}


@dataclass
class PrepareResult:
    """What :func:`prepare` did.

    Attributes:
        downloaded: local paths of downloaded files (in input order).
        resumed_bytes: bytes that were already on disk from a partial download.
        shards: Parquet shards written or found complete.
        num_rows: rows in the prepared dataset.
        index_location: where the index was saved.
        quarantined: bad records skipped under ``on_error="skip"`` (see the manifest in
            ``out/data`` for examples with file and place).
    """

    downloaded: list[str]
    resumed_bytes: int
    shards: list[str]
    num_rows: int
    index_location: str
    quarantined: int = 0


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def _backend_name(backend: Any) -> str:
    return backend if isinstance(backend, str) else getattr(backend, "name", str(backend))


def _check_backend(step: str, backend: Any) -> None:
    if backend is None:
        return
    name = _backend_name(backend)
    allowed = STEPS[step].backends
    if name not in allowed:
        raise UnsupportedError(
            f"step {step!r} cannot run on backend {name!r}; it runs on: {', '.join(allowed)}"
        )


def _verify(path: str, size: int | None, checksum: str | None, url: str) -> None:
    actual = os.path.getsize(path)
    if size is not None and actual != size:
        raise StorageError(f"download of {url} has {actual} bytes, expected {size}", url)
    if checksum:
        algo, _, want = checksum.partition(":")
        if algo not in ("sha256", "md5", "sha1"):
            raise ConfigError(f"checksum for {url} must look like 'sha256:<hex>', got {checksum!r}")
        h = hashlib.new(algo)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_CHUNK), b""):
                h.update(block)
        if h.hexdigest() != want.lower():
            raise StorageError(f"checksum mismatch for {url}: {algo} {h.hexdigest()} != {want}", url)


def _download(args: tuple[str, str, str | None, dict[str, Any]]) -> tuple[str, int]:
    """Download one URL to ``dest``, resuming a ``.part`` file; return (dest, resumed bytes)."""
    url, dest, checksum, storage_options = args
    fs, path = resolve(url, **storage_options)
    size = with_retries(lambda: fs.info(path)).get("size")
    if os.path.exists(dest):
        _verify(dest, size, checksum, url)
        return dest, 0
    part = dest + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if size is not None and have > size:
        os.remove(part)
        have = 0
    resumed = have

    def copy_rest() -> None:
        nonlocal have
        with fs.open(path, "rb", block_size=_CHUNK) as src, open(part, "ab") as dst:
            if have:
                src.seek(have)
            for block in iter(lambda: src.read(_CHUNK), b""):
                dst.write(block)
                dst.flush()
                have += len(block)
                _report(len(block))

    with_retries(copy_rest)
    try:
        _verify(part, size, checksum, url)
    except StorageError:
        os.remove(part)  # a corrupt partial file must not be resumed again
        raise
    os.replace(part, dest)
    return dest, resumed


def _report(n: int) -> None:
    from shardwise.parallel import report

    report(n)


def _convert(files: list[str], data: str, format: str | None, target: int, on_error: OnError,
             backend: BackendSpec, progress: bool, storage_options: dict[str, Any]) -> RunResult:
    """Every input as Parquet shards in ``data``: a pipeline with no operators, so the
    task lifecycle, the ledger and the all-or-nothing commit are the pipeline's own. A
    ``data`` directory already converted is kept as it is (delete it to convert again)."""
    from shardwise.pipeline import Pipeline

    manifest = os.path.join(data, MANIFEST_NAME)
    if os.path.exists(manifest):
        with open(manifest, encoding="utf-8") as f:
            return RunResult.from_manifest(json.load(f), manifest, 0)

    formats = {format or detect_format(f) for f in files}
    if len(formats) > 1:
        raise ConfigError(f"the inputs mix formats ({', '.join(sorted(formats))}); prepare them separately "
                          "or pass format=")
    remote = any(_is_remote(f) for f in files)
    pipeline = Pipeline(files, formats.pop(), on_error=on_error,
                        read_options=(("storage_options", storage_options),) if remote else ())
    return pipeline.write_parquet(data, target_shard_bytes=target).run(backend, progress=progress)


def _download_all(files: list[str], raw: str, checksums: dict[str, str], backend: BackendSpec,
                  progress: bool, opts: dict[str, Any]) -> tuple[list[str], int]:
    """Download the remote ones of ``files`` into ``raw``; the local path of every file and
    the bytes resumed from partial downloads."""
    from shardwise.parallel import parallel_map

    remote = [f for f in files if _is_remote(f)]
    if not remote:
        return list(files), 0
    os.makedirs(raw, exist_ok=True)
    names = [os.path.basename(f.rstrip("/")) for f in remote]
    if len(set(names)) != len(names):
        raise ConfigError("two remote inputs have the same file name; download them to separate dirs")
    jobs = [(f, os.path.join(raw, n), checksums.get(f), opts) for f, n in zip(remote, names)]
    done = parallel_map(_download, jobs, backend=backend or DEFAULT_BACKEND["download"],
                        desc="download", progress=progress, count_unit="B", chunksize=1)
    by_url = {f: d for f, (d, _) in zip(remote, done)}
    return [by_url.get(f, f) for f in files], sum(r for _, r in done)


def prepare(
    sources: str | Sequence[str],
    out: str,
    *,
    steps: Sequence[str] = ("download", "convert", "index"),
    backend: BackendSpec = None,
    format: str | None = None,
    target_shard_bytes: int = 128 * 2**20,
    checksums: dict[str, str] | None = None,
    on_error: OnError = "raise",
    progress: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> PrepareResult:
    """Download ``sources`` (URLs, paths, globs) and turn them into indexed Parquet shards.

    Args:
        sources: inputs; remote ones are downloaded, local ones used in place.
        out: output directory (``raw/`` for downloads, ``data/`` for shards).
        steps: which of ``download``, ``convert``, ``index`` to run.
        backend: a backend name or instance for the steps (default: threads for
            downloads, the active backend otherwise).
        format: input format (default: by file suffix).
        target_shard_bytes: size of the Parquet shards.
        checksums: ``{url: "sha256:<hex>"}`` to verify downloads.
        on_error: ``"raise"`` or ``"skip"`` (quarantine and count) for bad records.
    """
    from shardwise.index import open_dataset

    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ConfigError(f"unknown steps {unknown}; known steps: {', '.join(STEPS)}")
    for step in steps:
        _check_backend(step, backend)
    opts = storage_options or {}
    files = expand([sources] if isinstance(sources, str) else list(sources), **opts)
    raw = os.path.join(out, "raw")
    data = os.path.join(out, "data")
    if "download" in steps:
        local_files, resumed = _download_all(files, raw, checksums or {}, backend, progress, opts)
    else:
        local_files = [os.path.join(raw, os.path.basename(f)) if _is_remote(f) else f for f in files]
        resumed = 0
    shards: list[str] = []
    quarantined = 0
    if "convert" in steps:
        missing = [f for f in local_files if not os.path.exists(f) and not _is_remote(f)]
        if missing:
            raise StorageError(f"input not found (run the download step first?): {missing[0]}", missing[0])
        run = _convert(local_files, data, format, target_shard_bytes, check_on_error(on_error), backend,
                       progress, opts)
        shards = [os.path.join(data, f["path"]) for f in run.files]
        quarantined = run.quarantined
    rows, location = 0, ""
    if "index" in steps:
        index = open_dataset(data, format="parquet", progress=progress)
        rows, location = index.num_samples, index.location
        shards = shards or [f.path for f in index.files]
    return PrepareResult([f for f in local_files if f.startswith(raw)], resumed, shards, rows, location,
                         quarantined)
