"""The pipeline's steps after the plan (``_plan.py``), in request order: resolve, answer, forward, rewrite the
response."""

from ._answer import Answers
from ._forward import Exchange, Forwarder
from ._resolve import Resolver, check_handles, start_operations
from ._response import DEFAULT_MAX_RESPONSE_SIZE

__all__ = [
    "DEFAULT_MAX_RESPONSE_SIZE",
    "Answers",
    "Exchange",
    "Forwarder",
    "Resolver",
    "check_handles",
    "start_operations",
]
