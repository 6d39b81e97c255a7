"""scripts/count_lines.py counts what issue 52's budget counts: code, not docstrings, comments or blank lines."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = '''"""A module docstring,
on two lines."""

# a comment alone
import os  # a comment after code


def f(x: int) -> int:
    """Its docstring."""
    return (
        x + 1
    )
'''


def test_code_lines_skip_docstrings_comments_and_blank_lines(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "part").mkdir(parents=True)
    (package / "part" / "a.py").write_text(SAMPLE, encoding="utf-8")
    (package / "b.py").write_text("x = 1\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "count_lines.py"), str(package)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:]}
    assert rows == {"part": ["5", "1"], "b.py": ["1", "1"], "total": ["6", "2"]}
