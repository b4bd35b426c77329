"""pytest plugin for scripts/jax_tpu_suite.py (load with ``-p jax_test_support``,
scripts/ on sys.path): JAX's test-only helper modules that its wheels leave
out -- ``jax._src.hypothesis_test_util``, ``jax._src.pallas.pallas_test_util``,
... -- importable under their own names, from the files the harness
extracted at the same tag as the tests.

``$JAX_TEST_SUPPORT`` is a directory laid out like JAX's repository
(``jax/_src/hypothesis_test_util.py``, ...). Each module there that the
installed jax does not have is found there by an import hook appended to
``sys.meta_path`` (so the installed jax wins for every name it has). Nothing
is written into the installed jax.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the extracted modules (any order: they import each other)."""

    def __init__(self, files: dict):
        self.files = files

    def find_spec(self, name, path=None, target=None):
        if name in self.files:
            return importlib.util.spec_from_file_location(name, self.files[name])
        return None


def modules(root: str) -> dict:
    """Module name -> file, of every .py file under ``root``/jax."""
    out = {}
    for dirpath, _dirs, files in os.walk(os.path.join(root, "jax")):
        for f in sorted(files):
            if f.endswith(".py") and f != "__init__.py":
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                out[rel[: -len(".py")].replace(os.sep, ".")] = os.path.join(root, rel)
    return out


def pytest_configure(config):
    root = os.environ.get("JAX_TEST_SUPPORT")
    if not root:
        return
    missing = {n: f for n, f in modules(root).items() if n not in sys.modules and not _installed(n)}
    if missing:
        # Appended: the installed jax wins for every name it has.
        sys.meta_path.append(_Finder(missing))
    config._jax_test_support = sorted(missing)


def pytest_report_header(config):
    loaded = getattr(config, "_jax_test_support", None)
    if loaded:
        return f"jax_test_support: {', '.join(loaded)} from the tests' tag"
    return None
