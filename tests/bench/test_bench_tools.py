"""The developer tools of benches/tools/ run, at tiny sizes, and print what
their docstrings promise (each in a fresh interpreter, as a developer runs
them; no timing is asserted)."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

TOOLS = pathlib.Path(__file__).resolve().parents[2] / "benches" / "tools"


def run_tool(name: str, *args: str) -> str:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    done = subprocess.run(
        [sys.executable, str(TOOLS / name), *args], capture_output=True, text=True, env=env, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("name", sorted(p.name for p in TOOLS.glob("[!_]*.py")))
def test_every_tool_says_what_it_measures_and_how_to_run_it(name):
    text = (TOOLS / name).read_text()
    doc = text.split('"""')[1]
    assert f"python benches/tools/{name}" in doc
    assert "monkeypatch" not in text and "setattr(" not in text
    assert run_tool(name, "--help").startswith(f"usage: {name}")


def test_stages_splits_a_cold_call_and_counts_the_program():
    out = run_tool("stages.py", "blockspec-add", "--reps", "1", "--fusions")
    line = next(ln for ln in out.splitlines() if ln.startswith("blockspec-add"))
    assert re.search(
        r"ours +total +[\d.]+ = trace +[\d.]+ \+ lower +[\d.]+ \+ compile +[\d.]+ "
        r"\+ run +[\d.]+ \| fusions \d+, whiles \d+, custom calls \d+",
        line,
    ), line
    assert "launch_begin 1" in line and "kernel_end 1" in line


def test_stages_rejects_an_unknown_family():
    done = subprocess.run(
        [sys.executable, str(TOOLS / "stages.py"), "no-such-family"],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert done.returncode == 2 and "unknown families ['no-such-family']" in done.stderr


def test_profile_lowering_lists_our_interpreter():
    out = run_tool("profile_lowering.py", "blockspec-add", "--reps", "1", "--top", "5")
    assert re.search(r"blockspec-add: trace \+ lower median [\d.]+ ms over 1 variants", out)
    listed = out.split("ncalls", 1)[1]
    assert "mosaic_rt/interpret/launch/kernel.py" in listed and "site-packages/jax" not in listed


@pytest.mark.parametrize(
    "case, native", [("copy 1dev", False), ("ping-pong r=10", False), ("right-permute 8dev 4KiB", True)]
)
def test_steady_loop_times_the_calls(case, native):
    out = run_tool("steady_loop.py", case, "--calls", "3", *(["--native"] if native else []))
    side = "native" if native else "ours"
    assert re.search(rf"^{re.escape(case)} \({side}\): 3 calls after 10 warm-up, [\d.]+ us per call$", out, re.M), out


def test_device_scaling_prints_ours_beside_xla_per_device_count():
    out = run_tool("device_scaling.py", "--devices", "1,2", "--rounds", "2")
    rows = re.findall(r"^(copy kernel|all-gather|reduce-scatter) +(\d) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)
    assert [(kind, n) for kind, n, *_ in rows] == [
        ("copy kernel", "1"),
        ("copy kernel", "2"),
        ("all-gather", "2"),
        ("reduce-scatter", "2"),
    ]


def test_compile_cost_reports_the_cost_per_fusion():
    out = run_tool("compile_cost.py", "--fusions", "1,2", "--reps", "1")
    for where in ("plain jit", "shard_map"):
        assert re.search(rf"^{where} +2 fusions: compile +[\d.]+ ms$", out, re.M), out
        assert re.search(rf"^{where} each fusion beyond the first: -?[\d.]+ ms$", out, re.M), out


def test_emitted_programs_saves_and_checks_fingerprints(tmp_path):
    saved = tmp_path / "programs.txt"
    out = run_tool("emitted_programs.py", "--only", "add grid=1", "--save", str(saved))
    assert re.fullmatch(r"zoo/add grid=1\t[0-9a-f]{16} \d+\n", out), out
    assert saved.read_text() == out
    run_tool("emitted_programs.py", "--only", "add grid=1", "--check", str(saved))
    saved.write_text("zoo/add grid=1\t0000000000000000 1\n")
    done = subprocess.run(
        [sys.executable, str(TOOLS / "emitted_programs.py"), "--only", "add grid=1", "--check", str(saved)],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert done.returncode == 1
    assert "changed: zoo/add grid=1: 0000000000000000 1 ->" in done.stderr
    assert "1 programs, 1 changed" in done.stderr


def test_production_stages_splits_a_first_call_per_side():
    out = run_tool("production_stages.py", "threefry", "--reps", "1", "--sides", "ours,reference")
    for side in ("ours", "reference"):
        line = next(ln for ln in out.splitlines() if ln.startswith("threefry_2x32_count") and f" {side} " in ln)
        assert re.search(
            r"total +\d+ = trace +\d+ \+ lower +\d+ \+ compile +\d+ \+ run +\d+ \| fusions \d+, our custom calls \d+",
            line,
        ), line


def test_production_stages_rejects_an_unknown_kernel():
    done = subprocess.run(
        [sys.executable, str(TOOLS / "production_stages.py"), "no-such-kernel"],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert done.returncode == 2 and "no production kernel matches ['no-such-kernel']" in done.stderr
