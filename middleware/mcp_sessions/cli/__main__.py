"""``python -m mcp_sessions.cli``."""

import sys

from . import main

sys.exit(main())
