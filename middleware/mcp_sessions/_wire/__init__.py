"""Pure: JSON-RPC frames and refusals, SSE, and what every wire shares.

Imports nothing that speaks ASGI, and nothing else of the package. ``ThrottledWarning`` is how a
refusal, and a store, say that their backend is down without a line for each request.
"""

from . import jsonrpc, protocol, sse
from .jsonrpc import Refusal, ThrottledWarning, batch_refused, store_unavailable
from .protocol import iso

__all__ = ["Refusal", "ThrottledWarning", "batch_refused", "iso", "jsonrpc", "protocol", "sse", "store_unavailable"]
