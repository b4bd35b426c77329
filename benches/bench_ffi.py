"""Native FFI semaphores vs io_callback + threading.Condition, same work.

Run: python benches/bench_ffi.py  (prints a table; not a test).

* single device: signal+wait pairs in a fori_loop, cost per op;
* 2 devices: ping-pong round trips (0 -> 1 -> 0);
* 8 devices: a ring round trip (0 -> 1 -> ... -> 7 -> 0).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))

import ffi_support
import jax
import jax.numpy as jnp
import mosaic_rt.ffi as F
import numpy as np
from jax.experimental import io_callback
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

_uid = [90_000]


def uid():
    _uid[0] += 1
    return _uid[0]


def sharded_runner(n, body):
    mesh = jax.make_mesh((n,), ("x",), devices=jax.devices()[:n])
    fn = jax.jit(
        jax.shard_map(lambda z: body(jax.lax.axis_index("x"), z), mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    )
    z = jax.device_put(jnp.zeros((n,), jnp.int32), NamedSharding(mesh, P("x")))
    return lambda: fn(z).block_until_ready()


def best_time(run, reps=5):
    run()  # compile + warm up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------- native path


def native_program(n, steps, pattern):
    u = uid()

    def body(d, z):
        with ffi_support.kernel(F.new_token(), d, uid=u, num_devices=n, wait_timeout=60) as k:
            k.token, s = F.allocate_semaphores(k.token, k.handle, d, 0)
            h = k.handle

            def sig(t, to):
                return F.semaphore_signal(t, h, d, 0, s, 1, target_device=to)

            def wait(t):
                return F.semaphore_wait(t, h, d, 0, s, 1)

            def step(i, t):
                return pattern(d, n, t, sig, wait)

            k.token = jax.lax.fori_loop(0, steps, step, k.token)
        return z + k.token

    return sharded_runner(n, body)


# ------------------------------------------------- io_callback + Condition


class PySemaphores:
    """One counter per device behind a Condition, as a Python interpreter would."""

    def __init__(self, n):
        self.cond = threading.Condition()
        self.counts = [0] * n

    def signal(self, target, tok):
        with self.cond:
            self.counts[int(target)] += 1
            self.cond.notify_all()
        return np.int32(tok)

    def wait(self, dev, tok):
        with self.cond:
            ok = self.cond.wait_for(lambda: self.counts[int(dev)] >= 1, timeout=60)
            if not ok:
                raise TimeoutError("python semaphore wait timed out")
            self.counts[int(dev)] -= 1
        return np.int32(tok)


def callback_program(n, steps, pattern):
    sems = PySemaphores(n)
    i32 = jax.ShapeDtypeStruct((), jnp.int32)

    def body(d, z):
        def sig(t, to):
            return io_callback(sems.signal, i32, to, t)

        def wait(t):
            return io_callback(sems.wait, i32, d, t)

        def step(i, t):
            return pattern(d, n, t, sig, wait)

        return z + jax.lax.fori_loop(0, steps, step, jnp.zeros((), jnp.int32))

    return sharded_runner(n, body)


# ----------------------------------------------------------------- patterns


def self_pair(d, n, t, sig, wait):
    return wait(sig(t, d))


def ping_pong(d, n, t, sig, wait):
    # device 0 sends first; device 1 answers.
    def first(t):
        return wait(sig(t, 1))

    def second(t):
        return sig(wait(t), 0)

    return jax.lax.cond(d == 0, first, second, t)


def ring(d, n, t, sig, wait):
    def starter(t):
        return wait(sig(t, 1 % n))

    def relay(t):
        return sig(wait(t), (d + 1) % n)

    return jax.lax.cond(d == 0, starter, relay, t)


CASES = [
    # name, devices, pattern, native steps, callback steps, ops (or hops) per step, unit
    ("1 device: signal+wait, per op", 1, self_pair, 50_000, 2_000, 2),
    ("2 devices: round trip", 2, ping_pong, 5_000, 300, 1),
    ("8 devices: ring round trip", 8, ring, 1_000, 40, 1),
]


def main():
    rows = []
    for name, n, pattern, native_steps, cb_steps, per_step in CASES:
        t_native = best_time(native_program(n, native_steps, pattern)) / (native_steps * per_step)
        t_cb = best_time(callback_program(n, cb_steps, pattern), reps=2) / (cb_steps * per_step)
        rows.append((name, t_native * 1e6, t_cb * 1e6, t_cb / t_native))
    print(f"jax {jax.__version__}, {os.cpu_count()} CPU cores")
    targets = ["<= 0.3 us", "<= 16 us, >= 100x", ""]
    print(f"{'case':34} {'mosaic_rt FFI (us)':>19} {'io_callback (us)':>17} {'speed-up':>9}  target")
    for (name, a, b, r), target in zip(rows, targets):
        print(f"{name:34} {a:19.3f} {b:17.1f} {r:8.0f}x  {target}")
    hop = rows[2][1] / 8
    print(f"8-device ring, per hop (mosaic_rt): {hop:.2f} us")


if __name__ == "__main__":
    main()
