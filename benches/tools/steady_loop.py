"""One bench case's steady state in a loop, for an outside profiler: `perf`
samples or callgrind instruction counts of exactly the calls, none of the
import, trace or compile before them.

    python benches/tools/steady_loop.py CASE [--calls N] [--native]

CASE is a bench case (`python -m mosaic_rt bench --list`, e.g.
"reduce-scatter 8dev 8KiB") or "copy 1dev": a kernel that only copies its
(16, 128) f32 block on one device, the fixed cost of one device program.
`--native` runs XLA's own equivalent of a collective case instead of ours.
After 10 warm-up calls it times N calls and prints the time per call.

With perf, sampling on during the timed loop only (the tool writes
`enable` / `disable` to the control fifo named by PERF_CTL):

    mkfifo /tmp/ctl
    perf record -g -D -1 --control fifo:/tmp/ctl -o ours.data -- \\
        env PERF_CTL=/tmp/ctl python benches/tools/steady_loop.py "all-gather 8dev 8KiB"

Instructions inside our XLA FFI handlers only (exact, whatever else the
machine does, so two builds compare without noise; divide the "Collected"
total by N + 10):

    valgrind --tool=callgrind --toggle-collect='mosaic_rt_ffi::c_handlers::*' \\
        python benches/tools/steady_loop.py "copy 1dev" --calls 100

`perf stat -e task-clock,context-switches` of two runs with different N
gives CPU time and context switches per call by difference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _common import bench_case, use_cpu_devices

WARM_UP = 10
ROWS = 16  # of the copy kernel's f32 block, per device


def copy_kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def copy_program(devices: int, params):
    """A kernel that copies its block on each of `devices` devices, with no
    launch barrier (`collective_id=0`), and its sharded input."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from mosaic_rt.bench import collectives

    mesh = collectives._mesh(devices)
    x = collectives._sharded(collectives._block_input(devices, ROWS), mesh)
    call = pl.pallas_call(
        copy_kernel,
        out_shape=jax.ShapeDtypeStruct((ROWS, 128), jnp.float32),
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=params,
    )
    return collectives._shard_map(call, mesh), (x,)


def _perf(command: str) -> None:
    ctl = os.environ.get("PERF_CTL")
    if ctl:
        with open(ctl, "w") as fifo:
            fifo.write(command + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls")
    parser.add_argument("--native", action="store_true", help="XLA's own collective instead")
    opts = parser.parse_args(argv)
    use_cpu_devices(8)
    import jax
    from mosaic_rt.bench import measure

    _, ours = measure.interpret_params(False)
    if opts.case == "copy 1dev":
        if opts.native:
            parser.error("'copy 1dev' has no native equivalent")
        f, args = copy_program(1, ours)
    else:
        case = bench_case(opts.case)
        if opts.native and case.native is None:
            parser.error(f"{opts.case!r} has no XLA native equivalent")
        program, args = case.build()
        f = case.native() if opts.native else program(ours)
    for _ in range(WARM_UP):
        jax.block_until_ready(f(*args))
    _perf("enable")
    start = time.perf_counter()
    for _ in range(opts.calls):
        jax.block_until_ready(f(*args))
    elapsed = time.perf_counter() - start
    _perf("disable")
    side = "native" if opts.native else "ours"
    print(
        f"{opts.case} ({side}): {opts.calls} calls after {WARM_UP} warm-up, "
        f"{elapsed / opts.calls * 1e6:.1f} us per call",
        file=sys.stdout,
        flush=True,
    )


if __name__ == "__main__":
    main()
