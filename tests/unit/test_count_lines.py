"""scripts/count_lines.py reports the code lines of each part and module, their density, and the suite's lines: a
report, which fails nothing (issue 93)."""

import contextlib
import io
import runpy
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "count_lines.py"
MAIN = runpy.run_path(str(SCRIPT))["main"]
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
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines()[1:]}
    # The suite counts every line: the sample's 15 and b.py's 1.
    assert (done.returncode, rows) == (0, {"core": "1", "_cli": "6", "_gateway": "0", "total": "7", "tests": "16"})


def test_density_is_characters_per_code_line_and_the_share_over_100_columns(tmp_path: Path) -> None:
    """Indentation is not a character of the line; the share over 100 columns counts the whole line."""
    (tmp_path / "_cli").mkdir()
    (tmp_path / "_cli" / "a.py").write_text(f"if True:\n    y = 2\n{WIDE}\nz = 3\n", encoding="utf-8")
    row = count_lines("--package", str(tmp_path), "--tests", str(tmp_path)).stdout.splitlines()[2].split()
    # Four code lines: "if True:" (8), "y = 2" (5), the wide one (105), "z = 3" (5): 123 / 4.
    assert row == ["_cli", "4", "30.8", "25.0%"]


def test_modules_lists_each_module_s_figures_and_fails_nothing(tmp_path: Path) -> None:
    for name in ("pkg", "pack"):
        (tmp_path / name).mkdir()
    (tmp_path / "pkg" / "a.py").write_text(f"{WIDE}  # trails\n" + "z = 3\n" * 8, encoding="utf-8")  # 11.1% wide
    (tmp_path / "pack" / "c.py").write_text(f"{LONG}\n" * 2_000, encoding="utf-8")  # dense and long
    folders = ["--package", str(tmp_path / "pkg"), "--conformance", str(tmp_path / "pack")]
    done = count_lines(*folders, "--modules")
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.split("\nmodule ")[1].splitlines()[1:]}
    assert done.returncode == 0
    assert rows["pkg/a.py"] == ["9", "17.2", "11.1%"]  # (115 + 8 * 5) / 9
    assert rows["pack/c.py"] == ["2000", "70.0", "0.0%"]


def test_a_re_export_module_is_marked_so(tmp_path: Path) -> None:
    """Its lines are the names it exports, written twice: its density says nothing of its code."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    names = ["SessionLogFilter", "current_conversation"]
    reexports = "".join(f"from ._session import {name} as {name}\n" for name in names)
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text(f'"""Doc."""\n\n{reexports}', encoding="utf-8")
    (tmp_path / "pkg" / "code.py").write_text(f"{reexports}{LONG}\n", encoding="utf-8")
    folders = ["--package", str(tmp_path / "pkg"), "--conformance", str(tmp_path / "pkg" / "sub")]
    rows = {line.split()[0]: line for line in count_lines(*folders, "--modules").stdout.splitlines() if line}
    assert rows["sub/__init__.py"].endswith("re-exports")
    assert not rows["pkg/code.py"].endswith("re-exports")


def test_the_project_s_report_names_every_part_and_module() -> None:
    done = count_lines("--modules")
    rows = [line.split()[0] for line in done.stdout.splitlines() if line]
    assert done.returncode == 0
    assert {"core", "_cli", "_gateway", "total", "tests"} <= set(rows)
    assert "mcp_sessions/_gateway/stdio/_table.py" in rows
