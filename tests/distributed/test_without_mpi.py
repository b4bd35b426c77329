"""Processes of one JAX job started by hand, without MPI (mpi4py cannot
be imported): a kernel that stays on each process's devices runs; one that
talks to another process's device fails at once, on every process, with
`MultiProcessError` naming the install line (marked ``mpi``: it starts
several JAX processes)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

SCENARIOS = Path(__file__).with_name("scenarios.py")


def run_by_hand(name: str, nproc: int = 2) -> dict[int, dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(nproc):
        env = dict(
            os.environ,
            MRT_NO_MPI="1",
            MRT_COORDINATOR=f"127.0.0.1:{port}",
            MRT_NPROC=str(nproc),
            MRT_RANK=str(rank),
            JAX_PLATFORMS="cpu",
        )
        env.pop("XLA_FLAGS", None)
        cmd = [sys.executable, str(SCENARIOS), name]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = {}
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"{name}: a process did not finish") from None
        for line in out.splitlines():
            if line.startswith("RESULT "):
                _, rank, payload = line.split(" ", 2)
                results[int(rank)] = json.loads(payload)
        assert results or p.returncode == 0, err[-4000:]
    assert sorted(results) == list(range(nproc)), results
    return results


def test_a_kernel_that_stays_on_each_process_runs_without_mpi():
    results = run_by_hand("local_only")
    assert all(r["ok"] for r in results.values()), results


def test_a_remote_dma_without_mpi_fails_at_once_on_every_process_naming_the_install_line():
    results = run_by_hand("remote_without_mpi")
    for rank, r in results.items():
        assert r["type"] == "MultiProcessError", (rank, r)
        assert 'pip install "mosaic_rt[mpi]"' in r["message"], r["message"]
