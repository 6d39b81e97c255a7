"""The conformance pack: ``mcp-sessions conformance URL`` checks a server's session wires from outside.

Black-box and client-side: it speaks each wire over HTTP as the drafts' clients
do, and reports every normative sentence of the wire as a check, in the official
MCP conformance suite's shapes (console lines, ``checks.json``, the
expected-failures baseline). Each wire's requirements, and the reason for each
one no client can check, are in ``traceability/<scenario>.yaml``.
"""

from ._cli import add_conformance_parser, run_conformance

__all__ = ["add_conformance_parser", "run_conformance"]
