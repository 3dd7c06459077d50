"""Which local files Arrow readers memory-map: those on disk or memory filesystems."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.storage import open_arrow_input
from shardwise.storage.localfs import mappable, parse_mountinfo

MOUNTINFO = "\n".join(
    [
        r"22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw",
        r"40 22 0:35 / /mnt/nfs rw,relatime shared:20 - nfs4 server:/export rw,vers=4.2",
        r"41 22 0:36 / /mnt/my\040bucket rw,nosuid shared:21 - fuse.s3fs s3fs rw,user_id=0",
        r"42 22 0:37 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw",
        r"43 40 0:38 / /mnt/nfs/scratch rw shared:22 - xfs /dev/sdb1 rw",
        "a line that is not a mount",
    ]
)


def test_mountinfo_is_parsed_longest_mount_point_first() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    assert mounts[0] == ("/mnt/nfs/scratch", "xfs")
    assert ("/mnt/my bucket", "fuse.s3fs") in mounts  # an escaped space
    assert len(mounts) == 5


@pytest.mark.parametrize(
    ("path", "mapped"),
    [
        ("/data/train/part-0.parquet", True),  # ext4 root
        ("/dev/shm/part-0.parquet", True),  # memory
        (
            "/mnt/nfs/part-0.parquet",
            False,
        ),  # a network filesystem: a failed page read would be SIGBUS
        ("/mnt/nfsother/part-0.parquet", True),  # not under /mnt/nfs: on the root filesystem
        ("/mnt/my bucket/part-0.parquet", False),  # FUSE
        ("/mnt/nfs/scratch/part-0.parquet", True),  # a local disk mounted below the NFS mount
    ],
)
def test_only_files_on_disk_or_memory_filesystems_are_mapped(path: str, mapped: bool) -> None:
    assert mappable(path, tuple(parse_mountinfo(MOUNTINFO))) is mapped


def test_nothing_is_mapped_without_a_mount_table() -> None:
    assert not mappable("/data/part-0.parquet", ())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/mountinfo")
def test_a_local_parquet_file_is_read_memory_mapped(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path)
    f = open_arrow_input(str(path))
    try:
        assert isinstance(f, pa.MemoryMappedFile) is mappable(str(path))
        assert mappable(
            str(path)
        )  # the test machine's temporary directory is on a local disk or memory
        assert pq.ParquetFile(f).read().column("x").to_pylist() == list(range(1000))
    finally:
        f.close()
