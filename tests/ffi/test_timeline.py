"""Timelines: launches with ``trace_path`` write Chrome trace-event JSON
files, checked structurally here (valid JSON, one track per (device, core),
spans nest per track, every flow has both ends, timestamps monotone per
track); ``python -m mosaic_rt trace`` summarises, checks and draws them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
import numpy as np
import pytest
from ffi_support import begin, dummy_rows, fresh_uid, on_devices, with_token
from mosaic_rt import timeline

pytestmark = pytest.mark.timeout(180)


def ring_kernel(uid, path, *, steps=3, mode="on_wait", cores=1, n=2):
    """Per grid step: a remote DMA to the next device, waits on both of its
    semaphores, then a signal to the previous device and a wait for the
    next device's signal."""

    def body(d, x):
        with begin(d, n, uid=uid, trace_path=path, dma_execution_mode=mode, num_cores=cores) as k:
            h = k.handle
            t, src = F.allocate_buffer(
                k.token,
                h,
                d,
                0,
                space="vmem",
                dtype=np.float32,
                shape=(8, 128),
                init=jnp.broadcast_to(x[0, 0], (8, 128)),
            )
            t, dst = F.allocate_buffer(t, h, d, 0, space="vmem", dtype=np.float32, shape=(8, 128))
            t, send = F.allocate_semaphores(t, h, d, 0, kind="dma")
            t, recv = F.allocate_semaphores(t, h, d, 0, kind="dma")
            t, sem = F.allocate_semaphores(t, h, d, 0)
            t = F.device_barrier(t, h, d)
            nxt, prv = (d + 1) % n, (d + n - 1) % n
            for i in range(steps):
                t = F.grid_step(t, h, d, 0, (i,), phase="begin")
                t = F.dma_start(
                    t,
                    h,
                    d,
                    0,
                    F.DmaStart(F.DmaSide("vmem", src), F.DmaSide("vmem", dst), recv, src_sem=send, dst_device=nxt),
                )
                t = F.dma_wait(t, h, d, 0, F.DmaWait(send, 4096))
                t = F.dma_wait(t, h, d, 0, F.DmaWait(recv, 4096))
                t = F.semaphore_signal(t, h, d, 0, sem, 1, target_device=prv)
                t = F.semaphore_wait(t, h, d, 0, sem, 1)
                t = F.grid_step(t, h, d, 0, (), phase="end")
            t, got = F.load(t, h, d, 0, dst, None, space="vmem", shape=(8, 128), dtype=np.float32)
            k.token = t
        return with_token(got[:1, :1], k.token)

    return body


def run(body, n=2):
    fn, args = on_devices(n, body, np.arange(n, dtype=np.float32).reshape(n, 1))
    with F.native_errors():
        return np.asarray(fn(*args))


@pytest.fixture
def trace_dir(tmp_path):
    return tmp_path


@pytest.mark.parametrize("mode", ["on_wait", "eager"])
def test_a_ring_launch_writes_a_sound_trace(trace_dir, mode):
    path = str(trace_dir / "trace.json")
    out = run(ring_kernel(fresh_uid(), path, mode=mode))
    np.testing.assert_array_equal(out[:, 0], [1, 0])  # data went around
    assert path in timeline.trace_files()
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)  # valid JSON
    data = timeline.load(path)
    assert raw == data
    assert timeline.check(data) == []
    names = {(p, t): n for p, t, n in timeline.tracks(data)}
    assert names[(0, 0)] == "core 0" and names[(1, 0)] == "core 0"
    assert sum(n.startswith("core 0 DMA lane") for n in names.values()) >= 2
    events = data["traceEvents"]
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "grid"]
    assert sorted(e["name"] for e in steps) == ["step (0)", "step (0)", "step (1)", "step (1)", "step (2)", "step (2)"]
    assert sum(e["ph"] == "X" and e["cat"] == "dma" for e in events) == 6
    waits = [e for e in events if e["ph"] == "X" and e["cat"] == "wait"]
    assert sum(e["name"].startswith("dma_wait") for e in waits) == 12
    barriers = [e for e in events if e["ph"] == "X" and e["cat"] == "barrier"]
    assert [e["name"] for e in barriers] == ["device barrier"] * 2
    signals = [e for e in events if e["ph"] == "i"]
    assert len(signals) == 6 and all(e["name"].startswith("signal sem") for e in signals)
    flows = [e for e in events if e["ph"] == "s"]
    assert len(flows) == 18  # every wait but the barrier is released by something
    # Every wait inside a step lies within it (nesting on the core track).
    for w in waits:
        assert any(
            s["pid"] == w["pid"]
            and s["tid"] == w["tid"]
            and s["ts"] <= w["ts"]
            and w["ts"] + w["dur"] <= s["ts"] + s["dur"] + 1e-3
            for s in steps
        )


def test_repeated_launches_get_numbered_files(trace_dir):
    path = str(trace_dir / "t.json")
    body = ring_kernel(fresh_uid(), path, steps=1)
    fn, args = on_devices(2, body, np.zeros((2, 1), np.float32))
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    written = [p for p in timeline.trace_files() if p.startswith(str(trace_dir))]
    assert written == [path, str(trace_dir / "t-1.json"), str(trace_dir / "t-2.json")]
    for p in written:
        assert timeline.check(timeline.load(p)) == []


def test_a_failed_launch_still_writes_its_trace(trace_dir):
    path = str(trace_dir / "failed.json")
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 2, uid=uid, trace_path=path, wait_timeout=0.3, detect_deadlocks=False) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            # Device 1 never signals device 0.
            k.token = F.semaphore_wait(k.token, k.handle, d, 0, s, 1 - d)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    fn, args = on_devices(2, body, dummy_rows(2))
    with pytest.raises(mosaic_rt.WaitTimeout):
        with F.native_errors():
            jax.block_until_ready(fn(*args))
    data = timeline.load(path)
    assert timeline.check(data) == []
    failed = [e for e in data["traceEvents"] if e.get("args", {}).get("error") == "WaitTimeout"]
    assert len(failed) == 1 and failed[0]["pid"] == 0 and failed[0]["dur"] >= 250_000


def test_two_cores_per_device_get_a_track_each(trace_dir):
    path = str(trace_dir / "cores.json")
    uid = fresh_uid()

    def body(d, _):
        with begin(d, 1, uid=uid, trace_path=path, num_cores=2) as k:
            t, s = F.allocate_semaphores(k.token, k.handle, d, None)
            t = F.semaphore_signal(t, k.handle, d, 1, s, 1, target_core=0)
            t = F.semaphore_wait(t, k.handle, d, 0, s, 1)
            k.token = t
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    fn, args = on_devices(1, body, dummy_rows(1))
    with F.native_errors():
        jax.block_until_ready(fn(*args))
    data = timeline.load(path)
    assert timeline.check(data) == []
    cores = sorted((p, t) for p, t, n in timeline.tracks(data) if "DMA" not in n)
    assert cores == [(0, 0), (0, 1)]
    s = [e for e in data["traceEvents"] if e["ph"] == "s"]
    f = [e for e in data["traceEvents"] if e["ph"] == "f"]
    assert [(e["pid"], e["tid"]) for e in s] == [(0, 1)] and [(e["pid"], e["tid"]) for e in f] == [(0, 0)]


def test_runtime_traces_on_request_only():
    r = mosaic_rt.Runtime(2, trace=True)
    sem = r.allocate_semaphores(0)
    r.signal(0, 0, sem, 2, target_device=1)
    r.wait(1, 0, sem, 2)
    data = json.loads(r.trace_json())
    assert timeline.check(data) == []
    assert [e["name"] for e in data["traceEvents"] if e["ph"] == "X"] == ["wait sem 2000 >= 2"]
    with pytest.raises(ValueError, match="Runtime\\(trace=True\\)"):
        mosaic_rt.Runtime().trace_json()


def test_check_finds_broken_files():
    good = {
        "traceEvents": [
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "core 0"}},
            {"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0.0, "dur": 10.0},
            {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 2.0, "dur": 3.0},
            {"ph": "i", "s": "t", "name": "sig", "pid": 0, "tid": 0, "ts": 6.0},
            {"ph": "s", "name": "release", "cat": "flow", "id": 1, "pid": 0, "tid": 0, "ts": 6.0},
            {"ph": "f", "bp": "e", "name": "release", "cat": "flow", "id": 1, "pid": 0, "tid": 0, "ts": 9.0},
        ],
        "otherData": {"num_devices": 1, "cores_per_device": 1},
    }
    assert timeline.check(good) == []
    overlap = json.loads(json.dumps(good))
    overlap["traceEvents"][2]["dur"] = 30.0
    assert any("overlaps" in p for p in timeline.check(overlap))
    dangling = json.loads(json.dumps(good))
    del dangling["traceEvents"][5]
    assert any("only one end" in p for p in timeline.check(dangling))
    backwards = json.loads(json.dumps(good))
    backwards["traceEvents"][1]["ts"] = 7.0
    assert any("timestamp" in p for p in timeline.check(backwards))
    missing = json.loads(json.dumps(good))
    missing["otherData"]["cores_per_device"] = 2
    assert any("core tracks" in p for p in timeline.check(missing))


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "mosaic_rt", "trace", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )


def test_cli_summarises_checks_and_draws(trace_dir):
    pytest.importorskip("matplotlib")
    path = str(trace_dir / "cli.json")
    run(ring_kernel(fresh_uid(), path))
    png = trace_dir / "timeline.png"
    r = _cli(path, "--png", str(png), "--check")
    assert r.returncode == 0, r.stderr
    assert "structure: ok" in r.stdout and "18 flows" in r.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = trace_dir / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "s", "id": 3, "pid": 0, "tid": 0, "ts": 1}]}')
    r = _cli(str(bad), "--check")
    assert r.returncode == 1 and "only one end" in r.stdout
    r = _cli(str(trace_dir / "missing.json"))
    assert r.returncode == 2 and "cannot read" in r.stderr
