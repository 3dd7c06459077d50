"""A stand-in ``torchvision`` for the MosaicML streaming venv of the token benchmark.

``import streaming`` imports ``streaming.vision``, which imports torchvision; no CPU
torchvision wheel matches the local torch 2.13.0 CPU wheel, and the token rows use no
vision code. :func:`install` writes this package into the venv's site-packages: the three
names ``streaming.vision`` imports, which fail if called.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["install"]

FILES = {
    "__init__.py": "from . import datasets, transforms  # stand-in: no vision code runs\n",
    "datasets.py": (
        "class VisionDataset:\n"
        "    def __init__(self, *a, **k):\n"
        "        raise NotImplementedError('torchvision stand-in')\n\n\n"
        "class CIFAR10(VisionDataset):\n    pass\n"
    ),
    "transforms/__init__.py": "from . import functional\n",
    "transforms/functional.py": (
        "def to_tensor(*a, **k):\n    raise NotImplementedError('torchvision stand-in')\n"
    ),
}


def install(site_packages: Path) -> None:
    """Write the stand-in package under ``site_packages`` (unless a torchvision is there)."""
    root = site_packages / "torchvision"
    if root.exists():
        return
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
