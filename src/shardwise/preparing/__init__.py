"""Download and prepare datasets: :func:`prepare`, its steps and the backends they run on.

May import: ``shardwise.errors``, ``shardwise._optional``, ``shardwise.storage``,
``shardwise.formats``, ``shardwise.parallel``, ``shardwise.index`` and
``shardwise.pipeline`` (see ``docs/layers.toml``).
"""

from shardwise.preparing.api import PrepareResult, prepare
from shardwise.preparing.steps import ALIASES, STEPS

__all__ = ["ALIASES", "STEPS", "PrepareResult", "prepare"]
