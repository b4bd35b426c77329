"""The code blocks of the documentation (README.md, CONTRIBUTING.md, docs/*.md), for
the checks that run them: tests/api/test_docs.py, and scripts/wheel_checks.py
in the wheel test (no checkout on sys.path there: this module imports only
the standard library and, to run a block, the installed mosaic_rt).

A block is a fenced ```python / ```py (run), ```sh (checked against the
real command line), ```ini / ```toml (pytest settings: checked against
pytest's options) or ```text (output: not checked) block. The line right above a fence may carry
directions for the checks, invisible in the rendered page:

    <!-- doc-test: extra=tpu -->         needs mosaic_rt's optional extra (skipped, saying so, without it)
    <!-- doc-test: mpirun=2 file=my_kernels.py -->
                                         run under `mpirun -np 2` as my_kernels.py (the name sh blocks use)
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARK = re.compile(r"^<!--\s*doc-test:(.*?)-->\s*$")
PYTHON = ("python", "py")
# Each optional extra of pyproject.toml, by the modules that show it is installed.
EXTRA_MODULES = {"bench": ("rich",), "plot": ("matplotlib",), "mpi": ("mpi4py",), "tpu": ("libtpu",)}
# What a python block runs with: enough CPU devices for the multi-device examples.
DEVICES = 8


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path  # the document
    line: int  # the opening fence's line (1-based)
    lang: str
    code: str
    marks: dict

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"


def documents(root: pathlib.Path) -> list[pathlib.Path]:
    return [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]


def blocks(path: pathlib.Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        if end is None:
            raise ValueError(f"{path.name}:{i + 1}: a code block that never ends")
        mark = _MARK.match(lines[i - 1]) if i else None
        marks = dict(word.split("=", 1) for word in mark.group(1).split()) if mark else {}
        found.append(Block(path, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", marks))
        i = end + 1
    return found


def all_blocks(root: pathlib.Path) -> list[Block]:
    return [b for doc in documents(root) for b in blocks(doc)]


def python_blocks(root: pathlib.Path) -> list[Block]:
    return [b for b in all_blocks(root) if b.lang in PYTHON]


def _mpirun() -> str | None:
    from mosaic_rt.bench.multi_process import mpirun

    return mpirun()


def missing(block: Block) -> str | None:
    """Why this environment cannot run `block` (an optional extra that is not
    installed), or None."""
    extras = [e for e in block.marks.get("extra", "").split(",") if e]
    if "mpirun" in block.marks:
        extras.append("mpi")
    for extra in extras:
        absent = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
        if extra == "mpi" and not absent and _mpirun() is None:
            absent = ["mpirun"]
        if absent:
            return f'{block.where} needs the {extra} extra (pip install "mosaic_rt[{extra}]"): no {", ".join(absent)}'
    return None


def run(block: Block, cwd: pathlib.Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """Runs a python block as a script of its own in `cwd`, on CPU with
    `DEVICES` CPU devices (under mpirun when it says so)."""
    script = cwd / block.marks.get("file", "example.py")
    script.write_text(block.code, encoding="utf-8")
    env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_NUM_CPU_DEVICES=str(DEVICES))
    env.pop("XLA_FLAGS", None)  # a device count there would override JAX_NUM_CPU_DEVICES
    cmd = [sys.executable, script.name]
    if "mpirun" in block.marks:
        from mosaic_rt.bench.multi_process import mpirun_command

        cmd = [*mpirun_command(_mpirun(), int(block.marks["mpirun"])), *cmd]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
