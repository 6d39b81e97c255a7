"""The pictures of docs/observability.md: what Phoenix's and MLflow's web UIs show of a test's conversations.

``tests/e2e/test_viewers.py`` runs this, once its conversations have reached both viewers, when
``VIEWERS_SCREENSHOTS`` names a directory for the pictures (headless Chromium takes them, driven over the
DevTools protocol: the Debian package ``chromium``; MLflow's UI needs an environment of its own,
``VIEWERS_MLFLOW``):

    python scripts/viewer_pictures.py PHOENIX_URL MLFLOW_URL PROJECT EXPERIMENT_ID DIRECTORY
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

_SETTLE_SECONDS = 4.0
# Dismissed before a picture is taken: first-visit tips and side panels that cover the table.
_DISMISS = """
for (const button of document.querySelectorAll('button')) {
  const label = (button.innerText || button.getAttribute('aria-label') || '').trim();
  if (label === 'Got it' || /^close/i.test(button.getAttribute('aria-label') || '')) button.click();
}
"""


def screenshot(url: str, path: Path, *, actions: Sequence[str] = (), width: int = 1600, height: int = 900) -> list[Any]:
    """Save what headless Chromium shows of ``url`` (a web UI on 127.0.0.1) in ``path``, tips dismissed.

    Driven over the DevTools protocol (a websocket on a free port of 127.0.0.1), so that the page can be
    clicked before the picture: each of ``actions`` is a JavaScript expression run once the page has
    settled (a click that opens a row, a menu), in order; their values are returned.
    """
    from websockets.sync.client import connect

    port = free_port()
    argv = [
        "chromium",
        *("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"),
        *(f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1", f"--window-size={width},{height}"),
        "about:blank",
    ]
    profile = tempfile.TemporaryDirectory(prefix="chromium-")  # a fresh profile: every tip shows, and is dismissed
    argv.insert(-1, f"--user-data-dir={profile.name}")
    browser = subprocess.Popen(  # noqa: S603 (chromium, with arguments of our own)
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        pages = _wait_for_pages(port)
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as page:
            calls = iter(range(1, 1000))

            def call(method: str, **params: Any) -> dict[str, Any]:
                number = next(calls)
                page.send(json.dumps({"id": number, "method": method, "params": params}))
                while True:
                    message = json.loads(page.recv(timeout=30))
                    if message.get("id") == number:
                        result: dict[str, Any] = message.get("result", {})
                        return result

            call("Page.navigate", url=url)
            for _ in range(3):  # the apps render late and show their tips later still
                time.sleep(_SETTLE_SECONDS)
                call("Runtime.evaluate", expression=_DISMISS)
            values = []
            for action in actions:
                done = call("Runtime.evaluate", expression=action, returnByValue=True)
                values.append(done.get("result", {}).get("value"))
                time.sleep(_SETTLE_SECONDS / 2)
            call("Runtime.evaluate", expression=_DISMISS)
            time.sleep(1.0)
            shot = call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return values
    finally:
        os.killpg(browser.pid, signal.SIGKILL)
        browser.wait(timeout=10)
        profile.cleanup()


def _pages(port: int) -> list[dict[str, Any]]:
    try:
        listed = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
    except httpx.TransportError:
        return []
    return [target for target in listed if target.get("type") == "page"]


# MLflow's traces grouped by session, with the columns a conversation reads by (its menus open on pointer events).
_MLFLOW_OPEN_DISPLAY = """
document.querySelector('[data-component-id="mlflow.traces-v4.display.trigger"]')
  .dispatchEvent(new PointerEvent('pointerdown', {bubbles: true, button: 0, pointerType: 'mouse'}))
"""
_MLFLOW_OPEN_COLUMNS = """
[...document.querySelectorAll('[role=menuitem]')].find(item => item.innerText.trim().startsWith('Columns')).click()
"""
_MLFLOW_PICK_COLUMNS = """
for (const name of ['Trace name', 'User', 'Tokens', 'Tags', 'Duration']) {  // shown: the first two; hidden: the rest
  [...document.querySelectorAll('[role=menuitemcheckbox]')].find(item => item.innerText.trim() === name)?.click();
}
"""
_MLFLOW_EXPAND_FIRST_SESSION = """
document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', bubbles: true}));
document.body.dispatchEvent(new PointerEvent('pointerdown', {bubbles: true, button: 0, pointerType: 'mouse'}));
document.querySelector('[data-component-id="web-shared.traces-table.session-toggle"]').click();
"""


def picture_conversations(phoenix: str, mlflow: str, project: str, experiment_id: str, directory: Path) -> None:
    """The pictures of docs/observability.md: Phoenix's sessions and one session's turns, MLflow's traces by session."""
    response = httpx.get(f"{phoenix}/v1/projects/{project}/sessions", timeout=10)
    response.raise_for_status()
    sessions = sorted(response.json()["data"], key=lambda session: session["id"])
    project_id = sessions[0]["project_id"]
    screenshot(f"{phoenix}/projects/{project_id}/sessions", directory / "phoenix-sessions.png", width=1800, height=720)
    screenshot(
        f"{phoenix}/projects/{project_id}/sessions/{sessions[0]['id']}",
        directory / "phoenix-conversation-turns.png",
        width=1800,
        height=900,
    )
    screenshot(
        f"{mlflow}/#/experiments/{experiment_id}/traces?groupBy=session",
        directory / "mlflow-conversation.png",
        actions=[_MLFLOW_OPEN_DISPLAY, _MLFLOW_OPEN_COLUMNS, _MLFLOW_PICK_COLUMNS, _MLFLOW_EXPAND_FIRST_SESSION],
        width=1800,
        height=640,
    )


def _wait_for_pages(port: int, seconds: float = 20.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    while not (pages := _pages(port)):
        if time.monotonic() > deadline:
            raise AssertionError(f"Chromium's DevTools: no page after {seconds:.0f} s")
        time.sleep(0.25)
    return pages


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


if __name__ == "__main__":
    phoenix_url, mlflow_url, project_name, experiment, folder = sys.argv[1:]
    picture_conversations(phoenix_url, mlflow_url, project_name, experiment, Path(folder))
