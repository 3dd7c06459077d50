"""The ``shardwise`` command line.

Conventions: ``--help`` on every command; errors go to stderr as one line
(``error: ...``) without a traceback unless ``--debug``; exit codes are 0 for
success, 1 for a shardwise error (bad input, storage, config), 2 for bad usage,
and 130 when interrupted.

May import: every package of shardwise (it is the top layer), loaded inside each
command.
"""

from __future__ import annotations

from shardwise.cli import _cache, _commands, _inspect, _plan  # noqa: F401  (each registers its commands)
from shardwise.cli._app import EXIT_ERROR, EXIT_INTERRUPTED, cli, main

__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "cli", "main"]
