"""mkdocs hooks of the shardwise site (``hooks:`` in ``mkdocs.yml``).

- One API reference page per public name (``shardwise.__all__``) and per public module of
  ``shardwise.integrations``, generated at build time and added to the nav's "API
  reference" section, so a new public name or adapter gets its page and a renamed one
  loses its old page without anyone editing the nav.
- ``<!-- results: NAME -->`` markers become the figures of ``benchmarks/results/NAME.json``
  (``results.py``); ``<!-- layers -->`` becomes the layer table ``tests/test_layers.py``
  checks (``layers.py``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "src"))  # this checkout's shardwise, not another

import clihelp  # noqa: E402
import layers  # noqa: E402
import reference  # noqa: E402
import results  # noqa: E402

REFERENCE_SECTION = "API reference"
FOLDERS = {"Frameworks": "frameworks", "Guides": "guides"}  # nav section -> docs folder
DOCS = HERE.parents[1] / "docs"


def _title(page: Path) -> str:
    """A page's nav title: its first ``# `` heading, without code marks."""
    for line in page.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].replace("`", "").strip()
    return page.stem


def _folder_pages(listed: list[Any], folder: str) -> list[Any]:
    """The nav's entries for ``docs/<folder>/*.md``: those listed in mkdocs.yml first, in
    their order, then every other page of the folder by name, titled by its heading."""
    paths = {str(next(iter(e.values()))) if isinstance(e, dict) else str(e) for e in listed}
    extra = [
        {_title(page): f"{folder}/{page.name}"}
        for page in sorted((DOCS / folder).glob("*.md"))
        if f"{folder}/{page.name}" not in paths
    ]
    return [*listed, *extra]


def on_config(config: Any) -> Any:
    """Fill the nav's API reference section with one entry per public name, and the
    Frameworks and Guides sections with every page of ``docs/frameworks/`` and
    ``docs/guides/`` (a new page needs no nav edit)."""
    for entry in config["nav"] or []:
        for section, folder in FOLDERS.items():
            if isinstance(entry, dict) and section in entry:
                entry[section] = _folder_pages(entry[section], folder)
        if isinstance(entry, dict) and REFERENCE_SECTION in entry:
            pages = [p for p in entry[REFERENCE_SECTION] if not str(p).startswith("reference/_")]
            names = [{n: reference.page_path(n)} for n in reference.documented_names()]
            extra = [{Path(p).stem: p} for p in reference.extra_pages()]
            modules = [{m: reference.page_path(m)} for m in reference.public_modules()]
            entry[REFERENCE_SECTION] = pages + names + extra + modules
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the site's files."""
    from mkdocs.structure.files import File

    for name in reference.documented_names():
        files.append(
            File.generated(config, reference.page_path(name), content=reference.page(name))
        )
    for path, content in reference.extra_pages().items():
        files.append(File.generated(config, path, content=content))
    for module in reference.public_modules():
        page = reference.module_page(module)
        files.append(File.generated(config, reference.page_path(module), content=page))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Expand the results and layer markers."""
    depth = page.file.src_uri.count("/")
    markdown = results.expand(markdown, summary_prefix="../" * depth)
    markdown = markdown.replace("<!-- layers -->", layers.markdown_table())
    if "<!-- cli-help -->" in markdown:
        markdown = markdown.replace("<!-- cli-help -->", clihelp.markdown())
    return markdown


SPHINX_ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):(?=<code>)")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """Docstrings name objects Sphinx-style (``:class:`X```); the role is dropped, the
    name stays code."""
    return SPHINX_ROLE.sub("", html)
