"""The server files the docs give readers to copy type-check as written (mypy --strict)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _docs import one_with, python_snippets

SERVER_FILES = {
    "readme_server.py": ("README.md", "# server.py"),
    "deployment_server.py": ("docs/deployment.md", 'MCPServer("counter")'),
    "configuration_guard.py": ("docs/configuration.md", "MCPSessionMiddleware.from_env(dispatch)"),
}


def test_the_server_files_in_the_docs_type_check(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    for name, (page, text) in SERVER_FILES.items():
        (tmp_path / name).write_text(one_with(python_snippets(page), text), encoding="utf-8")
    # mypy's incremental cache, kept between runs in pytest's: it re-checks what changed (the pages' files, the
    # package), and reads the SDK's and Starlette's types from the cache instead of analysing them again.
    cache = pytestconfig.cache.mkdir("docs-mypy") if pytestconfig.cache is not None else tmp_path / ".mypy_cache"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *sorted(SERVER_FILES)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
