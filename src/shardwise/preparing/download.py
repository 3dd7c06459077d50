"""One download: a remote file copied to a local directory or straight into object storage.

Both destinations resume, verify and commit atomically:

- **local** (``out`` on this machine's disk): the bytes go to ``<name>.part``, resumed from
  its size; the finished file is verified (size, checksum) and renamed into place.
- **object storage** (``out`` such as ``s3://bucket/prefix``, shared by every node): the
  worker reads the source in parts of :data:`PART_BYTES` and writes each part as one
  object under ``raw/_partial/<name>/<size>/<offset>`` (a single PUT, so a part exists
  whole or not at all); no byte touches a local disk. A rerun keeps the unbroken run of
  parts from offset 0 and fetches the rest with a ranged read. The parts are then streamed
  into a hidden temporary key (a multipart upload) while being hashed; only when size and
  checksum match is the temporary key copied to the final key and deleted, so the final
  key appears only when complete. A failed check deletes the parts (a corrupt download is
  never resumed) and raises :class:`~shardwise.errors.StorageError` naming the URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from shardwise.errors import ConfigError, ShardwiseError, StorageError
from shardwise.parallel import report
from shardwise.storage import atomic_write, is_transient, join, named, resolve, with_retries

__all__ = ["PART_BYTES", "BadDownload", "Download", "download", "is_remote"]

PART_BYTES = 8 * 2**20
PARTIAL = "_partial"


def is_remote(url: str) -> bool:
    """True for a URL other than ``file://`` (a path on this machine is not remote)."""
    return "://" in url and not url.startswith("file://")


@dataclass(frozen=True)
class Download:
    """One file to fetch.

    Attributes:
        url: the source (``https://``, ``s3://`` ...).
        dest: the local path or object-store URL it is committed to.
        checksum: ``"sha256:<hex>"`` (or ``md5``, ``sha1``) to verify, or None.
        source_options: fsspec options for the source.
        dest_options: fsspec options for the destination.
        part_bytes: bytes per resumable part on object storage.
    """

    url: str
    dest: str
    checksum: str | None = None
    source_options: dict[str, Any] = field(default_factory=dict)
    dest_options: dict[str, Any] = field(default_factory=dict)
    part_bytes: int = PART_BYTES


_CLIENTS = ("aiohttp", "fsspec", "botocore", "s3fs", "gcsfs", "adlfs", "requests", "urllib3")


@contextlib.contextmanager
def _fetching(url: str) -> Iterator[None]:
    """What reading the source raised, once the retries are spent, as a StorageError
    naming ``url`` (aiohttp's ClientPayloadError of a body always cut short is no
    shardwise error, and names no URL); a bug's error propagates as it is."""
    try:
        with named(url):
            yield
    except ShardwiseError:
        raise
    except Exception as exc:
        client = type(exc).__module__.split(".")[0] in _CLIENTS
        if not (client or isinstance(exc, OSError) or is_transient(exc)):
            raise
        raise StorageError(f"cannot download {url}: {type(exc).__name__}: {exc}", url) from exc


def download(job: Download) -> tuple[str, int]:
    """Fetch ``job.url`` to ``job.dest``; return (dest, bytes kept from an earlier partial run)."""
    fs, path = resolve(job.url, **job.source_options)
    with _fetching(job.url):
        size = with_retries(partial(fs.info, path)).get("size")
    if is_remote(job.dest):
        return job.dest, _to_store(job, fs, path, size)
    return job.dest, _to_disk(job, fs, path, size)


class BadDownload(StorageError):
    """A downloaded file's size or checksum is not the expected one."""


class _Hasher:
    """Size and optional checksum of bytes seen, checked against what was expected."""

    def __init__(self, url: str, checksum: str | None) -> None:
        self.url, self.size = url, 0
        self.algo, _, self.want = (checksum or "").partition(":")
        if checksum and (self.algo not in ("sha256", "md5", "sha1") or not self.want):
            raise ConfigError(f"checksum for {url} must look like 'sha256:<hex>', got {checksum!r}")
        self.h = hashlib.new(self.algo) if checksum else None

    def update(self, block: bytes) -> None:
        self.size += len(block)
        if self.h is not None:
            self.h.update(block)

    def check(self, size: int | None) -> None:
        if size is not None and self.size != size:
            raise BadDownload(
                f"download of {self.url} has {self.size} bytes, expected {size}", self.url
            )
        if self.h is not None and self.h.hexdigest() != self.want.lower():
            raise BadDownload(
                f"checksum mismatch for {self.url}: {self.algo} {self.h.hexdigest()} != "
                f"{self.want}",
                self.url,
            )


def _verify_local(path: str, size: int | None, job: Download) -> None:
    hasher = _Hasher(job.url, job.checksum)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(job.part_bytes), b""):
            hasher.update(block)
    hasher.check(size)


def _to_disk(job: Download, fs: Any, path: str, size: int | None) -> int:
    if os.path.exists(job.dest):
        _verify_local(job.dest, size, job)
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(job.dest)), exist_ok=True)
    part = job.dest + ".part"
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if size is not None and have > size:
        os.remove(part)
        have = 0
    resumed = have

    def copy_rest() -> None:
        nonlocal have
        with fs.open(path, "rb", block_size=job.part_bytes) as src, open(part, "ab") as dst:
            if have:
                src.seek(have)
            for block in iter(lambda: src.read(job.part_bytes), b""):
                dst.write(block)
                dst.flush()
                have += len(block)
                report(len(block))

    with _fetching(job.url):
        with_retries(copy_rest)
    try:
        _verify_local(part, size, job)
    except BadDownload:
        os.remove(part)  # a corrupt partial file must not be resumed again
        raise
    os.replace(part, job.dest)
    return resumed


def _parts_dir(job: Download, size: int | None) -> str:
    head, _, name = job.dest.rstrip("/").rpartition("/")
    return join(head, PARTIAL, name, str(size if size is not None else "unknown"))


def _kept_parts(fs: Any, parts: str) -> list[tuple[int, str]]:
    """The parts of an earlier run that continue each other from offset 0 (others are
    deleted, as is every part written for another size of the source)."""
    base = parts.rsplit("/", 1)[0]
    fs.invalidate_cache(base)  # an earlier run in another process wrote them: list afresh
    found = sorted(fs.find(base, detail=True).items()) if fs.exists(base) else []
    kept: list[tuple[int, str]] = []
    end = 0
    for p, d in found:
        head, _, name = p.rpartition("/")
        if head == parts.rstrip("/") and name.isdigit() and int(name) == end:
            kept.append((end, p))
            end += int(d.get("size") or 0)
        else:
            fs.rm_file(p)
    return kept


def _to_store(job: Download, src_fs: Any, src: str, size: int | None) -> int:
    fs, dest = resolve(job.dest, **job.dest_options)
    fs.invalidate_cache(dest)
    with named(job.dest):
        done = with_retries(partial(fs.exists, dest))
    if done and (size is None or int(fs.info(dest).get("size") or 0) == size):
        return 0  # the final key only ever appears verified
    _, parts = resolve(_parts_dir(job, size), **job.dest_options)
    with named(job.dest):
        kept = _kept_parts(fs, parts)
    have = sum(int(fs.info(p)["size"]) for _, p in kept)
    resumed = have

    def fetch_rest() -> None:
        nonlocal have
        with src_fs.open(src, "rb", block_size=job.part_bytes) as f:
            if have:
                f.seek(have)
            while block := _read_full(f, job.part_bytes):
                fs.pipe_file(f"{parts}/{have:016d}", block)
                have += len(block)
                report(len(block))

    with _fetching(job.url):
        with_retries(fetch_rest)
    try:
        _assemble(job, fs, parts, size)
    except BadDownload:  # a wrong size or checksum: these parts must not be resumed
        fs.rm(parts.rsplit("/", 1)[0], recursive=True)
        raise
    fs.rm(parts.rsplit("/", 1)[0], recursive=True)
    return resumed


def _read_full(f: Any, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        block = f.read(n - len(out))
        if not block:
            break
        out += block
    return bytes(out)


def _assemble(job: Download, fs: Any, parts: str, size: int | None) -> None:
    """Stream the parts, in order, into the final key through a temporary key; publish
    only if size and checksum match."""
    hasher = _Hasher(job.url, job.checksum)
    fs.invalidate_cache(parts)
    names = sorted(p for p in fs.find(parts) if p.rsplit("/", 1)[-1].isdigit())
    with named(job.dest), atomic_write(job.dest, **job.dest_options) as out:
        for p in names:
            block = with_retries(partial(fs.cat_file, p))
            hasher.update(block)
            out.write(block)
        hasher.check(size)
