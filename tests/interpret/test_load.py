"""Load: many simulated devices and cores at once, and many launches.

Both are marked slow (the developer loop, `pytest -q`, deselects them; the test command runs them); their figures go
to benches/RESULTS.md. Each prints what it measured (`pytest -s`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import mosaic_rt
import numpy as np
import pytest
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

pytestmark = pytest.mark.slow

_RING = textwrap.dedent("""
    import os, sys, time
    D, C = int(sys.argv[1]), int(sys.argv[2])
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import Mesh, PartitionSpec as P
    import mosaic_rt

    def kernel(x_ref, o_ref, sem):
        # A ring over every (device, core): signal the next one, wait for
        # the previous one.
        g = lax.axis_index("x") * C + pl.program_id(0)
        nxt = lax.rem(g + 1, D * C)
        pl.semaphore_signal(sem, 1, device_id=(nxt // C,), core_index=nxt % C)
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...] + g.astype(jnp.float32)

    def call(x):
        spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct((8 * C, 128), jnp.float32),
            grid=(C,), in_specs=[spec], out_specs=spec,
            scratch_shapes=[pltpu.SemaphoreType.REGULAR],
            compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)),
            interpret=mosaic_rt.InterpretParams(num_cores_or_threads=C, wait_timeout=120))(x)

    mesh = Mesh(np.array(jax.devices()[:D]), ("x",))
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                              check_vma=False))
    x = jnp.zeros((8 * C * D, 128), jnp.float32)
    t = time.perf_counter()
    out = np.asarray(f(x))
    first = time.perf_counter() - t
    t = time.perf_counter()
    out = np.asarray(f(x))
    again = time.perf_counter() - t
    want = np.repeat(np.arange(D * C, dtype=np.float32), 8)[:, None] * np.ones((1, 128))
    assert (out == want).all()
    print(f"RING devices={D} cores={C} first_call_s={first:.2f} run_s={again:.3f}")
""")


@pytest.mark.timeout(600)
def test_64_devices_by_4_cores_ring_exchange(tmp_path):
    script = tmp_path / "ring.py"
    script.write_text(_RING)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, str(script), "64", "4"], capture_output=True, text=True, timeout=540, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RING"))
    print(line)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.timeout(900)
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_memory_is_flat_over_1000_launches():
    n = 2
    mesh = Mesh(np.array(jax.devices()[:n]), ("x",))

    def kernel(x_ref, o_ref, scratch, send, recv):
        me = lax.axis_index("x")
        scratch[...] = x_ref[...] + 1.0
        # The peer must be inside the kernel before we write its memory.
        barrier = pltpu.get_barrier_semaphore()
        pl.semaphore_signal(barrier, 1, device_id=(lax.rem(me + 1, n),))
        pl.semaphore_wait(barrier, 1)
        copy = pltpu.make_async_remote_copy(scratch, o_ref, send, recv, device_id=(lax.rem(me + 1, n),))
        copy.start()
        copy.wait()

    call = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((64, 128), jnp.float32),
        scratch_shapes=[pltpu.VMEM((64, 128), jnp.float32), pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=mosaic_rt.InterpretParams(),
    )
    f = jax.jit(jax.shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x"), check_vma=False))
    x = jax.device_put(np.ones((64 * n, 128), np.float32), NamedSharding(mesh, P("x")))
    rss = {}
    start = time.perf_counter()
    for i in range(1, 1001):
        out = f(x)
        if i in (100, 1000):
            jax.block_until_ready(out)
            rss[i] = _rss_bytes()
    np.testing.assert_array_equal(np.asarray(out), 2.0)
    growth = rss[1000] / rss[100] - 1
    print(
        f"LAUNCHES 1000 in {time.perf_counter() - start:.1f}s; RSS at 100:"
        f" {rss[100] / 2**20:.1f} MiB, at 1000: {rss[1000] / 2**20:.1f} MiB"
        f" ({growth:+.1%})"
    )
    assert growth < 0.10
