"""The docs site builds in strict mode and covers the public API; the README stays short.

The site is built once with ``mkdocs build --strict`` (a broken link, a missing page or a
reference mkdocstrings cannot resolve fails the build). Every public name of
``shardwise.__all__`` has a docstring and its own reference page in the built site, every
name of a public ``shardwise.integrations`` module's ``__all__`` a docstring and a place on
its module's page, and the README's benchmark table is the one the results files give. The
README links every framework page, and getting started goes local, S3, then a cluster.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import shardwise

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "docsite"))

import reference  # noqa: E402
import results  # noqa: E402

MAX_README_LINES = 300


def _public_objects() -> list[str]:
    return [n for n in shardwise.__all__ if not (n.startswith("__") and n.endswith("__"))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    return out


def test_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def _own_doc(obj: object) -> str:
    """A class's or function's own docstring (``inspect.getdoc`` would inherit a base's)."""
    return (getattr(obj, "__doc__", None) or "").strip()


def test_every_public_name_has_a_docstring() -> None:
    missing = [n for n in _public_objects() if not _own_doc(getattr(shardwise, n))]
    assert not missing, f"public names without a docstring: {missing}"


def test_every_public_submodule_name_has_a_docstring_and_a_reference_entry(site: Path) -> None:
    modules = reference.public_modules()
    assert {"shardwise.integrations.dali", "shardwise.integrations.hf"} <= set(modules)
    for module in modules:
        page = (site / "reference" / f"{module}.html").read_text()
        for name in reference.module_names(module):
            obj = getattr(importlib.import_module(module), name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                assert _own_doc(obj), f"{module}.{name} has no docstring"
            assert f'id="{module}.{name}"' in page, f"{module}.{name}: not on its page"


def test_every_public_name_has_a_reference_page(site: Path) -> None:
    assert reference.documented_names() == _public_objects()
    for name in _public_objects():
        page = site / "reference" / f"{name}.html"
        assert page.exists(), f"no reference page for shardwise.{name}"
        first = inspect.getdoc(getattr(shardwise, name)).split("\n")[0].split("``")[0][:30]
        assert first.split()[0] in page.read_text(), (name, first)


def test_version_is_on_the_reference_index(site: Path) -> None:
    assert "__version__" in (site / "reference" / "index.html").read_text()


def test_benchmark_pages_show_the_results_files(site: Path) -> None:
    page = (site / "benchmarks" / "pipeline.html").read_text()
    table = results.load("pipeline")["table"]
    assert table.splitlines()[2].split("|")[1].strip() in page  # the first system's name
    assert "<!-- results:" not in (site / "benchmarks" / "loader.html").read_text()


def test_no_marker_is_left_unexpanded(site: Path) -> None:
    for page in site.rglob("*.html"):
        text = page.read_text()
        for marker in ("<!-- results:", "<!-- value:", "<!-- layers -->", "<!-- cli-help -->"):
            assert marker not in text, (page, marker)


def test_inline_figures_come_from_the_results_files(site: Path) -> None:
    data = results.load("dedup")["shapes"]["medium"]["results"]
    recall = next(r["recall"] for r in data if r["name"] == "shardwise_noverify")
    assert f"{recall:.3f}" in (site / "guides" / "dedup.html").read_text()


def test_readme_benchmark_table_comes_from_the_results_files() -> None:
    text = (ROOT / "README.md").read_text()
    assert results.readme_with_summary(text) == text, (
        "the README's benchmark table differs from benchmarks/results/*.json: "
        "run python tools/docsite/results.py --readme"
    )


def test_design_page_shows_the_checked_layer_table(site: Path) -> None:
    import layers

    page = (site / "design.html").read_text()
    for package in layers.allowed():
        assert f"<code>{package}</code>" in page, package


def test_readme_links_every_framework_page() -> None:
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs" / "frameworks").glob("*.md")):
        assert f"](docs/frameworks/{page.name})" in readme, f"README.md: no link to {page.name}"


def _nav_section(nav: list[object], title: str) -> list[str]:
    section = next(e[title] for e in nav if isinstance(e, dict) and title in e)
    return [str(next(iter(e.values()))) if isinstance(e, dict) else str(e) for e in section]


def test_getting_started_goes_local_then_s3_then_a_cluster() -> None:
    config = yaml.safe_load(
        re.sub(r"!!python/\S+", "", (ROOT / "mkdocs.yml").read_text())  # no tags to load
    )
    expected = ["getting-started/local.md", "getting-started/s3.md", "getting-started/cluster.md"]
    assert _nav_section(config["nav"], "Getting started") == expected
    readme = (ROOT / "README.md").read_text()
    links = [readme.find(f"](docs/{page})") for page in expected]
    assert -1 not in links and links == sorted(links), links


def test_every_benchmark_page_shows_the_date_of_its_run(site: Path) -> None:
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    assert len(pages) > 1
    for page in pages:
        html = (site / "benchmarks" / f"{page.stem}.html").read_text()
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", html), f"benchmarks/{page.name}: no run date"


def test_reference_pages_are_made_without_torch() -> None:
    """``make docs`` installs the docs extra only: making the reference pages must not
    import torch (``shardwise.integrations.hf`` does at import)."""
    code = (
        "import sys; sys.modules['torch'] = None; sys.path.insert(0, 'tools/docsite');"
        "import reference;"
        "pages = [reference.module_page(m) for m in reference.public_modules()];"
        "pages += [reference.page(n) for n in reference.documented_names()];"
        "pages += list(reference.extra_pages().values());"
        "print(len(pages), 'ShardwiseTrainer' in ''.join(pages))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[1] == "True"
