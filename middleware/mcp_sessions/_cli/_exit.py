"""How ``mcp-sessions`` commands end: the exit statuses and the usage error that maps to status 2."""

from __future__ import annotations

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A problem with the command line or its inputs: reported on stderr with exit status 2."""
