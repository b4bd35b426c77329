"""The package as installed: version, dependency ranges, metadata, stubs in sync,
CLI demo, bench output without rich. (The README and docs/ examples and set-up
commands: test_docs.py.)"""

import ast
import pathlib
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import mosaic_rt
import pytest
from mosaic_rt import _native

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_source_cargo_metadata_and_module_agree():
    assert _pyproject()["project"]["dynamic"] == ["version"]
    assert "version" not in _pyproject()["project"]
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]
    assert mosaic_rt.__version__ == metadata.version("mosaic_rt") == cargo["version"]


def test_dependencies_are_ranges_that_keep_the_users_jax():
    deps = _pyproject()["project"]["dependencies"]
    # No upper bound: a pin would make `pip install mosaic_rt` downgrade a
    # newer jax the user has (mosaic_rt.jax_version warns about it instead).
    assert "jax>=0.10.2" in deps and "jaxlib>=0.10.2" in deps
    # jaxlib 0.10.2 (the only jax on Python 3.11) breaks with numpy 2.4.
    assert "numpy<2.4; python_version < '3.12'" in deps
    assert not [d for d in deps if "==" in d], "pins would replace the user's packages"
    names = {re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0] for d in deps}
    assert names == {"jax", "jaxlib", "numpy", "ml_dtypes"}  # rich is in the bench extra


def test_extras_and_license_metadata():
    project = _pyproject()["project"]
    extras = project["optional-dependencies"]
    assert [d for d in extras["bench"] if d.startswith("rich")]
    assert {"pytest>=8", "pytest-timeout>=2.3", "hypothesis>=6.100"} <= set(extras["test"])
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in project["classifiers"]
    assert metadata.metadata("mosaic_rt")["License-Expression"] == "Apache-2.0"


def _stub_methods(cls_name):
    tree = ast.parse((ROOT / "python/mosaic_rt/_native.pyi").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


def test_native_stub_lists_exactly_the_native_methods():
    stub = _stub_methods("Runtime") - {"__init__"}
    real = {n for n in dir(_native.Runtime) if not n.startswith("_")}
    assert stub == real


def test_extension_is_the_abi3_build():
    assert pathlib.Path(_native.__file__).name.startswith("_native")
    assert ".abi3." in pathlib.Path(_native.__file__).name


@pytest.mark.timeout(120)
def test_cli_demo_runs_and_checks_results():
    proc = subprocess.run(
        [sys.executable, "-m", "mosaic_rt", "demo", "--devices", "4", "--rounds", "10", "--elems", "256"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    assert "all transfers checked: OK" in proc.stdout
    assert "eager" in proc.stdout and "on_wait" in proc.stdout


def test_cli_rejects_bad_arguments():
    proc = subprocess.run(
        [sys.executable, "-m", "mosaic_rt", "demo", "--devices", "1"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--devices >= 2" in proc.stderr


_NO_RICH = "import sys; sys.modules['rich'] = None\n"  # import rich now fails


def test_bench_cli_works_without_rich():
    code = _NO_RICH + (
        "from mosaic_rt.bench.cli import main\n"
        "assert main(['--quick', '--list']) == 0\n"
        "assert main(['--quick', '--filter', '(unclosed']) == 2\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ping-pong r=10  (ping-pong, 2 device(s))" in done.stdout
    assert "bad --filter pattern: missing )" in done.stdout


def test_plain_tables_without_rich():
    code = _NO_RICH + (
        "from mosaic_rt.bench.console import Table, escape, make_console\n"
        "t = Table(title='results')\n"
        "t.add_column('case'); t.add_column('ratio', justify='right')\n"
        "t.add_row('a', '[green]1.0x[/]'); t.add_row('longer', '[bold red]12.5x[/]')\n"
        "c = make_console(); c.print(t); c.print(escape('[plot] and [device 0]'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "results",
        "case    ratio",
        "------  -----",
        "a        1.0x",
        "longer  12.5x",
        "[plot] and [device 0]",
    ]
