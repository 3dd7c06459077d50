"""The code blocks of the README and of every page of the docs site run as written.

Every ```python block is saved as a script and run with the venv's Python (as a user
pasting it into a file would), every ```yaml block is run with ``shardwise run``, and the
install lines name extras that exist. A block right after the marker
``<!-- needs: cluster -->`` needs a real cluster's addresses: it is not run, only parsed.
The paths the blocks use (``raw/*.jsonl.zst``, ``s3://bucket/...``) are made real: local
files in the working directory and a SeaweedFS S3 server on 127.0.0.1 whose endpoint and
credentials come from the usual AWS variables. The pages of ``docs/frameworks/`` are
training scripts for two processes: ``tests/integrations/test_framework_docs.py`` runs
each of them as written, on two processes, twice (a run and its resume).
"""

from __future__ import annotations

import ast
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from _daliwds import make_shards

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FRAMEWORKS = ROOT / "docs" / "frameworks"  # run on two processes by their own test
PAGES = [README, *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.parent != FRAMEWORKS)]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
NEEDS_CLUSTER = "<!-- needs: cluster -->"
MAX_CLUSTER_BLOCKS = 4  # a few, not a way around the runner

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def _all_blocks() -> list[tuple[str, str, str, bool]]:
    """(page, language, body, needs a cluster) for every fenced block of every page."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            marked = text[: match.start()].rstrip().endswith(NEEDS_CLUSTER)
            out.append((str(page.relative_to(ROOT)), match.group(1), match.group(2), marked))
    return out


def blocks(lang: str) -> list[str]:
    return [body for _, kind, body, marked in _all_blocks() if kind == lang and not marked]


def _ids(lang: str) -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for page, kind, _, marked in _all_blocks():
        if kind == lang and not marked:
            seen[page] = seen.get(page, 0) + 1
            ids.append(f"{page}#{seen[page]}")
    return ids


def _words(rng: random.Random, n: int) -> str:
    return " ".join(
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 7)))
        for _ in range(n)
    )


def _raw_jsonl(root: Path) -> None:
    """Enough documents that the README's `shardwise plan clean/ -w 64 -k 8 -b 32` has a
    batch for every rank and worker (more than 16,384 rows survive the pipeline)."""
    rng = random.Random(0)
    (root / "raw").mkdir()
    for f in range(3):
        lines = []
        for i in range(7000):
            text = _words(rng, rng.randint(3, 40)) + (
                " see https://example.org/x" if i % 7 == 0 else ""
            )
            lines.append(json.dumps({"id": f * 1000 + i, "text": text}))
        lines[5] = lines[4]  # an exact duplicate
        lines[9] = (
            '{"id": 9, "text": "broken'  # a malformed line, quarantined under on_error="skip"
        )
        data = ("\n".join(lines) + "\n").encode()
        with pa.CompressedOutputStream(str(root / "raw" / f"part-{f}.jsonl.zst"), "zstd") as out:
            out.write(data)


def _tokenizer(root: Path) -> None:
    """``tok/tokenizer.json``: a small byte-level BPE trained on words like the raw text's."""
    from _tokenizer import train_bpe

    root.mkdir()
    rng = random.Random(2)
    train_bpe(root / "tokenizer.json", vocab_size=500, texts=[_words(rng, 30) for _ in range(2000)])


def _numbers(root: Path) -> None:
    """Parquet files of uneven row groups: ``id`` and a float ``x`` per sample."""
    root.mkdir()
    start = 0
    for f, (rows, group) in enumerate([(500, 70), (333, 100), (701, 64)]):
        ids = pa.array(range(start, start + rows), pa.int64())
        x = pa.array([i / 7 for i in range(start, start + rows)], pa.float32())
        pq.write_table(pa.table({"id": ids, "x": x}), root / f"part-{f}.parquet", group)
        start += rows


def _token_table(rng: random.Random, rows: int, start: int) -> pa.Table:
    ids = [[rng.randrange(50_000) for _ in range(rng.randint(3, 60))] for _ in range(rows)]
    return pa.table(
        {
            "id": pa.array(range(start, start + rows), pa.int64()),
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "label": pa.array([rng.randrange(10) for _ in range(rows)], pa.int64()),
        }
    )


def _upload(server: dict[str, Any], local: Path) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(**server["storage_options"])
    if not fs.exists("bucket"):
        fs.mkdir("bucket")
    for path in sorted(local.rglob("*")):
        if path.is_file():
            fs.put_file(str(path), f"bucket/{path.relative_to(local)}")


@pytest.fixture(scope="module")
def workspace(
    tmp_path_factory: pytest.TempPathFactory, s3_server: dict[str, Any]
) -> Iterator[Path]:
    """Local ``raw/`` (JSONL), ``data/`` (Parquet: ``id``, ``x``), ``shards/`` (WebDataset
    tar shards: ``jpg``, ``cls``) and ``tok/tokenizer.json``, plus the bucket ``bucket``
    holding ``clean/``, ``corpus/``, ``raw/`` and ``shards/``."""
    root = tmp_path_factory.mktemp("readme")
    _raw_jsonl(root)
    _numbers(root / "data")
    make_shards(root / "shards", [40, 13, 57, 26])
    _tokenizer(root / "tok")
    rng = random.Random(1)
    staged = root / "_s3"
    for name in ("clean", "corpus"):
        (staged / name).mkdir(parents=True)
        for f in range(4):
            table = _token_table(rng, 700 + 150 * f, f * 10_000)
            pq.write_table(table, staged / name / f"part-{f}.parquet", row_group_size=200)
    shutil.copytree(root / "raw", staged / "raw")
    make_shards(staged / "shards", [40, 13, 57, 26])  # WebDataset: jpg + cls
    _upload(s3_server, staged)
    shutil.rmtree(staged)
    yield root


def _env(server: dict[str, Any], tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "AWS_ACCESS_KEY_ID": server["key"],
            "AWS_SECRET_ACCESS_KEY": server["secret"],
            "AWS_ENDPOINT_URL": server["endpoint_url"],
            "AWS_DEFAULT_REGION": "us-east-1",
            "RAY_AUTH_MODE": "disabled",
            "RAY_TMPDIR": str(tmp),
            "PYTHONUNBUFFERED": "1",
            # as `torchrun --nproc_per_node=1` would start a page's training script
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(_free_port()),
        }
    )
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-5000:]
    return proc


def _fresh(workspace: Path, tmp_path: Path) -> Path:
    cwd = tmp_path / "cwd"
    shutil.copytree(workspace, cwd)
    return cwd


@pytest.mark.parametrize("index", range(len(blocks("python"))), ids=_ids("python"))
def test_python_block_runs_as_a_script(
    index: int, workspace: Path, tmp_path: Path, s3_server: dict[str, Any]
) -> None:
    cwd = _fresh(workspace, tmp_path)
    script = cwd / "snippet.py"
    script.write_text(blocks("python")[index])
    ray_tmp = Path("/tmp") / f"rr{os.getpid()}{index}"
    try:
        _run([sys.executable, str(script)], cwd, _env(s3_server, ray_tmp))
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    for out in ("clean", "loader_state.pt"):  # what a block writes is complete
        if (cwd / out).is_dir():
            assert (cwd / out / "_manifest.json").exists()


@pytest.mark.parametrize("index", range(len(blocks("yaml"))), ids=_ids("yaml"))
def test_yaml_block_runs_with_shardwise_run(
    index: int, workspace: Path, tmp_path: Path, s3_server: dict[str, Any]
) -> None:
    cwd = _fresh(workspace, tmp_path)
    config = blocks("yaml")[index]
    (cwd / "config.yaml").write_text(config)
    out = yaml.safe_load(config)["output"]["path"].rstrip("/")
    cli = Path(sys.executable).with_name("shardwise")
    proc = _run([str(cli), "run", "config.yaml"], cwd, _env(s3_server, tmp_path))
    manifest = json.loads((cwd / out / "_manifest.json").read_text())
    assert manifest["rows_out"] > 0 and manifest["quarantined"] >= 3
    assert "quarantined" in proc.stdout
    assert (cwd / out / "_report.html").stat().st_size > 0
    # the pages' shardwise command lines that work on such an output (report, plan) run too
    commands = [
        line.split("#")[0].split()
        for body in blocks("bash")
        for line in body.splitlines()
        if line.startswith("shardwise ") and f" {out}/" in line
    ]
    assert out != "clean" or len(commands) >= 3, commands
    for command in commands:
        ran = _run([str(cli), *command[1:]], cwd, _env(s3_server, tmp_path))
        assert ran.stdout.strip(), command
        if "--html" in command:
            assert (cwd / command[command.index("--html") + 1]).stat().st_size > 0


def test_install_lines_name_extras_that_exist() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = set()
    for body in blocks("bash"):
        for line in body.splitlines():
            if line.startswith("pip install"):
                for group in re.findall(r"\[([\w,]+)\]", line.split("#")[0]):
                    named.update(group.split(","))
    assert named and named <= extras, named - extras
    make_targets = re.findall(r"^make (\w+)", "\n".join(blocks("bash")), re.M)
    makefile = (ROOT / "Makefile").read_text()
    assert make_targets and all(re.search(rf"^{t}:", makefile, re.M) for t in make_targets)


def test_cluster_blocks_are_few_and_parse() -> None:
    marked = [(page, kind, body) for page, kind, body, needs in _all_blocks() if needs]
    assert 0 < len(marked) <= MAX_CLUSTER_BLOCKS, [page for page, _, _ in marked]
    for page, kind, body in marked:
        assert kind == "python", (page, kind)
        ast.parse(body, filename=page)


def test_every_block_is_run_or_marked() -> None:
    """A block in a language the runner does not know would silently go unchecked."""
    known = {"python", "yaml", "bash", "text"}
    assert {kind for _, kind, _, _ in _all_blocks()} <= known
