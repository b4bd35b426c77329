"""Where a cold call's time goes: trace, lowering (interpreter Python vs MLIR
emission), XLA compile and first run, for stock and ours, beside a plain jnp
program computing the same thing with the same grid loop.

Uses jax's ahead-of-time stages (`jit(f).trace(...).lower().compile()`).
The interpreter's own Python is the time spent inside pallas_call's
interpret-mode seam (`interpret_pallas_call`, ours or stock's), measured by a
timing wrapper installed on that module attribute for the row only; "MLIR"
is the rest of `lower()` (jax emitting StableHLO for the program the
interpreter traced). Every measurement uses fresh shapes, so no cache helps.

"A plain jnp program of the same size" is what a jnp author would write for
the same kernel: a `fori_loop` over the same grid, slicing the same blocks
with `lax.dynamic_slice` and writing them with `dynamic_update_slice`.
"""

from __future__ import annotations

import functools
import itertools
import re
import statistics
import time

import jax
import jax.numpy as jnp
from jax import lax

from mosaic_rt.bench import local


def _jnp_add(grid, rows):
    def f(x, y):
        def body(i, o):
            a = lax.dynamic_slice_in_dim(x, i * rows, rows)
            b = lax.dynamic_slice_in_dim(y, i * rows, rows)
            return lax.dynamic_update_slice_in_dim(o, a + b, i * rows, 0)

        return lax.fori_loop(0, grid, body, jnp.zeros_like(x))

    return jax.jit(f)


def _jnp_pipeline(chunks):
    def f(x):
        def body(i, o):
            return lax.dynamic_update_index_in_dim(o, x[i] * 2.0 + 1.0, i, 0)

        return lax.fori_loop(0, chunks, body, jnp.zeros_like(x))

    return jax.jit(f)


def _jnp_matmul(blocks, tile):
    def f(a, b):
        def body(step, carry):
            o, acc = carry
            i, j, k = step // (blocks * blocks), (step // blocks) % blocks, step % blocks
            acc = jnp.where(k == 0, jnp.zeros_like(acc), acc)
            ab = lax.dynamic_slice(a, (i * tile, k * tile), (tile, tile))
            bb = lax.dynamic_slice(b, (k * tile, j * tile), (tile, tile))
            acc = acc + jnp.dot(ab, bb, preferred_element_type=jnp.float32)
            o = jnp.where(k == blocks - 1, lax.dynamic_update_slice(o, acc, (i * tile, j * tile)), o)
            return o, acc

        o = jnp.zeros((blocks * tile, blocks * tile), jnp.float32)
        acc = jnp.zeros((tile, tile), jnp.float32)
        return lax.fori_loop(0, blocks**3, body, (o, acc))[0]

    return jax.jit(f)


# name -> variant(k) -> (pallas program(params), jnp program, args); fresh shapes per k.
def _kernels():
    def add(k):
        rows = 24 + 8 * k
        fn, args = local.blockspec_add(8, rows)
        return fn, _jnp_add(8, rows), args

    def pipeline(k):
        rows = 24 + 8 * k
        fn, args = local.dma_pipeline(8, rows)
        return fn, _jnp_pipeline(8), args

    def matmul(k):
        tile = 136 + 8 * k
        fn, args = local.blocked_matmul(2, tile)
        return fn, _jnp_matmul(2, tile), args

    return {"blockspec-add grid=8": add, "dma-pipeline chunks=8": pipeline, "matmul grid=2^3": matmul}


class _SeamTimer:
    """Times calls of the interpret-mode seam (stock's and ours) while active."""

    def __init__(self):
        from mosaic_rt import jax_internals as jx

        self.module, self.attr = jx.PALLAS_CALL_SEAM
        self.spent = 0.0

    def __enter__(self):
        inner = self.original = getattr(self.module, self.attr)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.spent += time.perf_counter() - start

        setattr(self.module, self.attr, timed)
        return self

    def __exit__(self, *exc):
        setattr(self.module, self.attr, self.original)
        return False


def _kernel_count(hlo_text: str) -> int:
    """Fusions in the optimized module: XLA:CPU compiles each to machine code."""
    return len(re.findall(r"= \S+ fusion\(", hlo_text))


def _stages(fn, args, timer: _SeamTimer | None) -> dict:
    if timer is not None:
        timer.spent = 0.0
    t0 = time.perf_counter()
    traced = fn.trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    interp = timer.spent if timer is not None else 0.0
    return {
        "trace_s": t1 - t0,
        "interp_s": interp,
        "mlir_s": t2 - t1 - interp,
        "compile_s": t3 - t2,
        "run_s": t4 - t3,
        "kernels": _kernel_count(compiled.as_text()),
    }


def run_lowering(reps: int) -> dict:
    from mosaic_rt.bench.measure import interpret_params

    stock_params, our_params = interpret_params(False)
    counter = itertools.count()
    out = []
    with _SeamTimer() as timer:
        for name, variant in _kernels().items():
            samples = {"stock": [], "ours": [], "jnp": []}
            for rep in range(reps):
                order = ["stock", "ours", "jnp"] if rep % 2 == 0 else ["jnp", "ours", "stock"]
                for side in order:
                    pallas, plain, args = variant(next(counter))
                    if side == "jnp":
                        samples[side].append(_stages(plain, args, None))
                    else:
                        params = stock_params if side == "stock" else our_params
                        samples[side].append(_stages(pallas(params), args, timer))
            row = {"name": name}
            for side, xs in samples.items():
                row[side] = {k: statistics.median(x[k] for x in xs) for k in xs[0]}
                row[side]["kernels"] = int(round(row[side]["kernels"]))
                row[side]["reps"] = len(xs)
            row["ours_compile_over_jnp"] = row["ours"]["compile_s"] / row["jnp"]["compile_s"]
            out.append(row)
    return {"kernels": out, "reps": reps}
