"""Lazy import of optional packages with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from shardwise.errors import MissingExtraError

# import name -> extra that provides it
_EXTRAS: dict[str, str] = {
    "torch": "torch",
    "ray": "ray",
    "pyspark": "spark",
    "dask": "dask",
    "distributed": "dask",
    "s3fs": "s3",
    "joblib": "joblib",
    "gcsfs": "gcs",
    "scipy": "dedup",
    "aiohttp": "http",
    "matplotlib": "report",
    "nvidia": "dali",
    "tokenizers": "tokens",
    "transformers": "hf",
    "accelerate": "hf",
    "lightning": "lightning",
}


def require(module: str, feature: str = "") -> ModuleType:
    """Import ``module`` or raise :class:`MissingExtraError` naming the pip extra.

    Args:
        module: dotted module name, e.g. ``"torch.distributed"``.
        feature: what needs it, for the message.

    Returns:
        The imported module.
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and exc.name.split(".")[0] != top:
            raise
        raise MissingExtraError(top, _EXTRAS.get(top, top), feature) from exc
