"""Download and prepare: remote files -> copies in ``out/raw`` -> indexed Parquet shards.

``prepare(sources, out)`` runs three steps, each on a parallel backend:

- ``download``: copy remote files (``https://``, ``s3://``, ``gs://`` ...) into
  ``out/raw/`` in parallel, resuming partial downloads, verifying the size and, when
  given, a checksum (``"sha256:<hex>"`` or ``"md5:<hex>"``), committing atomically (see
  :mod:`shardwise.preparing.download`). When ``out`` is shared storage (``s3://...``) the
  download can run on ``ray``, ``spark`` or ``dask``: each worker streams its files
  straight into the bucket. Local inputs are used in place.
- ``convert``: the inputs become Parquet shards in ``out/data/``, through a pipeline
  with no operators (tasks cut by the data, the output published whole or not at all, a
  rerun skips committed tasks, bad records counted under ``on_error="skip"``).
- ``index``: the dataset index of ``out/data`` is written beside it.

``steps=`` runs a subset; ``"prepare"`` names convert and index. Which backend runs a
step, and the backends each step can run on, are in :mod:`shardwise.preparing.steps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.formats import OnError
from shardwise.parallel import BackendSpec, parallel_backend
from shardwise.preparing.convert import convert_step, one_format, options_for
from shardwise.preparing.download import PART_BYTES, Download, download, is_remote
from shardwise.preparing.steps import backend_for, expand_steps
from shardwise.storage import expand, join, require_bucket

__all__ = ["PrepareResult", "prepare"]


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


def _download_all(
    files: list[str],
    raw: str,
    checksums: dict[str, str],
    backend: BackendSpec,
    progress: bool,
    opts: dict[str, Any],
    part_bytes: int,
) -> tuple[list[str], int]:
    """Download the remote ones of ``files`` into ``raw``; where every file now is, and the
    bytes kept from partial downloads."""
    from shardwise.parallel import parallel_map

    remote = [f for f in files if is_remote(f) and not f.startswith(raw.rstrip("/") + "/")]
    unused = sorted(set(checksums) - set(remote))
    if unused:  # a verification asked for would otherwise never happen, unsaid
        raise ConfigError(
            f"checksums given for {unused}, which are not among the files to download "
            f"({len(remote)}: {remote[:3]}{' ...' if len(remote) > 3 else ''}); a checksum "
            "names a remote file's URL as it is downloaded"
        )
    if not remote:
        return list(files), 0
    names = [f.rstrip("/").rsplit("/", 1)[-1] for f in remote]
    if len(set(names)) != len(names):
        raise ConfigError(
            "two remote inputs have the same file name; download them to separate dirs"
        )
    dest_opts = opts if is_remote(raw) else {}
    jobs = [
        Download(
            f, join(raw, n), checksums.get(f), options_for(f, raw, opts), dest_opts, part_bytes
        )
        for f, n in zip(remote, names)
    ]
    done = parallel_map(
        download,
        jobs,
        backend=backend,
        desc="download",
        progress=progress,
        count_unit="B",
        chunksize=1,
    )
    by_url = {f: d for f, (d, _) in zip(remote, done)}
    return [by_url.get(f, f) for f in files], sum(r for _, r in done)


def _where_downloaded(files: list[str], raw: str) -> list[str]:
    """Where the download step put (or would put) each input: remote ones in ``raw``."""
    return [join(raw, f.rsplit("/", 1)[-1]) if is_remote(f) else f for f in files]


def _expand(sources: str | Sequence[str], out: str, opts: dict[str, Any]) -> list[str]:
    """The files named; an ``http(s)://`` URL without a glob is one file (listing it as a
    possible directory would fetch the whole file on the driver)."""
    items = [sources] if isinstance(sources, str) else list(sources)
    return [
        f
        for item in items
        for f in (
            [item]
            if item.startswith(("http://", "https://")) and not set("*?[") & set(item)
            else expand(item, **options_for(item, out, opts))
        )
    ]


def _index(data: str, backend: BackendSpec, progress: bool, opts: dict[str, Any]) -> Any:
    from shardwise.index import index_dataset

    remote_opts = opts if is_remote(data) else None
    if backend is None:
        return index_dataset(data, format="parquet", progress=progress, storage_options=remote_opts)
    with parallel_backend(backend):
        return index_dataset(data, format="parquet", progress=progress, storage_options=remote_opts)


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
    part_bytes: int = PART_BYTES,
) -> PrepareResult:
    """Download ``sources`` (URLs, paths, globs) and turn them into indexed Parquet shards.

    Args:
        sources: inputs; remote ones are downloaded, local ones used in place.
        out: output directory or object-store prefix (``raw/`` for downloads, ``data/``
            for shards). With ``s3://...`` (storage every node reaches) the download step
            can also run on ``ray``, ``spark`` and ``dask``.
        steps: which of ``download``, ``convert``, ``index`` to run (``prepare`` names
            convert and index).
        backend: a backend name or instance for every step (default: see
            :mod:`shardwise.preparing.steps`; ``parallel_backend(name, steps=[...])`` chooses
            one per step).
        format: input format (default: by file suffix).
        target_shard_bytes: size of the Parquet shards.
        checksums: ``{url: "sha256:<hex>"}`` to verify downloads.
        on_error: ``"raise"`` or ``"skip"`` (quarantine and count) for bad records.
        progress: show progress bars (downloads count bytes as the workers fetch them).
        storage_options: fsspec options (endpoint, credentials) for the output's store and
            for inputs on the same protocol.
        part_bytes: a download into object storage is fetched and kept in parts of this
            many bytes, each its own object, so an interrupted download resumes from the
            last whole part.

    Raises:
        UnsupportedError: a step was given a backend it cannot run on (a
            ``NotImplementedError`` naming the step, the backend and the ones that can).
        StorageError: an input is missing or refused, or a download is corrupt (naming its URL).
    """
    run = expand_steps(steps)
    chosen = {step: backend_for(step, backend, out, is_remote(out)) for step in run}
    if part_bytes < 1:
        raise ConfigError(f"part_bytes must be at least 1, got {part_bytes}")
    opts = storage_options or {}
    require_bucket(out, **opts)
    files = _expand(sources, out, opts)
    if "convert" in run and files:
        one_format(files, format)  # the names tell the formats: refuse a mix before fetching
    raw, data = join(out, "raw"), join(out, "data")
    if "download" in run:
        inputs, resumed = _download_all(
            files, raw, checksums or {}, chosen["download"], progress, opts, part_bytes
        )
    else:
        inputs, resumed = _where_downloaded(files, raw), 0
    shards: list[str] = []
    quarantined = 0
    if "convert" in run:
        shards, quarantined = convert_step(
            inputs, out, format, target_shard_bytes, on_error, chosen["convert"], progress, opts
        )
    rows, location = 0, ""
    if "index" in run:
        index = _index(data, chosen["index"], progress, opts)
        rows, location = index.num_samples, index.location
        shards = shards or [f.path for f in index.files]
    downloaded = [f for f in inputs if f.startswith(raw.rstrip("/") + "/")]
    return PrepareResult(downloaded, resumed, shards, rows, location, quarantined)
