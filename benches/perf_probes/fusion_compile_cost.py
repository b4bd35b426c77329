"""What XLA:CPU's compile costs per fusion, in plain jax (no mosaic_rt): a
jit of N elementwise steps kept apart by optimization barriers (one fusion
each), inside an 8-device shard_map and alone; median of 5 fresh shapes.
Usage: python fusion_compile_cost.py"""
import os
import statistics
import time

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

jax.config.update("jax_enable_compilation_cache", False)
mesh = jax.make_mesh((8,), ("x",))


def steps(n):
    def body(x):
        for i in range(n):
            x = jax.lax.optimization_barrier(x * (1.0 + i) + 0.5)
        return x
    return body


for sharded in (True, False):
    for n in (0, 1, 2, 4, 8):
        times = []
        for rep in range(5):
            x = jnp.ones((8 * (4 + rep + 10 * n + (0 if sharded else 100)), 128), jnp.float32)
            if sharded:
                x = jax.device_put(x, jax.NamedSharding(mesh, P("x")))
                fn = jax.jit(jax.shard_map(steps(n), mesh=mesh, in_specs=P("x"), out_specs=P("x")))
            else:
                fn = jax.jit(steps(n))
            lowered = fn.lower(x)
            t0 = time.perf_counter()
            lowered.compile()
            times.append(time.perf_counter() - t0)
        where = "shard_map" if sharded else "plain jit"
        print(f"{where:9s} {n} fusions: compile {statistics.median(times) * 1e3:5.1f} ms", flush=True)
