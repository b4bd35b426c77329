"""Deadlock detection latency (prints a table; not a test).

* transition: every core is known to be blocked -- the event that completes
  the deadlock (here: the last device leaving) fails the waiters at once.
  Measured with `mosaic_rt.Runtime(detect_deadlocks=True)`: from the leave
  to the waiter's DeadlockError, and for 2..8 crossed waits through the FFI
  (a launch that deadlocks vs the same launch that does not).
* idle: a device never joins the launch (its program skips the kernel, e.g.
  a lax.cond branch); found once the process has been idle for the idle
  window (default 0.8 s) plus up to one detector period (0.1 s).
* hot path: cost of detection on parks (a 2-device ping-pong of blocking
  waits, detection on vs off).

Run: python benches/bench_deadlock.py
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))

import jax
import jax.numpy as jnp
import mosaic_rt
import mosaic_rt.ffi as F
from ffi_support import begin, dummy_rows, fresh_uid, on_devices, with_token


def transition_latency(reps=50):
    out = []
    for _ in range(reps):
        rt = mosaic_rt.Runtime(2, detect_deadlocks=True, wait_timeout=30)
        sem = rt.allocate_semaphores(0, kind="regular")
        rt.allocate_semaphores(1, kind="regular")
        got = {}

        def waiter():
            try:
                rt.wait(0, 0, sem, 1)  # noqa: B023 - joined in this iteration
            except mosaic_rt.DeadlockError:
                got["t"] = time.perf_counter()  # noqa: B023 - joined in this iteration

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.01)  # let it park
        t0 = time.perf_counter()
        rt.leave(1)
        t.join()
        out.append(got["t"] - t0)
    return out


def _crossed(n, bug):
    uid = fresh_uid()

    def body(d, _):
        with begin(d, n, uid=uid, wait_timeout=30) as k:
            k.token, sem = F.allocate_semaphores(k.token, k.handle, d, 0)
            right = (d + 1) % n
            if bug:  # wait first: every device waits for its left neighbour
                k.token = F.semaphore_wait(k.token, k.handle, d, 0, sem, 1)
                k.token = F.semaphore_signal(k.token, k.handle, d, 0, sem, 1, target_device=right)
            else:
                k.token = F.semaphore_signal(k.token, k.handle, d, 0, sem, 1, target_device=right)
                k.token = F.semaphore_wait(k.token, k.handle, d, 0, sem, 1)
        return with_token(jnp.zeros((1, 1), jnp.int32), k.token)

    fn, args = on_devices(n, body, dummy_rows(n))
    return fn, args


def _time_call(fn, args, expect_deadlock, reps):
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        try:
            with mosaic_rt.native_errors():
                jax.block_until_ready(fn(*args))
            assert not expect_deadlock
        except mosaic_rt.DeadlockError:
            assert expect_deadlock
        times.append(time.perf_counter() - t0)
    return times


def ffi_latency(n, reps=20):
    ok_fn, ok_args = _crossed(n, bug=False)
    bad_fn, bad_args = _crossed(n, bug=True)
    _time_call(ok_fn, ok_args, False, 2)
    _time_call(bad_fn, bad_args, True, 2)
    ok = _time_call(ok_fn, ok_args, False, reps)
    bad = _time_call(bad_fn, bad_args, True, reps)
    return statistics.median(ok), statistics.median(bad)


def idle_latency(reps=5):
    from jax.experimental import pallas as pl

    def kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1

    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])

    def body(b):
        call = pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct(b.shape, b.dtype),
            interpret=mosaic_rt.InterpretParams(wait_timeout=30),
        )
        return jax.lax.cond(jax.lax.axis_index("x") == 0, call, lambda v: v, b)

    P = jax.sharding.PartitionSpec
    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(jnp.ones((16, 128), jnp.float32), jax.sharding.NamedSharding(mesh, P("x")))
    _time_call(fn, (x,), True, 1)  # compile
    return _time_call(fn, (x,), True, reps)


def park_cost(rounds=3000):
    def run(detect):
        rt = mosaic_rt.Runtime(2, detect_deadlocks=detect, wait_timeout=30)
        sem = rt.allocate_semaphores(0)
        rt.allocate_semaphores(1)

        def peer():
            for _ in range(rounds):
                rt.wait(1, 0, sem, 1)
                rt.signal(1, 0, sem, 1, target_device=0)

        t = threading.Thread(target=peer)
        t.start()
        t0 = time.perf_counter()
        for _ in range(rounds):
            rt.signal(0, 0, sem, 1, target_device=1)
            rt.wait(0, 0, sem, 1)
        t.join()
        return (time.perf_counter() - t0) / rounds

    off = min(run(False) for _ in range(3))
    on = min(run(True) for _ in range(3))
    return off, on


def main():
    lat = transition_latency()
    print("| case | detection latency |")
    print("|---|---|")
    print(
        f"| transition (last device leaves), Runtime | median {statistics.median(lat) * 1e6:.0f} us, "
        f"max {max(lat) * 1e6:.0f} us |"
    )
    for n in (2, 8):
        ok, bad = ffi_latency(n)
        print(
            f"| {n} crossed waits through the FFI | deadlocking launch {bad * 1e3:.2f} ms vs "
            f"correct launch {ok * 1e3:.2f} ms |"
        )
    idle = idle_latency()
    print(
        f"| device never joins (lax.cond), idle heuristic | median {statistics.median(idle):.2f} s, "
        f"max {max(idle):.2f} s (window 0.8 s + period 0.1 s) |"
    )
    off, on = park_cost()
    print(
        f"| 2-thread blocking ping-pong per round (Python Runtime) | detection off {off * 1e6:.1f} us, "
        f"on {on * 1e6:.1f} us |"
    )


if __name__ == "__main__":
    main()
