"""Real multi-process launches: ``mpirun -np 2`` and ``-np 4
--oversubscribe`` of tests/distributed/scenarios.py, each rank one JAX
process of one global mesh (marked ``mpi``: ``pytest -m mpi``; needs
mpi4py and an MPI whose ``mpirun`` is beside the interpreter or on PATH --
``pip install "mosaic_rt[mpi]"``; scripts/test.sh installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from mosaic_rt.bench.multi_process import mpirun_command

pytestmark = [pytest.mark.mpi, pytest.mark.timeout(600)]

SCENARIOS = Path(__file__).with_name("scenarios.py")


def _mpirun() -> str | None:
    here = Path(sys.executable).parent / "mpirun"
    return str(here) if here.exists() else shutil.which("mpirun")


def launch(
    name: str, np_: int, devices: int, mode: str = "eager", timeout: float = 300, **extra_env
) -> dict[int, dict]:
    """Runs scenario `name` on `np_` ranks of `devices` CPU devices each;
    ``{rank: result}`` (every rank must report)."""
    mpirun = _mpirun()
    if mpirun is None:
        pytest.skip('no mpirun: pip install "mosaic_rt[mpi]"')
    pytest.importorskip("mpi4py")
    results_dir = tempfile.mkdtemp(prefix="mrt-results-")
    env = dict(
        os.environ, MRT_DEVICES=str(devices), MRT_MODE=mode, JAX_PLATFORMS="cpu", MRT_RESULTS=results_dir, **extra_env
    )
    env.pop("XLA_FLAGS", None)
    cmd = [*mpirun_command(mpirun, np_), sys.executable, str(SCENARIOS), name]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"mpirun {name} did not finish in {timeout}s:\n{e.stdout}\n{e.stderr}") from None
    results = {}
    for path in Path(results_dir).glob("*.json"):
        results[int(path.stem)] = json.loads(path.read_text())
    shutil.rmtree(results_dir, ignore_errors=True)
    assert sorted(results) == list(range(np_)), f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    return results


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_ring_all_gather_over_4_processes_of_8_devices_equals_xla(mode):
    results = launch("all_gather", 4, 8, mode)
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_ring_all_gather_of_large_blocks_equals_xla(mode):
    # 128 KiB per hop: an eager DMA's data lands in place at the receiver.
    results = launch("all_gather", 2, 2, mode, MRT_ROWS="256")
    assert all(r["ok"] for r in results.values()), results


def test_processes_with_different_device_counts():
    # Rank r owns 2 + r devices: 2 + 3 devices in one ring.
    results = launch("all_gather", 2, 2, "on_wait", MRT_UNEVEN="1")
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_ping_pong_between_two_processes(mode):
    results = launch("ping_pong", 2, 2, mode)
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_barrier_semaphore_with_collective_id(mode):
    results = launch("barrier", 2, 2, mode)
    assert all(r["ok"] for r in results.values()), results


def test_a_failure_in_one_process_ends_every_process_with_the_root_cause():
    results = launch("failure", 2, 2)
    for rank, r in results.items():
        assert not r["ok"], (rank, r)
        assert r["type"] == "IndexError", (rank, r)


def test_a_deadlock_across_processes_is_reported_on_every_process():
    results = launch("deadlock", 2, 2)
    for rank, r in results.items():
        assert r["type"] == "DeadlockError", (rank, r)
        for d in range(4):
            assert f"device {d}, core 0" in r["message"], (rank, r["message"])
        assert "process 0:" in r["message"] and "process 1:" in r["message"], r["message"]


@pytest.mark.parametrize("mode", ["eager", "on_wait"])
def test_a_race_across_processes_is_reported_with_both_source_lines(mode):
    lines = SCENARIOS.read_text().splitlines()
    dma = next(i for i, t in enumerate(lines, 1) if "# RACE-DMA" in t)
    store = next(i for i, t in enumerate(lines, 1) if "# RACE-STORE" in t)
    results = launch("race", 2, 2, mode)
    for rank, r in results.items():
        assert r["type"] == "RaceError", (rank, r)
    # The process where the DMA's write met the store names both lines.
    assert any(
        f"scenarios.py:{dma}" in r["message"] and f"scenarios.py:{store}" in r["message"] for r in results.values()
    ), results


def test_a_process_that_never_calls_the_kernel_is_named():
    results = launch("skip", 2, 2)
    r = results[0]
    assert r["type"] == "DeadlockError", r
    assert "process 1: device(s) 2, 3 never joined this launch" in r["message"], r["message"]


def test_a_killed_process_ends_the_job_and_leaves_no_process_running():
    mpirun = _mpirun()
    if mpirun is None:
        pytest.skip('no mpirun: pip install "mosaic_rt[mpi]"')
    env = dict(os.environ, MRT_DEVICES="2", JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    cmd = [*mpirun_command(mpirun, 2), sys.executable, str(SCENARIOS), "killed"]
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    assert proc.returncode != 0
    left = subprocess.run(["pgrep", "-f", f"{SCENARIOS} killed"], capture_output=True, text=True)
    assert left.stdout.strip() == "", left.stdout
