"""Peer virtualenvs: created under ``benchmarks/.venv-*`` the first time they are needed.

Peers run in their own environment so that their dependencies never meet shardwise's
(and the peer processes cannot import shardwise by accident).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Venv", "ensure_venv"]


@dataclass(frozen=True)
class Venv:
    """A peer environment.

    Attributes:
        path: the virtualenv's directory (``benchmarks/.venv-<name>``).
        packages: pip requirement strings installed into it.
        modules: distribution name -> a module that must import (checked before each run).
        install_timeout: seconds pip may take (None: no limit).
        no_deps: requirements installed afterwards with ``--no-deps`` (a peer whose declared
            dependencies are far more than it imports; ``packages`` lists what it needs).
    """

    path: Path
    packages: tuple[str, ...]
    modules: dict[str, str] = field(default_factory=dict)
    install_timeout: float | None = None
    no_deps: tuple[str, ...] = ()

    @property
    def python(self) -> Path:
        """The environment's interpreter."""
        return self.path / "bin" / "python"


def _check(venv: Venv) -> tuple[dict[str, str] | None, str]:
    check = (
        "import importlib, json; from importlib.metadata import version; "
        f"mods = {venv.modules!r}; [importlib.import_module(m) for m in mods.values()]; "
        "print(json.dumps({d: version(d) for d in mods}))"
    )
    r = subprocess.run([str(venv.python), "-c", check], capture_output=True, text=True)
    if r.returncode == 0:
        return json.loads(r.stdout.strip().splitlines()[-1]), ""
    return None, (r.stderr.strip().splitlines() or ["?"])[-1]


def _install(venv: Venv) -> str:
    log = venv.path / "install.log"
    try:
        with open(log, "w") as lf:
            r = subprocess.run(
                [str(venv.python), "-m", "pip", "install", "-q", *venv.packages],
                stdout=lf,
                stderr=subprocess.STDOUT,
                timeout=venv.install_timeout,
            )
    except subprocess.TimeoutExpired:
        return f"pip install did not finish in {venv.install_timeout:.0f} s"
    if r.returncode == 0 and venv.no_deps:
        with open(log, "a") as lf:
            r = subprocess.run(
                [str(venv.python), "-m", "pip", "install", "-q", "--no-deps", *venv.no_deps],
                stdout=lf,
                stderr=subprocess.STDOUT,
                timeout=venv.install_timeout,
            )
    if r.returncode != 0:
        lines = [ln for ln in log.read_text().splitlines() if ln.strip() and "is ignored" not in ln]
        return f"pip install failed: {(lines or ['?'])[-1][:200]}"
    return ""


def ensure_venv(venv: Venv) -> tuple[dict[str, str] | None, str]:
    """Create ``venv`` with its packages unless its modules already import there.

    Returns:
        ``(versions, "")`` with the installed version of each distribution, or
        ``(None, reason)`` when the environment could not be made to work.
    """
    if venv.python.exists():
        versions, err = _check(venv)
        if versions is not None:
            return versions, ""
        print(f"env: {venv.path.name} is incomplete ({err}); installing", flush=True)
    else:
        print(f"env: creating {venv.path.name} (a few minutes)", flush=True)
        python = shutil.which("python3") or sys.executable
        subprocess.run([python, "-m", "venv", str(venv.path)], check=True)
        (venv.path / ".gitignore").write_text("*\n")
    err = _install(venv)
    return (None, err) if err else _check(venv)
