"""The gateway's log lines, one form for all of them, uvicorn's among them: each with its time (RFC 3339, to the
millisecond, with its offset), its level and its message; as text (``--log-format text``, the default) or one JSON
object a line (``json``), as journald, Loki and a cloud's log agent read them.

Where a line is about one server (``--config``: what its app does runs in a context that names it, :data:`SERVING`),
the text puts its name first (``memory: process 3f2a...: ...``) and the JSON has it as ``server``; the JSON also
names the conversation of the request that logged it and its principal's digest, as the session's spans and
:class:`~mcp_sessions.SessionLogFilter` name them (never a token). A line about the whole gateway (its start, a
drain, a reload, its stop) is logged outside any server's context, and names none.

Set up once (:func:`log_config`, for ``logging.config.dictConfig``): one handler on stderr, the formatter of the
form asked for, the gateway's and uvicorn's loggers propagating to it, uvicorn's access log without query strings
(``_front.QueryDropped``), and the libraries whose lines would name transport session ids or query strings
raised above them."""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Final

from .._session import PRINCIPAL_CLAIM, SessionLogFilter, current_session
from ._config import LogFormat
from ._front import QueryDropped

SERVING: Final[ContextVar[str | None]] = ContextVar("mcp_sessions.gateway.serving", default=None)
"""The name of the server whose app runs (its requests, its lifespan, and the tasks they start)."""


class _Context(SessionLogFilter):
    """The server, the conversation and the principal's digest of the code that logged ``record``, where there are
    (see the module); never drops a record."""

    def __init__(self) -> None:
        super().__init__(default="")  # none: the JSON leaves it out

    def filter(self, record: logging.LogRecord) -> bool:
        super().filter(record)
        record.server = SERVING.get()
        session = current_session.get()
        record.principal = None if session is None else session.claims.get(PRINCIPAL_CLAIM)
        return True


class TextFormatter(logging.Formatter):
    """``2026-11-29T13:05:01.123+00:00 INFO: memory: the message``: its time, its level, its server where it has
    one."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")

    def formatMessage(self, record: logging.LogRecord) -> str:
        server = getattr(record, "server", None)
        named = "" if server is None else f"{server}: "
        return f"{record.asctime} {record.levelname}: {named}{record.message}"


class JsonFormatter(TextFormatter):
    """A record as one JSON object: ``time``, ``level``, ``logger``, ``message``, and where it has them ``server``,
    ``conversation`` (its source beside it) and ``principal``; a traceback as ``exception``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if (server := getattr(record, "server", None)) is not None:
            line["server"] = server
        if conversation := getattr(record, "session_id", ""):
            line["conversation"] = conversation
            line["conversation_source"] = getattr(record, "session_source", "")
        if (principal := getattr(record, "principal", None)) is not None:
            line["principal"] = principal
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def log_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """What ``logging.config.dictConfig`` sets up, once, for the gateway's process (see the module)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"gateway": {"()": JsonFormatter if log_format == "json" else TextFormatter}},
        "filters": {
            "context": {"()": _Context},
            "query_dropped": {"()": QueryDropped},
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "gateway",
                "filters": ["context"],
            }
        },
        "loggers": {
            "uvicorn.access": {"filters": ["query_dropped"]},
            "httpx": {"level": "WARNING"},  # a line per forwarded request, its query string in it
            "mcp": {"level": "WARNING"},  # with --stdio: the SDK's lines name transport session ids
            # and so do its session manager's warnings and errors (an id sent with another user's credential, a
            # crash): a bearer value in no log line; the gateway logs each conversation's end itself
            "mcp.server.streamable_http_manager": {"level": "CRITICAL"},
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }
