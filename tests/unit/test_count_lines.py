"""scripts/count_lines.py counts what issue 60's budgets count, and `--check` fails when a part is over."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "count_lines.py"
# Every part of the budget (the script holds the table; this test only names the parts), the suite's too.
CHECKED = ["core", "_cli", "_gateway", "tests"]

SAMPLE = '''"""A module docstring,
on two lines."""

# a comment alone
import os  # a comment after code

LIMIT = 3
"""An attribute's docstring: a string statement, not code."""


def f(x: int) -> int:
    """Its docstring."""
    return (
        x + 1
    )
'''


def count_lines(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False)


def test_code_lines_skip_string_statements_comments_and_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "b.py").write_text("x = 1\n", encoding="utf-8")
    done = count_lines("--package", str(tmp_path), "--tests", str(tmp_path))
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[1:]}
    # The suite counts every line: the sample's 15 and b.py's 1.
    assert (done.returncode, rows) == (0, {"core": "1", "_cli": "6", "_gateway": "0", "total": "7", "tests": "16"})


def test_check_fails_when_a_part_is_over(tmp_path: Path) -> None:
    budget = int(count_lines("--package", str(tmp_path)).stdout.splitlines()[2].split()[2])
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text("x = 1\n" * (budget + 1), encoding="utf-8")
    assert count_lines("--package", str(tmp_path), "--check", "_gateway").returncode == 0
    over = count_lines("--package", str(tmp_path), "--check", "_cli")
    assert over.returncode == 1
    assert "_cli" in over.stdout.splitlines()[2] and over.stdout.splitlines()[2].endswith("over")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("\n" * 30_201, encoding="utf-8")
    suite = count_lines("--package", str(tmp_path), "--tests", str(tmp_path / "tests"), "--check", "tests")
    assert suite.returncode == 1
    assert suite.stdout.splitlines()[-1].split()[:2] == ["tests", "30201"] and "over" in suite.stdout.splitlines()[-1]


@pytest.mark.parametrize("part", CHECKED)
def test_the_part_fits_its_budget(part: str) -> None:
    done = count_lines("--check", part)
    assert done.returncode == 0, done.stdout
