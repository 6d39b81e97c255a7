"""The pack's version, its own: it is released apart from mcp-sessions (``conformance/pyproject.toml``)."""

__version__ = "0.1.0"
