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
    # gzip.GzipFile checks the stream's length and CRC at its end
    source = _Recorder(cast(IO[bytes], gzip.GzipFile(fileobj=f, mode="rb"))) if stream else f
    try:
        tf = tarfile.open(fileobj=cast(IO[bytes], source), mode="r|" if stream else "r:")  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise FormatError(
            f"not a readable tar file ({exc})", tar_path, "header at offset 0"
        ) from exc
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
        if isinstance(source, _Recorder):
            _check_stream_end(tar_path, source, tf)
        else:
            _check_complete(tar_path, f, tf)
    except FormatError as exc:
        if not tolerate or stream or isinstance(exc, UnsafeMemberError):
            raise
        yield _damaged(current, exc)
        return
    finally:
        tf.close()
    if current is not None:
        yield current


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


class _Recorder:
    """The decompressed stream of a compressed shard, as tarfile reads it, keeping its
    last bytes: what follows the last member is checked once tarfile stops, and a
    stream cannot seek back to it."""

    KEEP = 1 << 16  # more than tarfile reads ahead (one 10 KiB record) plus a header

    def __init__(self, src: IO[bytes]) -> None:
        self.src = src
        self.pulled = 0  # bytes handed to tarfile so far
        self._kept: list[bytes] = []
        self._kept_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = self.src.read(size)
        self.pulled += len(data)
        self._kept.append(data)
        self._kept_bytes += len(data)
        while self._kept_bytes - len(self._kept[0]) >= self.KEEP:
            self._kept_bytes -= len(self._kept.pop(0))
        return data

    def since(self, offset: int) -> bytes | None:
        """The bytes from ``offset`` of the stream to what was last read (None when
        they are no longer kept)."""
        back = self.pulled - offset
        if back > self._kept_bytes:
            return None
        return b"".join(self._kept)[self._kept_bytes - back :] if back > 0 else b""


def _check_stream_end(tar_path: str, rec: _Recorder, tf: tarfile.TarFile) -> None:
    """What follows the last member of a compressed shard: only zero blocks, at least one
    (tarfile stops quietly at a bad or cut header), then the gzip stream's end, whose
    length and CRC gzip checks."""
    place = f"offset {tf.offset} of the uncompressed tar"
    rest, zeros = rec.since(tf.offset), 0
    if rest is None:
        raise FormatError(
            "corrupt tar: the end of the last member is out of reach", tar_path, place
        )
    while rest:
        if rest.strip(b"\0"):
            raise FormatError(
                "corrupt or truncated tar: unreadable data after the last member", tar_path, place
            )
        zeros += len(rest)
        try:
            rest = rec.read(1 << 20)
        except (OSError, EOFError, zlib.error) as exc:
            raise FormatError(
                f"corrupt or truncated gzip stream ({exc})", tar_path, "end of file"
            ) from exc
    if zeros < tarfile.BLOCKSIZE:
        raise FormatError("truncated tar: the end-of-archive blocks are missing", tar_path, place)


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


def _check_complete(tar_path: str, f: IO[bytes], tf: tarfile.TarFile) -> None:
    """tarfile stops quietly at a truncated header or member; check what is left.

    After the last member only zero padding (the end-of-archive blocks) may follow,
    and at least one such block must: without it the file may have been cut exactly
    between two members, which tarfile would read as a shorter, valid archive.
    """
    size = f.seek(0, 2)
    members = tf.getmembers()  # already read: no further I/O
    if members:
        last = members[-1]
        end = last.offset_data + last.size
        if end > size:
            raise FormatError(
                f"truncated tar: member {last.name!r} needs {end} bytes, file has {size}",
                tar_path,
                f"member {last.name}",
            )
    f.seek(tf.offset)
    tail = f.read(64 * 1024)
    if tail.strip(b"\0"):
        raise FormatError(
            "corrupt or truncated tar: unreadable data after the last member",
            tar_path,
            f"offset {tf.offset}",
        )
    if len(tail) < tarfile.BLOCKSIZE:
        raise FormatError(
            "truncated tar: the end-of-archive blocks are missing", tar_path, f"offset {tf.offset}"
        )


def unsafe(tar_path: str, sample: RawSample) -> UnsafeMemberError:
    """The error for a sample holding an unsafe member."""
    return UnsafeMemberError(f"unsafe tar member ({sample.problem})", tar_path, sample.where())
