"""No function of `python/mosaic_rt` runs over 120 lines: past that a reader
cannot keep it in view, and it is a list of things that want names."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "mosaic_rt"
LIMIT = 120


def test_no_function_over_the_limit():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - start + 1 > LIMIT:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert not long, f"functions over {LIMIT} lines: {long}"
