"""The gateway's flags, read once into the typed, frozen value ``serve`` takes (``_serving.Listening``): each mode's
drain, the status port and socket, the log level from its one definition."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from mcp_sessions._gateway._cli import _listening, add_arguments
from mcp_sessions._gateway._serving import LOG_LEVELS, Listening

UPSTREAM = ["--upstream", "http://127.0.0.1:3001/mcp"]


def parsed(flags: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="mcp-sessions gateway")
    add_arguments(parser)
    return parser.parse_args(flags)


@pytest.mark.parametrize(
    ("flags", "listening"),
    [
        (UPSTREAM, Listening("127.0.0.1", 8000, "info", 10.0)),
        (["--stdio", "cat"], Listening("127.0.0.1", 8000, "info", 4.0)),
        (
            [*UPSTREAM, "--host", "::1", "--port", "9000", "--log-level", "debug", "--shutdown-timeout", "2.5"],
            Listening("::1", 9000, "debug", 2.5),
        ),
        (
            ["--stdio", "cat", "--status-port", "9001", "--status-socket", "/run/gw/status.sock"],
            Listening("127.0.0.1", 8000, "info", 4.0, 9001, "/run/gw/status.sock"),
        ),
    ],
)
def test_the_flags_are_read_once_into_what_serve_takes(flags: list[str], listening: Listening) -> None:
    assert _listening(parsed(flags)) == listening


def test_what_serve_takes_is_frozen_and_its_log_levels_are_the_flag_s_choices() -> None:
    listening = _listening(parsed(UPSTREAM))
    with pytest.raises(dataclasses.FrozenInstanceError):
        listening.port = 1  # type: ignore[misc]
    with pytest.raises(SystemExit):
        parsed([*UPSTREAM, "--log-level", "verbose"])
    assert LOG_LEVELS == ("critical", "error", "warning", "info", "debug")
