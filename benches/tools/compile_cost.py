"""What XLA:CPU's compile costs per fusion, in plain jax (no mosaic_rt):
the number behind emitting native calls instead of XLA compute.

    python benches/tools/compile_cost.py [--fusions 0,1,2,4,8] [--reps N]

Compiles a jit of N elementwise steps kept apart by optimization barriers
(so each is a fusion of its own), alone and inside an 8-device shard_map,
with shapes of their own per rep (no cache), and prints the median compile
time per N and the cost of each fusion beyond the first. Rerun it on a new
jaxlib: if a fusion gets cheap, fewer of our native calls pay.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import use_cpu_devices


def steps(n: int):
    import jax

    def body(x):
        for i in range(n):
            x = jax.lax.optimization_barrier(x * (1.0 + i) + 0.5)
        return x

    return body


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fusions", default="0,1,2,4,8", help="comma-separated fusion counts")
    parser.add_argument("--reps", type=int, default=5)
    opts = parser.parse_args(argv)
    counts = [int(n) for n in opts.fusions.split(",")]
    use_cpu_devices(8)
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
    from mosaic_rt.bench import collectives

    jax.config.update("jax_enable_compilation_cache", False)
    mesh = collectives._mesh(8)
    print(f"jax {jax.__version__}; median compile of {opts.reps} fresh shapes, ms")
    shape_salt = 0
    for where in ("plain jit", "shard_map"):
        medians = {}
        for n in counts:
            times = []
            for _ in range(opts.reps):
                shape_salt += 1
                x = jnp.ones((8 * (4 + shape_salt), 128), jnp.float32)
                if where == "shard_map":
                    x = jax.device_put(x, NamedSharding(mesh, P("x")))
                    fn = collectives._shard_map(steps(n), mesh)
                else:
                    fn = jax.jit(steps(n))
                lowered = fn.lower(x)
                start = time.perf_counter()
                lowered.compile()
                times.append(time.perf_counter() - start)
            medians[n] = statistics.median(times) * 1e3
            print(f"{where:9s} {n:2d} fusions: compile {medians[n]:6.1f} ms", flush=True)
        more = [n for n in counts if n > 1]
        if 1 in medians and more:
            top = max(more)
            print(
                f"{where:9s} each fusion beyond the first: {(medians[top] - medians[1]) / (top - 1):.1f} ms", flush=True
            )


if __name__ == "__main__":
    main()
