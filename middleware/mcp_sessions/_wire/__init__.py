"""Pure: JSON-RPC frames, SSE, what every wire shares, and the refusal vocabulary.

Imports nothing that speaks ASGI, and nothing else of the package. ``ThrottledWarning`` is how a
refusal, and a store, say that their backend is down without a line for each request.
"""

from . import jsonrpc, protocol, sse
from ._refusal import Refusal, batch_refused, store_unavailable
from ._throttle import ThrottledWarning
from .protocol import iso

__all__ = ["Refusal", "ThrottledWarning", "batch_refused", "iso", "jsonrpc", "protocol", "sse", "store_unavailable"]
