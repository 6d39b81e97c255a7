"""scripts/count_lines.py counts what the budgets count, and `--check` fails when a part is over its budget or
denser than the guard (issue 68), or a module is over the ceiling every module is held to (issue 78)."""

import contextlib
import io
import runpy
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "count_lines.py"
MAIN = runpy.run_path(str(SCRIPT))["main"]
# Every part of the budget (the script holds the table; this test only names the parts), the suite's too, and
# every module of the package and the conformance pack against the ceiling (the failure names each one over).
CHECKED = ["core", "_cli", "_gateway", "tests", "modules"]
WIDE = "x = " + "1 + " * 25 + "1"  # 105 columns
LONG = "v = '" + "y" * 64 + "'"  # 70 characters

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
    """The script's exit status and output, its ``main`` run in process (``make lint`` runs the command)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        status = MAIN(list(args))
    return subprocess.CompletedProcess(args, status, stdout.getvalue(), stderr.getvalue())


def test_code_lines_skip_string_statements_comments_and_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text(SAMPLE, encoding="utf-8")
    (tmp_path / "b.py").write_text("x = 1\n", encoding="utf-8")
    done = count_lines("--package", str(tmp_path), "--tests", str(tmp_path))
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[1:] if not line.startswith("guard")}
    # The suite counts every line: the sample's 15 and b.py's 1.
    assert (done.returncode, rows) == (0, {"core": "1", "_cli": "6", "_gateway": "0", "total": "7", "tests": "16"})


def test_density_is_characters_per_code_line_and_the_share_over_100_columns(tmp_path: Path) -> None:
    """Indentation is not a character of the line; the share over 100 columns counts the whole line."""
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text(f"if True:\n    y = 2\n{WIDE}\nz = 3\n", encoding="utf-8")
    row = count_lines("--package", str(tmp_path), "--tests", str(tmp_path)).stdout.splitlines()[2].split()
    # Four code lines: "if True:" (8), "y = 2" (5), the wide one (105), "z = 3" (5): 123 / 4.
    assert row[:5] == ["_cli", "4", "1500", "30.8", "25.0%"]


@pytest.mark.parametrize(
    "lines", [[WIDE] + ["z = 3"] * 14, [LONG]], ids=["one line in fifteen over 100 columns", "70 characters a line"]
)
def test_check_fails_when_a_part_is_denser_than_the_guard(tmp_path: Path, lines: list[str]) -> None:
    """Each figure alone fails the check, within the line budget."""
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = count_lines("--package", str(tmp_path), "--tests", str(tmp_path), "--check", "_cli")
    assert done.returncode == 1
    assert done.stdout.splitlines()[2].endswith("denser than the guard")


def test_check_fails_when_a_part_is_over(tmp_path: Path) -> None:
    budget = int(count_lines("--package", str(tmp_path)).stdout.splitlines()[2].split()[2])
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text("x = 1\n" * (budget + 1), encoding="utf-8")
    assert count_lines("--package", str(tmp_path), "--check", "_gateway").returncode == 0
    over = count_lines("--package", str(tmp_path), "--check", "_cli")
    assert over.returncode == 1
    assert "_cli" in over.stdout.splitlines()[2] and over.stdout.splitlines()[2].endswith("over")
    # The suite is tests/ and conformance/tests/ together: 20,000 lines in each is over its budget.
    for directory in ("tests", "pack"):
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "test_a.py").write_text("\n" * 20_000, encoding="utf-8")
    both = [str(tmp_path / "tests"), str(tmp_path / "pack")]
    suite = count_lines("--package", str(tmp_path), "--tests", *both, "--check", "tests")
    assert suite.returncode == 1
    assert suite.stdout.splitlines()[-1].split()[:2] == ["tests", "40000"] and suite.stdout.splitlines()[-1].endswith(
        "over"
    )


@pytest.mark.parametrize("part", CHECKED)
def test_the_part_fits_its_budget_and_the_density_guard(part: str) -> None:
    done = count_lines("--check", part)
    assert done.returncode == 0, done.stdout


def test_modules_lists_each_module_s_density_and_those_over_the_ceiling(tmp_path: Path) -> None:
    for name in ("pkg", "pack"):
        (tmp_path / name).mkdir()
    (tmp_path / "pkg" / "a.py").write_text(f"{WIDE}  # trails\n" + "z = 3\n" * 8, encoding="utf-8")  # 11.1% wide
    (tmp_path / "pkg" / "b.py").write_text(f"{WIDE}\n" + "z = 3\n" * 9, encoding="utf-8")  # 10.0%: at the ceiling
    (tmp_path / "pack" / "c.py").write_text(f"{LONG}\n", encoding="utf-8")  # 70 characters a line
    folders = ["--package", str(tmp_path / "pkg"), "--conformance", str(tmp_path / "pack")]
    done = count_lines(*folders, "--check", "modules")
    listed = done.stdout.split(" modules over ")[1]
    assert done.returncode == 1
    assert "pkg/a.py" in listed and "pack/c.py" in listed and "pkg/b.py" not in listed


def test_a_re_export_module_is_judged_by_its_wide_lines_alone(tmp_path: Path) -> None:
    """Its lines are the names it exports, written twice: 57 characters a line, and no statement to split."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    names = ["SessionLogFilter", "current_conversation"]
    reexports = "".join(f"from ._session import {name} as {name}\n" for name in names)
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text(f'"""Doc."""\n\n{reexports}', encoding="utf-8")
    (tmp_path / "pkg" / "code.py").write_text(f"{reexports}{LONG}\n", encoding="utf-8")
    folders = ["--package", str(tmp_path / "pkg"), "--conformance", str(tmp_path / "pkg" / "sub")]
    listed = count_lines(*folders, "--check", "modules").stdout.split(" modules over ")[1]
    assert "pkg/code.py" in listed and "pkg/sub/__init__.py" not in listed
