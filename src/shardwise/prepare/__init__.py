"""Download and prepare datasets: :func:`prepare`, its steps and the backends they run on."""

from shardwise.prepare.api import PrepareResult, prepare
from shardwise.prepare.steps import ALIASES, STEPS

__all__ = ["ALIASES", "STEPS", "PrepareResult", "prepare"]
