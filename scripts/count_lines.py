"""Code lines of the package, per part of issue 60's budget, and the total; and the lines of the test suite.

A code line is a line that is not blank, not only a comment and not part of a string statement (a
docstring, or a string standing alone as a statement, such as an attribute's docstring): the rule of
the review's counter. The suite's budget counts every line of tests/ (``wc -l``), its harness included.
`make lint` prints the table; `--check` exits 1 when a part is over its budget.

    python scripts/count_lines.py [--package DIR] [--tests DIR] [--check [PART ...]]
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "middleware" / "mcp_sessions"
TESTS = ROOT / "tests"
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def core(path: Path) -> bool:
    """The middleware: everything but the command line and the gateway."""
    return path.parts[0] not in {"_cli", "_gateway"}


def cli(path: Path) -> bool:
    return path.parts[0] == "_cli"


def gateway(path: Path) -> bool:
    return path.parts[0] == "_gateway"


# The budget, in one place: each part's test of a path (relative to the package) and its most code lines. Issue 66
# added what a gateway runs (its status, each user's own, the process metrics): _cli +120, _gateway +290, tests +380.
BUDGETS: dict[str, tuple[Callable[[Path], bool], int]] = {
    "core": (core, 7_900),
    "_cli": (cli, 620),
    "_gateway": (gateway, 2_690),
}
# The suite's: every line of its Python files.
TESTS_BUDGET = 30_200


def code_lines(source: str) -> int:
    """The number of lines of ``source`` that hold code (a string statement or a comment alone is not code)."""
    strings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            strings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - strings)


def count(package: Path = PACKAGE) -> dict[str, int]:
    """Code lines per part of the budget."""
    lines = dict.fromkeys(BUDGETS, 0)
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        for part, (holds, _) in BUDGETS.items():
            if holds(relative):
                lines[part] += code_lines(path.read_text(encoding="utf-8"))
    return lines


def suite_lines(tests: Path = TESTS) -> int:
    """Every line of the suite's Python files, as ``wc -l`` counts them."""
    return sum(path.read_bytes().count(b"\n") for path in tests.rglob("*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", type=Path, default=PACKAGE)
    parser.add_argument("--tests", type=Path, default=TESTS)
    parser.add_argument("--check", nargs="*", choices=[*BUDGETS, "tests"], metavar="PART", help="exit 1 if over")
    args = parser.parse_args(argv)
    lines = count(args.package)
    budgets = {part: budget for part, (_, budget) in BUDGETS.items()}

    def row(part: str, note: str = "") -> None:
        over = "  over" if lines[part] > budgets[part] else ""
        print(f"{part:<10} {lines[part]:>10} {budgets[part]:>7}{over}{note}")

    print(f"{'part':<10} {'code lines':>10} {'budget':>7}")
    for part in BUDGETS:
        row(part)
    print(f"{'total':<10} {sum(lines.values()):>10}")
    lines["tests"], budgets["tests"] = suite_lines(args.tests), TESTS_BUDGET
    row("tests", "  (every line of tests/)")
    checked = (args.check or list(budgets)) if args.check is not None else []
    return 1 if any(lines[part] > budgets[part] for part in checked) else 0


if __name__ == "__main__":
    sys.exit(main())
