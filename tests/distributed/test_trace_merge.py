"""`python -m mosaic_rt trace --merge`: the traces of a launch's processes
on one clock, each device's track named once."""

from __future__ import annotations

import json
import subprocess
import sys

from mosaic_rt import timeline


def _trace(start_us: int, device: int, ts: float) -> dict:
    return {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": {"name": f"device {device}"}},
            {"ph": "X", "name": "grid", "cat": "grid", "pid": device, "tid": 0, "ts": ts, "dur": 5.0},
            {"ph": "s", "name": "signal", "id": 1, "pid": device, "tid": 0, "ts": ts},
        ],
        "otherData": {"generator": "mosaic_rt", "start_unix_us": start_us},
    }


def test_merge_shifts_onto_one_clock_and_keeps_flow_ids_apart():
    merged = timeline.merge([_trace(1_000, 0, 10.0), _trace(1_250, 1, 10.0)])
    spans = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e["ph"] == "X"}
    assert spans == {0: 10.0, 1: 260.0}
    flows = [e["id"] for e in merged["traceEvents"] if e["ph"] == "s"]
    assert len(set(flows)) == 2
    assert merged["otherData"]["merged_traces"] == 2


def test_the_cli_writes_the_merged_timeline(tmp_path):
    paths = []
    for p, start in enumerate((5_000, 5_100)):
        path = tmp_path / f"trace.p{p}.json"
        path.write_text(json.dumps(_trace(start, p, 1.0)))
        paths.append(str(path))
    out = tmp_path / "merged.json"
    cmd = [sys.executable, "-m", "mosaic_rt", "trace", "--merge", str(out), *paths]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    merged = json.loads(out.read_text())
    assert {e["pid"] for e in merged["traceEvents"]} == {0, 1}
