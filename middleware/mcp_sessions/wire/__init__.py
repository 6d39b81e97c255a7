"""Pure: JSON-RPC frames, SSE, what every wire shares, and the refusal vocabulary.

Imports nothing that speaks ASGI, and nothing else of the package.
"""

from . import jsonrpc, protocol, sse
from ._dates import iso
from ._refusal import Refusal, batch_refused, store_unavailable

__all__ = ["Refusal", "batch_refused", "iso", "jsonrpc", "protocol", "sse", "store_unavailable"]
