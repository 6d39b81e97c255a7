"""``python -m mcp_sessions_conformance``: the ``mcp-sessions-conformance`` command."""

import sys

from . import main

sys.exit(main())
