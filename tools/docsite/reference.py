"""The API reference: one page per public name of ``shardwise.__all__``, and one page per
public module of ``shardwise.integrations`` (``shardwise.integrations.dali``), which
``import shardwise`` does not load: the framework adapters a user imports by their module.

A page documents the object the name is bound to, found where its class or function is
defined (``StreamingDataset`` is a class built on first use over
``StreamingDatasetBase``: its page documents the base, which holds every method).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import pkgutil
import typing
from pathlib import Path
from typing import Any

PACKAGE = "shardwise"
SUBMODULE_PACKAGES = ("shardwise.integrations",)  # their public modules get a page each


def public_names() -> list[str]:
    module = importlib.import_module(PACKAGE)
    return list(module.__all__)


def documented_names() -> list[str]:
    """The public names that get a page of their own (``__version__`` is on the index)."""
    return [n for n in public_names() if not (n.startswith("__") and n.endswith("__"))]


def page_path(name: str) -> str:
    return f"reference/{name}.md"


def _statically_defined(cls: type) -> type:
    """The first class of ``cls``'s MRO written in its module's source (a class made at run
    time by ``type()`` has no source for the docs tools to read)."""
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(importlib.import_module(klass.__module__))
        except (OSError, TypeError):
            continue
        if f"class {klass.__name__}" in source:
            return klass
    return cls


def target(name: str) -> str:
    """The dotted path mkdocstrings documents for a public name."""
    obj: Any = getattr(importlib.import_module(PACKAGE), name)
    if inspect.isclass(obj):
        obj = _statically_defined(obj)
    return f"{obj.__module__}.{obj.__qualname__}"


def _made_at_run_time(name: str) -> bool:
    return "<locals>" in target(name)


def returned_types() -> list[type]:
    """Classes the public functions return that are not public names themselves (a
    ``Pipeline`` from ``read_jsonl``): they get a page too, the readers' pages link it."""
    module = importlib.import_module(PACKAGE)
    public = {getattr(module, n) for n in documented_names() if inspect.isclass(getattr(module, n))}
    found: list[type] = []
    for name in documented_names():
        obj = getattr(module, name)
        if not inspect.isfunction(obj):
            continue
        try:
            ret = typing.get_type_hints(obj).get("return")
        except (NameError, TypeError):
            continue
        fresh = ret not in public and ret not in found
        if inspect.isclass(ret) and ret.__module__.startswith(PACKAGE) and fresh:
            found.append(ret)
    return found


def extra_pages() -> dict[str, str]:
    """reference path -> page, for the returned types."""
    return {
        page_path(cls.__name__): (
            f"# {cls.__name__}\n\nReturned by shardwise's public functions "
            f"(defined in `{cls.__module__}`).\n\n"
            f"::: {cls.__module__}.{cls.__qualname__}\n"
            "    options:\n      show_root_heading: false\n      show_source: false\n"
        )
        for cls in returned_types()
    }


def _runtime_page(name: str) -> str:
    """A function made by a factory (``read_jsonl = _reader("jsonl")``) has no source of
    its own: its page shows the signature and docstring it has at run time."""
    fn = getattr(importlib.import_module(PACKAGE), name)
    ret = typing.get_type_hints(fn).get("return")
    sig = str(inspect.signature(fn))
    lines = [
        f"# {PACKAGE}.{name}\n",
        f"`from {PACKAGE} import {name}`\n",
        f"```text\n{name}{sig}\n```\n",
        inspect.getdoc(fn) or "",
    ]
    if inspect.isclass(ret):
        lines.append(f"\nReturns a [{ret.__name__}]({ret.__name__}.md).")
    return "\n".join(lines) + "\n"


def page(name: str) -> str:
    if _made_at_run_time(name):
        return _runtime_page(name)
    path = target(name)
    where = path.rsplit(".", 1)[0]
    return (
        f"# {PACKAGE}.{name}\n\n"
        f"`from {PACKAGE} import {name}` (defined in `{where}`).\n\n"
        f"::: {path}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_source: false\n"
    )


def public_modules() -> list[str]:
    """The public modules of :data:`SUBMODULE_PACKAGES` (no leading underscore), by name."""
    found = []
    for package in SUBMODULE_PACKAGES:
        path = importlib.import_module(package).__path__
        found += [f"{package}.{m.name}" for m in pkgutil.iter_modules(path)]
    return sorted(m for m in found if not m.rsplit(".", 1)[1].startswith("_"))


def module_names(module: str) -> list[str]:
    """A public module's public names: its ``__all__``, read from its source (importing
    ``shardwise.integrations.hf`` needs torch, which the docs extra does not install)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SystemExit(f"no module {module}")
    for node in ast.parse(Path(spec.origin).read_text()).body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            return [str(name) for name in ast.literal_eval(node.value)]
    raise SystemExit(f"{module} has no __all__")


def module_page(module: str) -> str:
    """A public module's page: its docstring, then every name of its ``__all__``."""
    members = ", ".join(module_names(module))
    return (
        f"# {module}\n\n"
        f"`from {module} import ...`: {', '.join(f'`{n}`' for n in module_names(module))}.\n\n"
        f"::: {module}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      show_source: false\n"
        "      show_if_no_docstring: true\n"
        f"      members: [{members}]\n"
    )
