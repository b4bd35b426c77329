"""Steady-state cost of one grid step of the BlockSpec add, and XLA's floor.

Usage: python benches/perf_probes/grid_step_cost.py [--loop N] [--hlo]

Times `blockspec_add(grid)` (mosaic_rt.InterpretParams) at two grid sizes and
reports the slope per grid step; next to it a `lax.fori_loop` with a trivial
body carrying the same block-sized state (XLA's own per-iteration cost, the
floor of any emitted loop). `--loop N` instead just calls grid=N forever (for
perf record / py-spy). `--hlo` prints the optimized HLO of the emitted program.
"""

from __future__ import annotations

import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import mosaic_rt
from mosaic_rt.bench import local

SMALL, LARGE = 64, 512


def _median_time(f, args, reps):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), float(np.min(ts))


def _add_program(grid):
    fn, args = local.blockspec_add(grid)
    return fn(mosaic_rt.InterpretParams(wait_timeout=60.0)), args


def _floor_program(grid, rows=8):
    """A fori_loop of `grid` iterations whose body reads two (rows, 128)
    blocks of x, y and writes one of the output (what XLA itself pays)."""
    def f(x, y):
        def body(i, o):
            xs = lax.dynamic_slice_in_dim(x, i * rows, rows)
            ys = lax.dynamic_slice_in_dim(y, i * rows, rows)
            return lax.dynamic_update_slice_in_dim(o, xs + ys, i * rows, 0)
        return lax.fori_loop(0, grid, body, jnp.zeros_like(x))
    _, args = local.blockspec_add(grid)
    return jax.jit(f), args


def _trivial_program(grid):
    """A fori_loop of `grid` iterations with a scalar counter body."""
    f = jax.jit(lambda x: lax.fori_loop(0, grid, lambda i, c: c + i, x))
    return f, (jnp.int32(0),)


def _slope(make, reps=200):
    (fs, a_s), (fl, a_l) = make(SMALL), make(LARGE)
    small = _median_time(fs, a_s, reps)
    large = _median_time(fl, a_l, reps)
    return (large[0] - small[0]) / (LARGE - SMALL) * 1e6, (large[1] - small[1]) / (LARGE - SMALL) * 1e6


def main(argv):
    if "--hlo" in argv:
        f, args = _add_program(8)
        print(f.lower(*args).compile().as_text())
        return
    if "--loop" in argv:
        n = int(argv[argv.index("--loop") + 1])
        f, args = _add_program(n)
        f(*args).block_until_ready()
        while True:
            f(*args).block_until_ready()
    print(f"jax {jax.__version__}; slope between grid={SMALL} and grid={LARGE}, us/step median [min]")
    for name, make in [("blockspec add", _add_program), ("fori_loop block add", _floor_program),
                       ("fori_loop trivial", _trivial_program)]:
        med, mn = _slope(make)
        print(f"  {name:22s} {med:7.3f} [{mn:7.3f}]")


if __name__ == "__main__":
    main(sys.argv[1:])
