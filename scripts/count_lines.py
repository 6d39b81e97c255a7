"""Code lines of the package, per part, and their density; each module's; and the lines of the test suite.

A code line is a line that is not blank, not only a comment and not part of a string statement (a
docstring, or a string standing alone as a statement, such as an attribute's docstring): the rule of
the review's counter. A part's density is its characters per code line (indentation left out) and its
share of code lines over 100 columns (Starlette's: 34.7 and 2.2%). The suite counts every line of the
Python files pytest runs (tests/ and conformance/tests/, ``wc -l``), its harness included. `make lint`
prints the table, and CI shows it: the figures are a report, never a gate (issue 93): code is not squeezed
or split to fit a number. `--modules` adds each module's figures, the conformance pack's too.
A comment after code counts with its line, in both figures.

    python scripts/count_lines.py [--package DIR] [--conformance DIR] [--tests DIR ...] [--modules]
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "middleware" / "mcp_sessions"
TESTS = [ROOT / "tests", ROOT / "conformance" / "tests"]
CONFORMANCE = ROOT / "conformance" / "mcp_sessions_conformance"
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def core(path: Path) -> bool:
    """The middleware: everything but the command line and the gateway."""
    return path.parts[0] not in {"_cli", "_gateway"}


def cli(path: Path) -> bool:
    return path.parts[0] == "_cli"


def gateway(path: Path) -> bool:
    return path.parts[0] == "_gateway"


PARTS: dict[str, Callable[[Path], bool]] = {"core": core, "_cli": cli, "_gateway": gateway}
"""Each part's test of a path, relative to the package."""


@dataclass
class Part:
    """What the counter found of a part: its code lines, their characters, and how many pass 100 columns."""

    lines: int = 0
    characters: int = 0
    wide: int = 0
    reexports: bool = False  # a module whose code is only imports and ``__all__``

    @property
    def per_line(self) -> float:
        return round(self.characters / self.lines, 1) if self.lines else 0.0

    @property
    def share_wide(self) -> float:
        return round(100 * self.wide / self.lines, 1) if self.lines else 0.0


def code_line_numbers(source: str) -> set[int]:
    """The numbers of the lines of ``source`` that hold code (a string statement or a comment alone is not code)."""
    strings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            strings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines - strings


def reexports_only(source: str) -> bool:
    """Whether ``source``'s statements are only imports, ``__all__`` and string statements."""
    for statement in ast.parse(source).body:
        names = [target.id for target in getattr(statement, "targets", []) if isinstance(target, ast.Name)]
        if not (isinstance(statement, ast.Import | ast.ImportFrom | ast.Expr) or names == ["__all__"]):
            return False
        if isinstance(statement, ast.Expr) and not isinstance(statement.value, ast.Constant):
            return False
    return True


def code_lines(source: str) -> int:
    """The number of lines of ``source`` that hold code."""
    return len(code_line_numbers(source))


def add(part: Part, source: str) -> None:
    """Count ``source``'s code lines into ``part``."""
    text = source.splitlines()
    for number in code_line_numbers(source):
        line = text[number - 1]
        part.lines += 1
        part.characters += len(line.strip())
        part.wide += len(line) > 100


def count(package: Path = PACKAGE) -> dict[str, Part]:
    """Code lines and their density, per part."""
    parts = {part: Part() for part in PARTS}
    for path in package.rglob("*.py"):
        relative = path.relative_to(package)
        for part, holds in PARTS.items():
            if holds(relative):
                add(parts[part], path.read_text(encoding="utf-8"))
    return parts


def modules(package: Path = PACKAGE, conformance: Path = CONFORMANCE) -> dict[str, Part]:
    """Each module's code lines and density, by its path from its package's parent."""
    found: dict[str, Part] = {}
    for root in (package, conformance):
        for path in sorted(root.rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            part = found.setdefault(str(path.relative_to(root.parent)), Part(reexports=reexports_only(source)))
            add(part, source)
    return found


def print_modules(found: dict[str, Part]) -> None:
    """Each module's figures, by name."""
    print(f"\n{'module':<48} {'code lines':>10} {'chars/line':>10} {'over 100':>8}")
    for name, part in found.items():
        note = "  re-exports" if part.reexports else ""
        print(f"{name:<48} {part.lines:>10} {part.per_line:>10} {part.share_wide:>7}%{note}")


def suite_lines(tests: list[Path] = TESTS) -> int:
    """Every line of the suite's Python files, as ``wc -l`` counts them."""
    return sum(path.read_bytes().count(b"\n") for directory in tests for path in directory.rglob("*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--package", type=Path, default=PACKAGE)
    parser.add_argument("--conformance", type=Path, default=CONFORMANCE)
    parser.add_argument("--tests", type=Path, nargs="+", default=TESTS)
    parser.add_argument("--modules", action="store_true", help="each module's figures too")
    args = parser.parse_args(argv)
    parts = count(args.package)
    print(f"{'part':<10} {'code lines':>10} {'chars/line':>10} {'over 100':>8}")
    for name, part in parts.items():
        print(f"{name:<10} {part.lines:>10} {part.per_line:>10} {part.share_wide:>7}%")
    print(f"{'total':<10} {sum(part.lines for part in parts.values()):>10}")
    print(f"{'tests':<10} {suite_lines(args.tests):>10}  (every line of tests/ and conformance/tests/)")
    if args.modules:
        print_modules(modules(args.package, args.conformance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
