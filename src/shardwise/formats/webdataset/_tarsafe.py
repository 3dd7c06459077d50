"""Safe iteration over tar members, grouped into WebDataset samples.

A member is unsafe when its name is absolute, has a ``..`` component, or it is
not a regular file or directory (symlink, hardlink, character or block device,
FIFO). Unsafe members raise :class:`UnsafeMemberError` naming the tar file and the
member; callers that skip bad samples catch it and quarantine the sample. A sample is
also bad (a FormatError, or quarantined) when its key comes back after another sample,
a field repeats, or a member name is not UTF-8. Whatever follows the last member must be
the end-of-archive blocks, in plain and in gzip-compressed shards alike: tarfile stops
quietly at a damaged header, and that must not read as a shorter, valid shard.
"""

from __future__ import annotations

import gzip
import posixpath
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, cast

from shardwise.errors import FormatError, UnsafeMemberError
from shardwise.formats.webdataset._tarend import StreamRecorder, check_complete, check_stream_end


def split_key(name: str) -> tuple[str, str]:
    """``dir.v1/0001.seg.jpg`` -> (``dir.v1/0001``, ``seg.jpg``): key ends at the basename's
    first dot."""
    head, base = posixpath.split(name)
    stem, dot, ext = base.partition(".")
    key = posixpath.join(head, stem) if head else stem
    return key, ext if dot else ""


def check_member(tar_path: str, m: tarfile.TarInfo) -> str | None:
    """Return why ``m`` is unsafe, or None."""
    name = m.name
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    if ".." in name.replace("\\", "/").split("/"):
        return "'..' path component"
    if m.issym():
        return f"symbolic link to {m.linkname!r}"
    if m.islnk():
        return f"hard link to {m.linkname!r}"
    if m.ischr() or m.isblk():
        return "device file"
    if m.isfifo():
        return "FIFO"
    if not (m.isfile() or m.isdir()):
        return f"unsupported member type {m.type!r}"
    return None


@dataclass
class RawSample:
    """Members of one sample: key, and per field (members, data offset, size)."""

    key: str
    fields: dict[str, tarfile.TarInfo] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)  # member bytes, for compressed tars
    problem: str | None = None
    member: str = ""
    unsafe: bool = False  # the problem is a member that could escape or is not a file
    place: str = ""  # where a bad sample's problem is, when not at a member

    def where(self) -> str:
        """The place of this sample's problem, for errors and the quarantine."""
        return self.place or f"member {self.member}"


def is_compressed(tar_path: str) -> bool:
    """A gzip-compressed shard (``.tar.gz``, ``.tgz``): read as a stream, whole."""
    lower = tar_path.lower()
    return lower.endswith((".tar.gz", ".tgz"))


def iter_samples(
    tar_path: str, f: IO[bytes], keep_data: bool = False, tolerate: bool = False
) -> Iterator[RawSample]:
    """Group consecutive members with the same key into samples (headers only).

    A sample's members must be adjacent: a key that comes back after another key
    (``a.txt``, ``b.txt``, ``a.json``) would make two half-samples with one key, so
    that second part is a bad sample naming the key. A field that repeats within a
    sample is bad too. Directories are ignored. A compressed shard is read as one
    stream; with ``keep_data`` each safe member's bytes are kept on its sample (memory:
    one sample), since a stream cannot seek back to them.

    A shard cut short or damaged after its first header is an error naming the place;
    for a plain tar with ``tolerate`` (``on_error="skip"``) the samples before the damage
    are yielded and the sample in progress there, with the rest of the shard, is one last
    bad sample (its members may be cut, or more of them may have followed). A compressed
    shard stays an error: what it decompressed to is only known good once gzip's CRC at
    its end checks, and damage anywhere before can decode to plausible members.
    """
    stream = is_compressed(tar_path)
    tf, rec = _open(tar_path, f)
    current: RawSample | None = None
    finished: set[str] = set()  # keys of samples already complete in this tar
    try:
        for m in _members(tar_path, tf):
            key, ext = split_key(m.name)
            if current is None or key != current.key:
                if current is not None:
                    finished.add(current.key)
                    yield current
                current = _new_sample(key, m, finished)
            problem = _add_member(tar_path, current, ext, m)
            if keep_data and stream and problem is None:
                current.data[ext] = _member_bytes(tar_path, tf, m)
        _check_end(tar_path, f, tf, rec)
    except FormatError as exc:
        if not tolerate or stream or isinstance(exc, UnsafeMemberError):
            raise
        yield _damaged(current, exc)
        return
    finally:
        tf.close()
    if current is not None:
        yield current


def _open(tar_path: str, f: IO[bytes]) -> tuple[tarfile.TarFile, StreamRecorder | None]:
    """The tar over ``f``, and for a compressed shard the recorder of its decompressed
    stream (gzip.GzipFile checks the stream's length and CRC at its end)."""
    stream = is_compressed(tar_path)
    rec = StreamRecorder(cast(IO[bytes], gzip.GzipFile(fileobj=f, mode="rb"))) if stream else None
    source = cast(IO[bytes], rec) if rec is not None else f
    try:
        tf = tarfile.open(fileobj=source, mode="r|" if stream else "r:")  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise FormatError(
            f"not a readable tar file ({exc})", tar_path, "header at offset 0"
        ) from exc
    return tf, rec


def _check_end(
    tar_path: str, f: IO[bytes], tf: tarfile.TarFile, rec: StreamRecorder | None
) -> None:
    """What follows the last member: checked in the stream or in the file."""
    if rec is not None:
        check_stream_end(tar_path, rec, tf)
    else:
        check_complete(tar_path, f, tf)


def _damaged(current: RawSample | None, exc: FormatError) -> RawSample:
    """The last, bad sample of a damaged shard: the one in progress and all after it."""
    sample = RawSample(current.key if current is not None else "")
    sample.problem = f"{exc.reason}; this sample and the rest of the shard are lost"
    sample.place = exc.location or "end of file"
    return sample


def _members(tar_path: str, tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    """The tar's members other than directories, in order; a bad header is an error."""
    offset = 0
    while True:
        try:
            m = tf.next()
        except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
            raise FormatError(
                f"corrupt or truncated tar ({exc})", tar_path, f"header at offset {offset}"
            ) from exc
        if m is None:
            return
        offset = m.offset
        if not m.isdir():
            yield m


def _new_sample(key: str, m: tarfile.TarInfo, finished: set[str]) -> RawSample:
    sample = RawSample(key)
    if key in finished:
        sample.problem, sample.member = (
            f"sample {key!r} has members that are not adjacent (another sample comes between them)",
            m.name,
        )
    return sample


def _add_member(tar_path: str, sample: RawSample, ext: str, m: tarfile.TarInfo) -> str | None:
    """Add member ``m`` as field ``ext``; return what is wrong with it, if anything (an
    unsafe member outranks a lesser problem as the sample's reason)."""
    problem = check_member(tar_path, m)
    unsafe_member = problem is not None
    if problem is None and ext in sample.fields:
        problem = f"field {ext!r} appears twice"
    if problem is None and not _is_text(m.name):  # tarfile keeps undecodable bytes as surrogates
        problem = "member name is not valid UTF-8"
    if problem is not None and (sample.problem is None or (unsafe_member and not sample.unsafe)):
        sample.problem, sample.member, sample.unsafe = problem, m.name, unsafe_member
    sample.fields[ext] = m
    return problem


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _member_bytes(tar_path: str, tf: tarfile.TarFile, m: tarfile.TarInfo) -> bytes:
    try:
        src = tf.extractfile(m)
        data = src.read() if src is not None else b""
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise FormatError(
            f"corrupt or truncated member data ({exc})", tar_path, f"member {m.name}"
        ) from exc
    if len(data) != m.size:
        raise FormatError(
            f"truncated member data ({len(data)} of {m.size} bytes)", tar_path, f"member {m.name}"
        )
    return data


def unsafe(tar_path: str, sample: RawSample) -> UnsafeMemberError:
    """The error for a sample holding an unsafe member."""
    return UnsafeMemberError(f"unsafe tar member ({sample.problem})", tar_path, sample.where())
