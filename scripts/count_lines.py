"""Code lines of the package, per part: what issue 52's budget counts.

A code line is a line that is not blank, not part of a docstring and not only a comment.
`make lint` prints the count; the budget is for planning, not a target to squeeze lines into.

    python scripts/count_lines.py [PACKAGE_DIR]
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "middleware" / "mcp_sessions"
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def code_lines(source: str) -> int:
    """The number of lines of ``source`` that hold code (a docstring or a comment alone is not code)."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def main(package: Path) -> None:
    lines: Counter[str] = Counter()
    files: Counter[str] = Counter()
    for path in sorted(package.rglob("*.py")):
        part = path.relative_to(package).parts[0]
        lines[part] += code_lines(path.read_text(encoding="utf-8"))
        files[part] += 1
    print(f"{'part':<20} {'code lines':>10} {'files':>6}")
    for part, count in lines.most_common():
        print(f"{part:<20} {count:>10} {files[part]:>6}")
    print(f"{'total':<20} {sum(lines.values()):>10} {sum(files.values()):>6}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
