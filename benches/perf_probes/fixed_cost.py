"""Per-launch fixed cost and device start stagger (issue 13, steady state).

`python fixed_cost.py [ROUNDS]` prints two things:

1. The steady-state cost of a kernel that only copies its (16, 128) f32
   block (`collective_id=0`, so no launch barrier), next to XLA's identity
   shard_map over the same mesh, for 1, 2, 4 and 8 devices. The 1-device
   row is our fixed cost per device program (prologue, a load, a store,
   kernel_end); the 8-device row shows what it becomes with 8 device
   threads on the machine's CPUs. Every round runs each case once, in an
   order rotated per round: the first launch after an 8-device one finds
   cold caches and threads, so a fixed order biases whichever comes first.
2. The cost of one reduce-scatter step's own work (load a chunk, load the
   received block, add, store into the send buffer; no DMA) in a 1-device
   kernel: the same kernel with 0, 1 and 7 steps.
3. When each device's kernel body started in one steady-state launch of the
   bench's ring reduce-scatter (8 devices), read from the launch timeline
   (`trace_path`): the ring cannot progress before the last device is in.
"""
import dataclasses
import functools
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from mosaic_rt.bench import collectives, measure  # noqa: E402

ROWS = 16
_, ours = measure.interpret_params(False)


def _copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def _cases():
    cases = {}
    for n in (1, 2, 4, 8):
        mesh = collectives._mesh(n)
        x = collectives._sharded(collectives._block_input(n, ROWS), mesh)
        call = pl.pallas_call(
            _copy_kernel, out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            compiler_params=pltpu.CompilerParams(collective_id=0), interpret=ours)
        cases[f"copy kernel, {n} dev"] = (collectives._shard_map(call, mesh), x)
        cases[f"XLA identity, {n} dev"] = (collectives._shard_map(lambda v: v + 0, mesh), x)
    return cases


def fixed_costs(rounds: int):
    cases = _cases()
    for fn, x in cases.values():
        jax.block_until_ready(fn(x))
    names = list(cases)
    times = {k: [] for k in names}
    for r in range(rounds):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            fn, x = cases[k]
            start = time.perf_counter()
            jax.block_until_ready(fn(x))
            times[k].append(time.perf_counter() - start)
    for k in names:
        print(f"{k:24s} median {statistics.median(times[k]) * 1e6:7.1f} us")


def _steps_kernel(steps, n, x_ref, o_ref, send_buf, recv_buf):
    me = jax.lax.axis_index("x")
    recv_buf[...] = jnp.zeros_like(recv_buf)
    for step in range(steps):
        c = (me - step - 1) % n
        chunk = x_ref[pl.ds(pl.multiple_of(c * ROWS, ROWS), ROWS), :]
        send_buf[step] = chunk + recv_buf[step]
    o_ref[...] = send_buf[0] if steps else recv_buf[0]


def step_costs(rounds: int, n: int = 8):
    mesh = collectives._mesh(1)
    x = collectives._sharded(collectives._block_input(n, ROWS), mesh)
    cases = {}
    for steps in (0, 1, 7):
        call = pl.pallas_call(
            functools.partial(_steps_kernel, steps, n),
            out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            scratch_shapes=[pltpu.VMEM((n - 1, ROWS, 128), jnp.float32)] * 2,
            compiler_params=pltpu.CompilerParams(collective_id=0), interpret=ours)
        cases[steps] = collectives._shard_map(call, mesh)
    for fn in cases.values():
        jax.block_until_ready(fn(x))
    times = {k: [] for k in cases}
    names = list(cases)
    for r in range(rounds):
        k0 = r % len(names)
        for k in names[k0:] + names[:k0]:
            start = time.perf_counter()
            jax.block_until_ready(cases[k](x))
            times[k].append(time.perf_counter() - start)
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    for k, v in med.items():
        print(f"reduce-scatter steps without DMAs, 1 dev, {k} steps: median {v:7.1f} us")
    print(f"  per step: {(med[7] - med[0]) / 7:.2f} us")


def start_stagger(calls: int = 30):
    fn, args = collectives.reduce_scatter(8, ROWS)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        f = fn(dataclasses.replace(ours, trace_path=path))
        for _ in range(calls):  # the file holds the last launch
            jax.block_until_ready(f(*args))
        with open(path) as fh:
            events = json.load(fh)
    events = events["traceEvents"] if isinstance(events, dict) else events
    bodies = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("step")]
    t0 = min(e["ts"] for e in bodies)
    print("reduce-scatter 8 dev, one steady-state launch (with tracing on):")
    for e in sorted(bodies, key=lambda e: e["ts"]):
        print(f"  device {e['pid']}: body starts at {e['ts'] - t0:7.1f} us, "
              f"ends at {e['ts'] + e['dur'] - t0:7.1f} us")


if __name__ == "__main__":
    fixed_costs(int(sys.argv[1]) if len(sys.argv) > 1 else 400)
    step_costs(4 * (int(sys.argv[1]) if len(sys.argv) > 1 else 400))
    start_stagger()
