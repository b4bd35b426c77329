"""Steady-state launches to count our handlers' instructions with callgrind.

    valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        --toggle-collect='mosaic_rt_ffi::c_handlers::*' \\
        python handler_instructions.py CASE [CALLS]

counts instructions only inside our XLA FFI handlers (and what they call),
so two builds compare exactly, whatever else the machine is doing; divide
the "Collected" total by (CALLS + 10 warm-up calls). `callgrind_annotate
cg.out` then lists where they go. CASE: `copy` (a 1-device kernel that
copies its (16, 128) block: the fixed cost of one device program),
`reduce-scatter` or `all-gather` (the bench's 8-device rings, 8 KiB
blocks). Memory copies count one instruction per byte where libc uses
`rep movsb` (large copies), so they weigh more here than in time.
"""
import os
import sys

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from mosaic_rt.bench import collectives, measure  # noqa: E402
from fixed_cost import ROWS, _copy_kernel  # noqa: E402  (the same copy-only kernel)


def _case(name: str, ours):
    if name == "copy":
        mesh = collectives._mesh(1)
        x = collectives._sharded(collectives._block_input(1, ROWS), mesh)
        call = pl.pallas_call(
            _copy_kernel, out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
            compiler_params=pltpu.CompilerParams(collective_id=0), interpret=ours)
        return collectives._shard_map(call, mesh), (x,)
    build = {"reduce-scatter": collectives.reduce_scatter, "all-gather": collectives.all_gather}[name]
    fn, args = build(8, ROWS)
    return fn(ours), args


def main(name: str, calls: int):
    f, args = _case(name, measure.interpret_params(False)[1])
    for _ in range(10 + calls):
        jax.block_until_ready(f(*args))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100)
