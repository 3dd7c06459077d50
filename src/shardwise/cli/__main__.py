"""``python -m shardwise.cli``."""

import sys

from shardwise.cli import main

sys.exit(main())
