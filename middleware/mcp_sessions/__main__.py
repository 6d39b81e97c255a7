"""``python -m mcp_sessions``: the ``mcp-sessions`` command."""

import sys

from ._cli import main

sys.exit(main())
