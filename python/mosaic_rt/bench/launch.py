"""Launch cost per MiB of kernel data: two sweeps over the HBM input size
(256 KiB .. 8 MiB), stock and ours interleaved with numpy copies of the same
input: into a fresh array (`x.copy()`: allocation and first-touch page
faults included, like a result XLA allocates) and into a preallocated,
already-touched one (`np.copyto`: the warm-cache floor). Costs per MiB are
marginal (least-squares slopes over the sweep).

* The double-buffered DMA pipeline (`local.dma_pipeline`, 64 KiB chunks):
  a whole kernel, whose own work is several passes over the data (DMA to
  VMEM, load, x*2+1, store, DMA back, besides placing the input and reading
  the result). Ours against one numpy copy, for reference: it cannot reach
  1x.
* Launch overhead: a kernel whose body is one HBM -> HBM DMA of the whole
  `pl.ANY` input into the `pl.ANY` output (its one inherent copy). Its slope
  minus the fresh numpy copy's is what the launch adds per MiB (placing the
  input in simulated HBM, allocating and filling the output, reading it
  back -- today the input is borrowed and the DMA writes XLA's result
  buffer in place, so little is left); judged against one numpy copy
  (target <= 1x), stock's beside it.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from mosaic_rt.bench import local

CHUNK_ROWS = 128  # 128 x 128 f32 = 64 KiB per chunk
_CHUNK_BYTES = CHUNK_ROWS * 128 * 4
QUICK_MIB = (0.25, 1.0, 4.0)
FULL_MIB = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)


def _slope(xs, ys) -> float | None:
    if len(set(xs)) < 2:
        return None
    return float(np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)[0])


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _hbm_copy_kernel(x_ref, o_ref, sem):
    copy = pltpu.make_async_copy(x_ref, o_ref, sem)
    copy.start()
    copy.wait()


def hbm_copy(rows: int):
    """``(fn, (x,))``: a (rows, 128) float32 `pl.ANY` input DMA'd whole into
    the `pl.ANY` output (the launch overhead kernel)."""
    x = jnp.asarray(np.arange(rows * 128, dtype=np.float32).reshape(rows, 128))

    def fn(interpret):
        return jax.jit(
            pl.pallas_call(
                _hbm_copy_kernel,
                out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
                out_specs=pl.BlockSpec(memory_space=pl.ANY),
                scratch_shapes=[pltpu.SemaphoreType.DMA(())],
                interpret=interpret,
            )
        )

    return fn, (x,)


def _sweep(sizes_mib, make, expect, reps_ours: int, reps_stock: int):
    """``(points, slopes, ok)``: `make(mib)` -> ``(fn, x, extra)`` timed per size,
    stock / ours / numpy copies interleaved; `expect(src)` is the result."""
    from mosaic_rt.bench.measure import interpret_params

    stock_params, our_params = interpret_params(False)
    points, ok = [], True
    for mib in sizes_mib:
        fn, x, extra = make(mib)
        stock_fn, our_fn = fn(stock_params), fn(our_params)
        src = np.asarray(x)
        dst = np.empty_like(src)
        np.copyto(dst, src)
        expected = expect(src)
        outs = [np.asarray(jax.block_until_ready(f(x))) for f in (stock_fn, our_fn)]
        ok = ok and all(o.tobytes() == expected.tobytes() for o in outs)
        t = {"stock": [], "ours": [], "memcpy_fresh": [], "memcpy_warm": []}
        for i in range(max(reps_ours, reps_stock)):
            if i < reps_stock:
                t["stock"].append(_time(lambda: jax.block_until_ready(stock_fn(x))))  # noqa: B023 - called at once
            if i < reps_ours:
                t["ours"].append(_time(lambda: jax.block_until_ready(our_fn(x))))  # noqa: B023 - called at once
                t["memcpy_fresh"].append(_time(src.copy))
                t["memcpy_warm"].append(_time(lambda: np.copyto(dst, src)))  # noqa: B023 - called at once
        real_mib = src.nbytes / 2**20
        point = {"mib": real_mib, **extra}
        for k, v in t.items():
            point[f"{k}_s"] = statistics.median(v)
            point[f"{k}_ms_per_mib"] = statistics.median(v) * 1e3 / real_mib
            point[f"{k}_reps"] = len(v)
        points.append(point)
    mibs = [p["mib"] for p in points]
    slopes = {
        k: _slope(mibs, [p[f"{k}_s"] * 1e3 for p in points]) for k in ("stock", "ours", "memcpy_fresh", "memcpy_warm")
    }
    return points, slopes, ok


def run_overhead(sizes_mib, reps_ours: int, reps_stock: int) -> dict:
    """The launch overhead sweep (see the module doc)."""

    def make(mib):
        rows = max(8, int(round(mib * 2**20 / (128 * 4) / 8)) * 8)
        fn, (x,) = hbm_copy(rows)
        return fn, x, {"rows": rows}

    points, slopes, ok = _sweep(sizes_mib, make, lambda src: src, reps_ours, reps_stock)
    ref = slopes["memcpy_fresh"]
    overhead = {k: slopes[k] - ref if slopes[k] is not None and ref is not None else None for k in ("stock", "ours")}
    return {
        "points": points,
        "ms_per_mib": slopes,
        "overhead_ms_per_mib": overhead,  # side's slope minus the fresh copy's
        "ours_over_memcpy": overhead["ours"] / ref if overhead["ours"] is not None and ref else None,
        "stock_over_memcpy": overhead["stock"] / ref if overhead["stock"] is not None and ref else None,
        "ok": ok,
    }


def run_launch(sizes_mib, reps_ours: int, reps_stock: int) -> dict:
    """The DMA pipeline sweep, with the launch overhead sweep under "overhead"."""

    def make(mib):
        chunks = max(2, int(round(mib * 2**20 / _CHUNK_BYTES)))
        fn, (x,) = local.dma_pipeline(chunks, CHUNK_ROWS)
        return fn, x, {"chunks": chunks}

    points, slopes, ok = _sweep(sizes_mib, make, lambda src: src * 2 + 1, reps_ours, reps_stock)
    ours, ref = slopes["ours"], slopes["memcpy_fresh"]
    return {
        "chunk_bytes": _CHUNK_BYTES,
        "points": points,
        "ms_per_mib": slopes,  # marginal (slope over the sweep)
        "ours_over_memcpy": ours / ref if ours and ref else None,
        "ok": ok,
        "overhead": run_overhead(sizes_mib, reps_ours, reps_stock),
    }
