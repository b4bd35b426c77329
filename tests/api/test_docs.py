"""The user documentation works as written: every ```python / ```py block of
README.md and docs/*.md runs (a fresh process with enough CPU devices,
skipped only where it needs an optional extra that is not installed), every
```sh command is checked against the real command line it names (argparse
of `python -m mosaic_rt` / the scripts, pytest's options, pyproject's
extras, the files it runs), every ```ini key is a pytest option, and the
README keeps its shape: short, the sections a user looks for, the links.

Blocks and their directions: scripts/doc_blocks.py."""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib.util
import inspect
import io
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import doc_blocks  # noqa: E402

BLOCKS = doc_blocks.all_blocks(ROOT)
PYTHON = [b for b in BLOCKS if b.lang in doc_blocks.PYTHON]
SHELL = [b for b in BLOCKS if b.lang == "sh"]
INI = [b for b in BLOCKS if b.lang in ("ini", "toml")]
README = (ROOT / "README.md").read_text()


def _id(block) -> str:
    return block.where


# ----------------------------------------------------------------- python


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", [b for b in PYTHON if "mpirun" not in b.marks], ids=_id)
def test_python_block_runs(block, tmp_path):
    why = doc_blocks.missing(block)
    if why:
        pytest.skip(why)
    done = doc_blocks.run(block, tmp_path, timeout=540)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


@pytest.mark.mpi
@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", [b for b in PYTHON if "mpirun" in b.marks], ids=_id)
def test_python_block_runs_under_mpirun(block, tmp_path):
    why = doc_blocks.missing(block)
    if why:
        pytest.skip(why)
    done = doc_blocks.run(block, tmp_path, timeout=540)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"


def test_every_block_has_a_known_language_and_known_directions():
    for b in BLOCKS:
        known = (*doc_blocks.PYTHON, "sh", "ini", "toml", "text")
        assert b.lang in known, f"{b.where}: ```{b.lang} (python, sh, ini, toml or text)"
        assert set(b.marks) <= {"extra", "mpirun", "file"}, f"{b.where}: unknown direction {b.marks}"
        for extra in filter(None, b.marks.get("extra", "").split(",")):
            assert extra in doc_blocks.EXTRA_MODULES, f"{b.where}: no extra {extra!r}"
        if b.marks:
            assert b.lang in doc_blocks.PYTHON, f"{b.where}: directions are for python blocks"


# -------------------------------------------------------------------- sh


def _extras() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


@functools.cache
def _pytest_help() -> str:
    # The options and ini keys of every plugin installed with mosaic_rt.
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _source_names() -> str:
    """Every file a documented environment variable could be read in."""
    files = [*(ROOT / "python").rglob("*.py"), *(ROOT / "scripts").glob("*"), *(ROOT / "rust").rglob("*.rs")]
    return "\n".join(f.read_text(errors="replace") for f in files if f.is_file())


class _Parsed(Exception):
    def __init__(self, namespace):
        self.namespace = namespace


def _parse_only(main, argv: list[str], prog: str) -> argparse.Namespace | None:
    """Parses `argv` with the real parser `main` builds, and stops there
    (nothing runs). None for `--help`."""
    real = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    err = io.StringIO()
    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_args), contextlib.redirect_stderr(err):
        with mock.patch.object(sys, "argv", [prog, *argv]), contextlib.redirect_stdout(io.StringIO()):
            try:
                main(argv) if inspect.signature(main).parameters else main()
            except _Parsed as parsed:
                return parsed.namespace
            except SystemExit as e:
                assert e.code == 0, f"{prog} {shlex.join(argv)}: rejected: {err.getvalue().strip()}"
                return None
    raise AssertionError(f"{prog}: main() returned without parsing its arguments")


def _check_mosaic_rt(argv: list[str]) -> None:
    from mosaic_rt import __main__ as cli
    from mosaic_rt.bench import cli as bench_cli

    args = _parse_only(cli.main, argv, "python -m mosaic_rt")
    if args is not None and args.command == "bench" and args.filter:
        picked = bench_cli._select(args.quick, args.filter) + bench_cli._select_rows(args.filter)
        assert picked, f"bench --filter {args.filter} selects nothing"


def _check_script(path: Path, argv: list[str]) -> None:
    assert path.is_file(), f"no {path.relative_to(ROOT)}"
    if path.suffix == ".sh":
        text = path.read_text()
        for flag in (a for a in argv if a.startswith("-")):
            assert flag in text, f"{path.name} has no option {flag}"
        return
    if "argparse" not in path.read_text():
        assert not argv, f"{path.name} takes no arguments"
        return
    spec = importlib.util.spec_from_file_location(f"_doc_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    _parse_only(module.main, argv, path.name)


def _check_pip(argv: list[str]) -> None:
    assert argv[:1] == ["install"], f"pip {shlex.join(argv)}"
    for req in argv[1:]:
        m = re.fullmatch(r"(\.|mosaic_rt)(?:\[([\w,]+)\])?", req)
        if m and m.group(2):
            unknown = set(m.group(2).split(",")) - _extras()
            assert not unknown, f"pip install {req}: no extra {unknown} in pyproject.toml"


def _check_pytest(argv: list[str]) -> None:
    text = _pytest_help()
    for arg in argv:
        if arg.startswith("--"):
            flag = arg.split("=", 1)[0]
            assert re.search(rf"(^|[\s,]){re.escape(flag)}(?=[\s=,\[]|$)", text, re.M), f"pytest has no option {flag}"
        elif arg.startswith(("tests/", "benches/")):
            assert (ROOT / arg.split("::")[0]).exists(), f"no {arg}"


def _check_mpirun(argv: list[str], doc_files: set[str]) -> None:
    args = list(argv)
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt in ("-np", "-n", "--hostfile", "--host"):
            args.pop(0)
    assert args[:1] in (["python"], ["python3"]), f"mpirun runs {args[:1]}: expected python FILE"
    program = args[1]
    assert program in doc_files or (ROOT / program).is_file(), f"mpirun: {program} is neither a doc block nor a file"


# Commands a block may use beyond the ones checked above (no options to check).
_PLAIN = {"cat", "cd", "git", "ruff", "cargo", "export"}


def _check_command(words: list[str], doc_files: set[str], names: str) -> None:
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        var = words.pop(0).split("=", 1)[0]
        if var.startswith("MOSAIC_RT_"):
            assert var in names, f"{var} is read nowhere"
    if not words:
        return
    prog, *rest = words
    if prog in ("python", "python3"):
        if rest[:2] == ["-m", "mosaic_rt"]:
            return _check_mosaic_rt(rest[2:])
        if rest[:2] == ["-m", "pip"]:
            return _check_pip(rest[2:])
        if rest[:2] == ["-m", "pytest"]:
            return _check_pytest(rest[2:])
        assert rest and not rest[0].startswith("-"), f"python {shlex.join(rest)}"
        if rest[0] in doc_files:
            return
        return _check_script(ROOT / rest[0], rest[1:])
    if prog == "mosaic-rt-bench":
        return _check_mosaic_rt(["bench", *rest])
    if prog == "pip":
        return _check_pip(rest)
    if prog == "pytest":
        return _check_pytest(rest)
    if prog == "bash":
        return _check_script(ROOT / rest[0], rest[1:])
    if prog == "mpirun":
        return _check_mpirun(rest, doc_files)
    if prog == "cargo" and "-p" in rest:
        crate = rest[rest.index("-p") + 1]
        assert crate in (ROOT / "Cargo.lock").read_text(), f"no crate {crate}"
        return
    assert prog in _PLAIN, f"`{prog}`: no check for this command (add one to tests/api/test_docs.py)"


def _commands(block) -> list[list[str]]:
    """A block's commands as argument lists (comments dropped, continuation
    lines joined, `&&` / `;` / `|` separated; output lines are comments)."""
    text = block.code.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        current: list[str] = []
        for w in words:
            if w in ("&&", ";", "|", "||"):
                commands.append(current)
                current = []
            else:
                current.append(w)
        commands.append(current)
    return [c for c in commands if c]


@pytest.mark.parametrize("block", SHELL, ids=_id)
def test_sh_block_matches_the_real_command_line(block):
    doc_files = {b.marks["file"] for b in BLOCKS if b.path == block.path and "file" in b.marks}
    names = _source_names()
    for words in _commands(block):
        _check_command(words, doc_files, names)


@pytest.mark.parametrize("block", INI, ids=_id)
def test_ini_keys_are_pytest_options(block):
    # pytest's section of an ini file or of pyproject.toml ([tool.pytest.ini_options])
    for line in block.code.splitlines():
        m = re.match(r"\s*([a-z_]+)\s*=", line)
        if m:
            assert re.search(rf"^\s+{m.group(1)} \(", _pytest_help(), re.M), f"{block.where}: no ini key {m.group(1)}"


def test_every_documented_environment_variable_is_read():
    names = _source_names()
    for doc in doc_blocks.documents(ROOT):
        for var in set(re.findall(r"\bMOSAIC_RT_[A-Z0-9_]+", doc.read_text())):
            assert var in names, f"{doc.name}: {var} is read nowhere"


# ---------------------------------------------------------------- README

# The sections a user looks for, in this order (## level).
SECTIONS = [
    "Install",
    "Run your kernel tests on a simulated TPU",
    "Usage",
    "Differences from stock",
    "Diagnostics",
    "Speed",
    "Set-up commands",
    "More",
]
LINKS = [
    "docs/diagnostics.md",
    "docs/tpu-compile-check.md",
    "docs/multi-process.md",
    "docs/speed-and-caching.md",
    "docs/client-suites.md",
    "docs/runtime.md",
    "docs/benchmark.md",
    "docs/tpu-api.md",
    "docs/pytest-flag.md",
    "ARCHITECTURE.md",
    "CONTRIBUTING.md",
    "CHANGELOG.md",
    "benches/RESULTS.md",
    "benches/PERFORMANCE.md",
]


def test_readme_is_short_and_has_the_sections_in_order():
    assert len(README.splitlines()) <= 260
    headings = [line[3:].strip() for line in README.splitlines() if line.startswith("## ")]
    at = [next((i for i, h in enumerate(headings) if h.startswith(s)), None) for s in SECTIONS]
    assert None not in at, f"missing sections: {[s for s, i in zip(SECTIONS, at) if i is None]} in {headings}"
    assert at == sorted(at), headings


def test_readme_links_every_guide_and_they_exist():
    for link in LINKS:
        assert f"({link})" in README or f"({link}#" in README, f"README does not link {link}"
    # docs/pytest-flag.md is the pytest flag's own (it may not have landed yet).
    for doc in [*doc_blocks.documents(ROOT), ROOT / "ARCHITECTURE.md", ROOT / "CHANGELOG.md"]:
        for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", doc.read_text()):
            path = (doc.parent / target) if target else doc
            if target.endswith("pytest-flag.md") and not path.exists():
                continue
            assert path.exists(), f"{doc.name} links {target}, which does not exist"
            if anchor and path.suffix == ".md":
                assert anchor in _anchors(path), f"{doc.name} links {target}#{anchor}: no such heading"


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    found, text = set(), re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = 0
        while (slug if n == 0 else f"{slug}-{n}") in found:
            n += 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_readme_states_no_dated_runs_or_per_test_timings():
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README), "a dated run belongs in benches/RESULTS.md"
    assert not re.search(r"test_\w+` in \d+(\.\d+)? s", README), "per-test timings belong in benches/RESULTS.md"


def test_readme_names_the_install_line_first_and_the_extras():
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install mosaic_rt" in install
    for extra in sorted(_extras() - {"test"}):
        assert f"mosaic_rt[{extra}]" in install, f"the install section does not name the {extra} extra"
    assert README.index("## Install") < README.index("```python")


def test_readme_has_the_two_setup_commands_and_ci_runs_the_test_one():
    section = README.split("## Set-up commands", 1)[1].split("\n## ", 1)[0]
    commands = [b.split("```", 1)[0].strip() for b in section.split("```sh\n")[1:]]
    assert commands == ['pip install ".[bench]" && python -m mosaic_rt bench --quick', "bash scripts/test.sh"]
    ci_lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert "bash scripts/test.sh" in ci_lines


def test_readme_differences_name_both_defaults_that_differ_from_stock():
    import dataclasses

    import mosaic_rt
    from jax.experimental.pallas import tpu as pltpu

    section = README.split("## Differences from stock", 1)[1].split("\n## ", 1)[0]
    stock, ours = pltpu.InterpretParams(), mosaic_rt.InterpretParams()
    differ = [f.name for f in dataclasses.fields(stock) if getattr(stock, f.name) != getattr(ours, f.name)]
    assert differ, "no default differs from stock: update the README's differences"
    for name in differ:
        assert f'{name}="{getattr(ours, name)}"' in section, f"the differences do not state ours {name}"
        assert f'"{getattr(stock, name)}"' in section, f"the differences do not state stock's {name}"


def test_jax_version_policy_in_the_readme_matches_jax_version():
    from mosaic_rt import jax_version

    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    tested = f"{jax_version.dotted(jax_version.LOWEST_SUPPORTED)} .. {jax_version.dotted(jax_version.TESTED_NEWEST)}"
    assert re.search(re.escape(tested).replace(r"\ \.\.\ ", r".*?\.\. "), install, re.S), tested
    for name in ("UntestedJaxWarning", "JaxVersionError", "jax_version.py"):
        assert name in install
