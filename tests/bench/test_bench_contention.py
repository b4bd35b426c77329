"""`bench --contention N`: CPU-bound processes beside the bench, quiet vs contended."""

import json
import os
import subprocess
import sys
import time

from mosaic_rt.bench import contention


def _bench(args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "mosaic_rt", "bench", *args], capture_output=True, text=True, timeout=timeout
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_burners_run_inside_the_block_only():
    with contention.burners(2) as procs:
        assert len(procs) == 2
        assert all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)
    with contention.burners(0) as procs:
        assert procs == []


def test_burners_end_when_the_harness_dies():
    # A parent ended by os._exit (as the hang watchdog does) cleans nothing up.
    code = (
        "import os, sys\n"
        "from mosaic_rt.bench import contention\n"
        "cm = contention.burners(1)\n"
        "procs = cm.__enter__()\n"
        "print(procs[0].pid, flush=True)\n"
        "os._exit(0)\n"
    )
    parent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert parent.returncode == 0, parent.stderr
    pid = int(parent.stdout.split()[0])
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Orphaned, it is reaped by init; a zombie would still answer kill(0).
    if _alive(pid):
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split(") ")[1][0] == "Z", "the burner outlived its harness"


def test_bad_process_counts_are_usage_errors():
    for bad in ("-1", "lots", "65"):
        done = _bench(["--quick", "--contention", bad, "--list"], timeout=60)
        assert done.returncode == 2
        assert "--contention takes a number of CPU-bound processes from 0 to 64" in done.stderr


def test_contended_cases_are_timed_and_judged(tmp_path):
    out = tmp_path / "out.json"
    done = _bench(["--quick", "--filter", "^ping-pong r=10$", "--contention", "1", "--json", str(out)])
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert data["settings"]["contention"] == 1
    [case] = data["contention"]["cases"]
    assert case["name"] == "ping-pong r=10" and case["error"] is None
    assert len(case["quiet_blocks_s"]) == len(case["contended_blocks_s"]) == contention.BLOCKS
    assert case["ratio"] == case["contended_s"] / case["quiet_s"]
    [verdict] = [t for t in data["targets"] if t["subject"] == "ping-pong r=10 contended/quiet"]
    assert verdict["target"] == contention.TARGET and verdict["kind"] == "max"
    assert verdict["measured"] == case["ratio"]
