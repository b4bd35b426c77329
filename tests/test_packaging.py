"""The package as installed: version, pins, stubs in sync, CLI demo."""

import ast
import pathlib
import subprocess
import sys
import tomllib

import pytest

import mosaic_rt
from mosaic_rt import _native

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_version_matches_pyproject_and_cargo():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cargo = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]
    assert mosaic_rt.__version__ == project["version"] == cargo["version"]


def test_pins_keep_the_tested_jax_stack():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for pin in ("jax==0.10.2", "jaxlib==0.10.2", "numpy==2.3.5"):
        assert pin in deps


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
        [sys.executable, "-m", "mosaic_rt", "demo", "--devices", "4", "--rounds", "10",
         "--elems", "256"],
        capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr
    assert "all transfers checked: OK" in proc.stdout
    assert "eager" in proc.stdout and "on_wait" in proc.stdout


def test_cli_rejects_bad_arguments():
    proc = subprocess.run([sys.executable, "-m", "mosaic_rt", "demo", "--devices", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--devices >= 2" in proc.stderr


def test_readme_examples_run(capsys):
    readme = (ROOT / "README.md").read_text()
    examples = [block.split("```", 1)[0] for block in readme.split("```python\n")[1:]]
    assert len(examples) == 2  # the pallas_call one (asserts itself), the runtime one
    for example in examples:
        exec(compile(example, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "[0. 2. 4. 6.]"


def test_readme_and_ci_run_the_same_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/test.sh" in readme
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()
