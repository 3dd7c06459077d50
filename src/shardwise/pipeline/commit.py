"""The commit protocol of a pipeline's output: staging, markers, manifest, publication.

A run writes everything under a *staging root* that no reader looks at:

- on a local filesystem, a hidden sibling directory ``.<name>.shardwise-partial`` of the
  output directory, renamed to the output directory in one step when the run is complete;
- on object stores (no directory rename), ``<out>/_work/out/``; when the run is complete
  its files are copied into ``<out>/`` and ``_manifest.json`` is written last. Readers of
  shardwise trust the manifest, and ``index_dataset`` refuses a directory whose run has
  not finished; pyarrow and pandas ignore the ``_work`` directory.

Inside the staging root, every file is written under a temporary name and renamed (or
copied) when complete; a task's manifest (``_manifests/task-NNNNN.json``: its ledger, its
files with bytes and xxh64, its time) is written after its files, and a stage's marker
(``_work/sN/task-NNNNN.done.json``) after its intermediate files. Output files and
manifests are fsynced before their rename; a stage's intermediate files and marker are
not (they are no output): the marker records the files' sizes, and a rerun redoes a stage
whose marker is cut short or whose files are not as long as it says (what a power loss
can leave). A rerun skips every task with a (valid) manifest or marker, so after a crash
only unfinished work is redone, and because every step is deterministic the output is
byte-identical to a clean run on every backend.
``_work/`` is removed once the output is published. On a local filesystem it is first
renamed out of the staging root into the temporary directory (``shardwise-trash-*``, when
that is on the same filesystem; otherwise it is deleted in place), the staging root
becomes the output, and the moved directory is deleted on a background thread that the
interpreter waits for at exit; what a killed process leaves there, the next run deletes.
Nothing of it is left beside the output, where a caller may delete the parent directory
right after the run.
"""

from __future__ import annotations

import glob
import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.index import MANIFEST_NAME, DatasetIndex
from shardwise.ops.operators import Op
from shardwise.pipeline.code_digest import digest
from shardwise.pipeline.sink import Sink
from shardwise.pipeline.task_split import Piece
from shardwise.storage import atomic_write, join, named, open_input, require_bucket, resolve

__all__ = ["WORK", "Layout", "fingerprint", "read_json", "write_json"]

WORK = "_work"
MANIFESTS = "_manifests"
FINGERPRINT = "pipeline.json"
CLEANUP_THREAD = "shardwise-staging-cleanup"
TRASH = "shardwise-trash-"
log = logging.getLogger("shardwise.pipeline")


def read_json(url: str, storage_options: dict[str, Any]) -> Any:
    with open_input(url, **storage_options) as f:
        return json.loads(f.read())


def write_json(
    url: str,
    data: Any,
    storage_options: dict[str, Any],
    *,
    indent: int | None = None,
    durable: bool = True,
) -> None:
    with atomic_write(url, "w", durable=durable, **storage_options) as f:
        f.write(json.dumps(data, sort_keys=True, indent=indent))


def exists(url: str, storage_options: dict[str, Any]) -> bool:
    fs, path = resolve(url, **storage_options)
    fs.invalidate_cache(path)  # other processes write here: never answer from an old listing
    with named(url):  # no credentials or access denied: refused at once, naming the URL
        return bool(fs.exists(path))


def fingerprint(
    index: DatasetIndex, ops: Sequence[Op], sink: Sink, tasks: Sequence[Sequence[Piece]]
) -> str:
    """A digest of everything that decides the output bytes: the input files, each
    operator's code and values (:func:`shardwise.pipeline.code_digest.digest`), the sink and
    the tasks."""
    h = hashlib.sha1()
    for f in index.files:
        h.update(f"{f.path}|{f.size}|{f.fingerprint}\n".encode())
    for op in ops:  # what the operator computes, not only its name (a rerun after a fix)
        values = digest(_with_defaults(op.fn, op.kwargs))  # `column="text"` or left out alike
        h.update(f"{op.name}|{op.kind}|{digest(op.fn)}|{values}\n".encode())
    h.update(
        repr((sink.format, sink.target_shard_bytes, sorted(sink.options.items(), key=str))).encode()
    )
    h.update(repr([[(p.unit, p.lo, p.hi) for p in t] for t in tasks]).encode())
    return h.hexdigest()


def _with_defaults(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the defaults of ``fn``'s other keyword parameters filled in, so that
    naming a default and leaving it out give one pipeline (``kwargs`` as they are where the
    signature cannot be read)."""
    try:
        bound = inspect.signature(fn).bind_partial(**kwargs)
    except (TypeError, ValueError):
        return kwargs
    bound.apply_defaults()
    return dict(sorted(bound.arguments.items()))


def _is_local(url: str, storage_options: dict[str, Any]) -> bool:
    fs, _ = resolve(url, **storage_options)
    protocols = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "file" in protocols or "local" in protocols


@dataclass(frozen=True)
class Layout:
    """Where a run writes (``root``, the staging root) and publishes (``final``)."""

    final: str
    root: str
    local: bool
    storage_options: dict[str, Any]

    @classmethod
    def of(cls, sink: Sink) -> Layout:
        opts = sink.storage_options
        if _is_local(sink.path, opts):
            _, path = resolve(sink.path, **opts)
            path = os.path.abspath(path).rstrip("/")
            head, name = os.path.split(path)
            return cls(path, os.path.join(head, f".{name}.shardwise-partial"), True, opts)
        return cls(sink.path, join(sink.path, WORK, "out"), False, opts)

    # -- names --------------------------------------------------------------------
    def work(self, *parts: str) -> str:
        return join(self.root, WORK, *parts)

    def stage_file(self, stage: int, task: int, ext: str) -> str:
        return self.work(f"s{stage}", f"task-{task:05d}.{ext}")

    def task_manifest(self, task: int) -> str:
        return join(self.root, MANIFESTS, f"task-{task:05d}.json")

    def part_prefix(self, task: int) -> str:
        return join(self.root, f"part-{task:05d}")

    def relative(self, url: str) -> str:
        """``url`` relative to the staging root (as the manifest lists files)."""
        base = self.root.rstrip("/") + "/"
        return url[len(base) :] if url.startswith(base) else os.path.basename(url)

    # -- lifecycle ------------------------------------------------------------------
    def committed(self, fp: str) -> dict[str, Any] | None:
        """The manifest of an already published run of this pipeline, if any."""
        opts = self.storage_options
        manifest = join(self.final, MANIFEST_NAME)
        if not exists(manifest, opts):
            if self.local and os.path.isdir(self.final) and os.listdir(self.final):
                raise ConfigError(
                    f"{self.final} exists and is not empty; choose a new output directory"
                )
            return None
        m = read_json(manifest, opts)
        if m.get("fingerprint") != fp:
            raise ConfigError(
                f"{self.final} already holds a committed dataset of another pipeline or "
                "input; use a new output directory"
            )
        return dict(m)

    def begin(self, fp: str) -> None:
        """Claim the staging root for this pipeline; a root left by another pipeline's
        unfinished run is discarded (nothing in it was ever published), and so are staging
        files a killed process had not finished deleting."""
        opts = self.storage_options
        if not self.local:
            require_bucket(self.final, **opts)
        else:
            for left in glob.glob(os.path.join(glob.escape(tempfile.gettempdir()), TRASH + "*")):
                shutil.rmtree(left, ignore_errors=True)
        marker = self.work(FINGERPRINT)
        if exists(marker, opts) and read_json(marker, opts).get("fingerprint") == fp:
            _clean_temporaries(self.root, opts)
            return
        fs, root = resolve(self.root, **opts)
        if fs.exists(root):
            log.warning(
                "discarding the unfinished output of another run in %s (its input, operators' "
                "code or values, or output options differ): starting over",
                self.root,
            )
            fs.rm(root, recursive=True)
        write_json(marker, {"fingerprint": fp}, opts)

    def publish(self, manifest: dict[str, Any]) -> None:
        """Make the staged output the output directory, manifest last."""
        opts = self.storage_options
        fs, work = resolve(join(self.root, WORK), **opts)
        if self.local:
            write_json(join(self.root, MANIFEST_NAME), manifest, opts, indent=1)
            trash = _set_aside(
                work
            )  # deleting ~2x the input's bytes of staging files is not waited for
            if os.path.isdir(self.final):
                os.rmdir(self.final)  # empty (checked when the run began)
            os.replace(self.root, self.final)
            if trash is not None:  # not a daemon thread: the interpreter finishes it before exiting
                threading.Thread(
                    target=shutil.rmtree,
                    args=(trash,),
                    kwargs={"ignore_errors": True},
                    name=CLEANUP_THREAD,
                ).start()
            return
        _, root = resolve(self.root, **opts)
        fs.invalidate_cache()  # the workers wrote these files: list and read them afresh
        for path in sorted(fs.find(root)):
            rel = path[len(root.rstrip("/")) + 1 :]
            if not rel.startswith(WORK + "/"):
                fs.cp_file(path, resolve(join(self.final, rel), **opts)[1])  # no glob
        write_json(join(self.final, MANIFEST_NAME), manifest, opts, indent=1)
        fs.rm(resolve(join(self.final, WORK), **opts)[1], recursive=True)


def _set_aside(work: str) -> str | None:
    """Move the local directory ``work`` into the temporary directory to be deleted later,
    and return where; when it cannot move there (another filesystem), delete it now."""
    if not os.path.isdir(work):
        return None
    trash = os.path.join(tempfile.gettempdir(), f"{TRASH}{uuid.uuid4().hex}")
    try:
        os.rename(work, trash)
    except OSError:
        shutil.rmtree(work)
        return None
    return trash


def _clean_temporaries(root: str, storage_options: dict[str, Any]) -> None:
    """Remove temporary files a crashed run left behind (never committed, never read)."""
    fs, path = resolve(root, **storage_options)
    fs.invalidate_cache(path)
    if not fs.exists(path):
        return
    for p in fs.find(path):
        if p.rsplit("/", 1)[-1].startswith("_tmp."):
            fs.rm_file(p)
