"""An S3 server that goes away in the middle of an epoch and comes back on the same
address: the loader retries the reads it could not make (with backoff) and the epoch
ends with every sample exactly once, in the same order as from local disk.

This test starts its own SeaweedFS server (the session one must stay up for the rest).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _s3server import remove_weed_files, start_weed, stop_weed, wait_ready

from shardwise import StreamingDataset

pytestmark = pytest.mark.engine

ROWS_PER_FILE, FILES, GROUP = 20_000, 4, 1_000


@pytest.fixture
def own_server() -> Iterator[dict[str, Any]]:
    workdir = tempfile.mkdtemp(prefix="swweed-restart", dir="/tmp")
    key, secret = "restart-key", "restart-secret-" + uuid.uuid4().hex[:8]
    proc, ports, log = start_weed(workdir, key, secret)
    server: dict[str, Any] = {
        "proc": proc,
        "ports": ports,
        "key": key,
        "secret": secret,
        "workdir": workdir,
        "logs": [log],
        "done": threading.Event(),
    }
    try:
        wait_ready(proc, workdir, ports, key, secret)
        endpoint = f"http://127.0.0.1:{ports['s3']}"
        server["storage_options"] = {
            "key": key,
            "secret": secret,
            "client_kwargs": {"endpoint_url": endpoint},
        }
        yield server
    finally:
        stop_weed(server["proc"])
        server["done"].set()
        for f in server["logs"]:
            f.close()
        remove_weed_files(workdir, ports)


def _write_dataset(local: Path, fs: Any, bucket: str) -> None:
    local.mkdir()
    for f in range(FILES):
        ids = np.arange(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE, dtype=np.int64)
        table = pa.table({"id": ids, "x": ids.astype(np.float32) * 0.5})
        pq.write_table(table, local / f"part-{f}.parquet", row_group_size=GROUP)
        fs.put(str(local / f"part-{f}.parquet"), f"{bucket}/ds/part-{f}.parquet")


def _restart_later(server: dict[str, Any], retried: threading.Event) -> threading.Thread:
    """Stop the server now; start it again on the same ports once the loader has logged a
    retry of its own (after at least 2 s, at most 40 s).

    Waiting for the retry, not for a fixed time, keeps the test independent of how long
    the storage client's own retries last. The thread that starts the server lives until
    the test ends: the server is tied to the thread that started it (it gets SIGTERM when
    that thread exits)."""
    stop_weed(server["proc"])
    down_since = time.monotonic()

    def back() -> None:
        retried.wait(40.0)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - down_since)))
        proc, _, log = start_weed(
            server["workdir"], server["key"], server["secret"], server["ports"]
        )
        server["proc"] = proc
        server["logs"].append(log)
        server["started"] = True
        server["done"].wait()

    t = threading.Thread(target=back, daemon=True)
    t.start()
    return t


class _RetrySeen(logging.Handler):
    """Sets an event when the loader logs that it retries a read."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.event.set()


def _ids(ds: StreamingDataset, on_step: Any = None) -> list[int]:
    out: list[int] = []
    for step, batch in enumerate(ds):
        if on_step is not None:
            on_step(step)
        out.extend(int(i) for i in batch["id"])
    return out


def test_a_server_restart_mid_epoch_loses_and_repeats_nothing(
    own_server: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import s3fs

    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "index-cache"))
    fs = s3fs.S3FileSystem(**own_server["storage_options"])
    bucket = f"restart-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    _write_dataset(tmp_path / "local", fs, bucket)
    s3fs.S3FileSystem.clear_instance_cache()
    caplog.set_level(logging.WARNING, logger="shardwise")
    common: dict[str, Any] = dict(
        batch_size=500,
        seed=3,
        batch_format="numpy",
        num_threads=1,
        prefetch_bytes=4096,
        shuffle_bytes=4096,
    )
    expected = _ids(StreamingDataset(str(tmp_path / "local"), **common))
    # one try per request inside the client, so its own retries (a second or two) cannot ride out
    # the outage
    options = own_server["storage_options"] | {"config_kwargs": {"retries": {"max_attempts": 1}}}
    ds = StreamingDataset(f"s3://{bucket}/ds", storage_options=options, **common)
    threads: list[threading.Thread] = []
    seen = _RetrySeen()
    logging.getLogger("shardwise").addHandler(seen)

    def outage(step: int) -> None:
        if step == 40:  # a quarter of the epoch in, the server goes away until the loader retries
            threads.append(_restart_later(own_server, seen.event))

    try:
        got = _ids(ds, outage)
    finally:
        logging.getLogger("shardwise").removeHandler(seen)
    assert threads, "the outage never happened"
    deadline = time.monotonic() + 60
    while not own_server.get("started") and time.monotonic() < deadline:
        time.sleep(0.1)
    wait_ready(
        own_server["proc"],
        own_server["workdir"],
        own_server["ports"],
        own_server["key"],
        own_server["secret"],
    )
    assert len(got) == len(expected) == FILES * ROWS_PER_FILE
    assert got == expected  # same samples, same order, none lost or repeated
    assert seen.event.is_set(), "no read met the outage"
    assert any("retrying" in r.getMessage() for r in caplog.records)
    assert os.path.getsize(os.path.join(own_server["workdir"], "weed.log")) > 0


def test_a_unit_read_is_retried_whole_and_its_quarantine_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fault injection at the reader: two dropped connections (one wrapped by Arrow, as a
    reader reports it) before the read succeeds; a record quarantined by each failed try
    is counted once."""
    from shardwise import index_dataset
    from shardwise.loader.read.units import UnitReader
    from shardwise.storage import retry

    path = tmp_path / "a.jsonl"
    path.write_text('{"id": 1}\nnot json\n{"id": 2}\n')
    reader = UnitReader(
        index_dataset(str(path), progress=False, cache_dir=str(tmp_path / "c")), on_error="skip"
    )
    real, calls = reader._read, []
    monkeypatch.setattr(retry.time, "sleep", lambda s: None)

    def flaky(unit_id: int, quarantine: Any) -> pa.Table:
        calls.append(unit_id)
        table = real(unit_id, quarantine)  # quarantines the bad line, then the connection drops
        if len(calls) == 1:
            raise ConnectionResetError("reset by peer")
        if len(calls) == 2:
            try:
                raise ConnectionResetError("reset by peer")
            except ConnectionResetError as exc:
                raise OSError("IOError: read failed") from exc
        return table

    monkeypatch.setattr(reader, "_read", flaky)
    assert reader.read(0).column("id").to_pylist() == [1, 2]
    assert len(calls) == 3
    assert reader.quarantine.count == 1


def test_a_bad_file_is_not_retried(tmp_path: Path) -> None:
    from shardwise import FormatError
    from shardwise.storage import transient_in_chain

    assert not transient_in_chain(FormatError("bad", "f", "line 1"))
    assert not transient_in_chain(OSError("Parquet magic bytes not found"))
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError as inner:
            raise OSError("read failed") from inner
    except OSError as outer:
        assert transient_in_chain(outer)
