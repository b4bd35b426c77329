"""The test tree's own rules (ARCHITECTURE.md, "Tests"): files in a layer's
directory are named by what they test, not by the layer they sit in; and a
test file sets a timeout only where it needs another than the configured
default (pyproject.toml, [tool.pytest.ini_options] timeout)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Layers whose files are named by topic: a layer-prefixed name there says
# nothing the directory does not.
TOPIC_NAMED = ("interpret", "ffi", "api")


def _test_files():
    return sorted(p for p in TESTS.rglob("test_*.py") if "support" not in p.relative_to(TESTS).parts)


def _default_timeout() -> float:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return float(config["tool"]["pytest"]["ini_options"]["timeout"])


def _timeout_marks(tree):
    """(line, seconds) of every ``pytest.mark.timeout(<number>)`` in a module:
    module marks, class and function decorators, marks applied by call."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f = node.func
        if f.attr != "timeout" or not (isinstance(f.value, ast.Attribute) and f.value.attr == "mark"):
            continue
        seconds = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "timeout"), None)
        if isinstance(seconds, ast.Constant) and isinstance(seconds.value, (int, float)):
            yield node.lineno, float(seconds.value)


def test_no_file_is_named_after_its_layer():
    named = [
        str(p.relative_to(TESTS))
        for p in _test_files()
        if p.name.startswith("test_interpret_")
        or (p.parent.name in TOPIC_NAMED and p.name.startswith(f"test_{p.parent.name}_"))
    ]
    assert not named, f"name these after what they test, not their layer: {named}"


def test_no_timeout_repeats_the_default():
    default = _default_timeout()
    repeated = [
        f"{p.relative_to(TESTS)}:{line}"
        for p in _test_files()
        for line, seconds in _timeout_marks(ast.parse(p.read_text(), str(p)))
        if seconds == default
    ]
    assert not repeated, f"timeouts equal to the default ({default:g} s) of pyproject.toml: {repeated}"


def test_the_timeout_scan_sees_every_form():
    """The scan above finds a module mark, a decorator and a mark applied by
    call, positional or keyword; a call of another mark is not one."""
    source = (
        "import pytest\n"
        "pytestmark = [pytest.mark.mpi, pytest.mark.timeout(300)]\n"
        "@pytest.mark.timeout(timeout=120)\n"
        "def test_a(): pass\n"
        "B = pytest.mark.timeout(600)(object)\n"
        "C = pytest.mark.skipif(True, reason='x')\n"
    )
    assert sorted(_timeout_marks(ast.parse(source))) == [(2, 300.0), (3, 120.0), (5, 600.0)]
