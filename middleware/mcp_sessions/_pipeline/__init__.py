"""The pipeline's steps after planning: resolve, refuse, answer locally, forward, rewrite the response."""

from ._forward import Exchange, Forwarder
from ._handles import answer_refused_handles, check_handles
from ._local_methods import LocalAnswers
from ._operations import start_operations
from ._refusals import Refuser, reject
from ._request import body_of, headers_of
from ._resolve import Resolver
from ._response import DEFAULT_MAX_RESPONSE_SIZE
from ._transport import TransportSessions

__all__ = [
    "DEFAULT_MAX_RESPONSE_SIZE",
    "Exchange",
    "Forwarder",
    "LocalAnswers",
    "Refuser",
    "Resolver",
    "TransportSessions",
    "answer_refused_handles",
    "body_of",
    "check_handles",
    "headers_of",
    "reject",
    "start_operations",
]
