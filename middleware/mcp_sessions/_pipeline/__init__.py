"""The pipeline's steps after the plan (``_plan.py``), in request order: resolve, probe (before an answer of
the middleware's own), answer, forward, rewrite the response."""

from ._answer import Answers
from ._forward import REQUEST_ID, Exchange, Forwarder
from ._probe import DEFAULT_PROBE_TIMEOUT, Rejection, error_answer, store_refused, unavailable
from ._resolve import Resolver, check_handles, record_user, start_operations
from ._response import DEFAULT_MAX_RESPONSE_SIZE

__all__ = [
    "DEFAULT_MAX_RESPONSE_SIZE",
    "DEFAULT_PROBE_TIMEOUT",
    "REQUEST_ID",
    "Answers",
    "Exchange",
    "Forwarder",
    "Rejection",
    "Resolver",
    "check_handles",
    "error_answer",
    "record_user",
    "start_operations",
    "store_refused",
    "unavailable",
]
