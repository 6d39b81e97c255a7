"""Pure: JSON-RPC frames and refusals, SSE, what every wire shares, and what a stranger wrote made safe to print
(``text.printable``: a server's answer on a terminal, a child process's lines in a log).

Imports nothing that speaks ASGI, and nothing else of the package. ``ThrottledWarning`` is how a
refusal, and a store, say that their backend is down without a line for each request.
"""

from . import jsonrpc, protocol, sse, text
from .jsonrpc import Refusal, ThrottledWarning, batch_refused, store_unavailable
from .protocol import iso
from .text import printable

__all__ = [
    "Refusal",
    "ThrottledWarning",
    "batch_refused",
    "iso",
    "jsonrpc",
    "printable",
    "protocol",
    "sse",
    "store_unavailable",
    "text",
]
